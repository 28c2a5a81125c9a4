// `profile --ncu`: finding Nsight Compute, the command line that re-runs `braidinfer profile` under
// it, and running it (POSIX fork/exec; host code, no CUDA).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "bench/profile/ncu_csv.h"

namespace braid::bench {

// ncu's path: $NCU when set (it must exist), else the first "ncu" on PATH, else
// /usr/local/cuda/bin/ncu. Throws braid::Error (unsupported) saying where it looked.
std::string find_ncu();
// The same search over given values (tests): `exists` says whether a path is an executable file.
std::string find_ncu_in(const std::string& env_ncu, const std::string& path_env,
                        const std::function<bool(const std::string&)>& exists);

// One regex for ncu's --kernel-name from a comma-separated list: "a,b" -> "regex:(a)|(b)".
// Throws braid::Error (invalid_argument) for an empty list or an empty item.
std::string ncu_kernel_filter(const std::string& regex_list);

struct NcuRequest {
  std::string ncu;           // find_ncu()
  std::string kernel_regexes;  // comma-separated
  int launch_count = 100;    // launches profiled at most (--launch-count)
  std::string log_file;      // ncu's output (the CSV) goes here
  std::string program;       // the executable to profile
  std::vector<std::string> program_args;
};

// ncu --clock-control none --profile-from-start off --kernel-name regex:... --launch-count K
//     --csv --page raw --print-units base --print-kernel-base mangled --metrics ... --log-file F
//     PROGRAM ARGS...
// (the program starts and stops profiling with cudaProfilerStart/Stop around the phase wanted.)
std::vector<std::string> ncu_command(const NcuRequest& request);
// The command as one line a shell would read back (arguments quoted where needed).
std::string shell_line(const std::vector<std::string>& argv);

// Runs argv (argv[0] looked up on PATH when it has no '/'), waits, returns its exit status
// (128 + signal when a signal ended it). Throws braid::Error (io) when it cannot start.
int run_command(const std::vector<std::string>& argv);

// This process's executable (/proc/self/exe). Throws braid::Error (io) when unreadable.
std::string self_executable();

// Whole file as text. Throws braid::Error (io).
std::string read_text_file(const std::string& path);

struct NcuOutcome {
  std::string command;
  std::vector<NcuKernelMetrics> kernels;  // folded per kernel, not yet classified
  std::vector<std::string> missing_metrics;
};

// Runs the request, parses ncu's CSV and folds it. Throws braid::Error (io) when ncu fails (its
// exit status and the end of its log in the message) or profiled nothing.
NcuOutcome run_ncu(const NcuRequest& request);

}  // namespace braid::bench
