// `braidinfer profile`: a CUPTI activity trace of one prefill and N decode steps, as per-kernel and
// per-component tables, launch gaps and a Chrome trace; with --ncu, Nsight Compute's figures and
// a roofline class for the kernels a regex picks (the command re-runs itself under ncu). The
// options are parsed by apps/braidinfer/profile_cmd.cpp.
#pragma once

#include <string>

#include "bench/profile/profile.h"

namespace braid::bench {

struct ProfileCommandOptions {
  ProfileOptions options;
  std::string trace_path, json_path, md_path;
  std::string ncu_regexes;
  std::string ncu_phase = "decode";
  int ncu_launch_count = 100;
  int top = 25;
  bool ncu_child = false;  // this process runs under ncu for its parent
};

// Checks the options, records, prints the report and writes the files asked for; returns the
// exit code (2 without a CUDA device). Throws braid::Error for bad options.
int run_profile_command(const ProfileCommandOptions& options);  // profile/cuda/command.cpp

}  // namespace braid::bench
