// The benchmark suites in one table (registry.cpp): `braidinfer bench NAME` runs a row's command,
// `bench --list` prints the rows, `bench all` makes every row's runs. A new suite is one file pair
// (suites/NAME.h, and suites/NAME.cpp or, when it measures on the GPU, suites/cuda/NAME.cpp) and
// one row here.
#pragma once

#include <string>
#include <vector>

#include "bench/harness/suite.h"

namespace braid::bench {

// Every suite, in the order `bench all` runs them and `bench --list` lists them. In a build
// without CUDA the suites that measure on the GPU are listed without their command.
const std::vector<Suite>& suites();

// `bench --list`: each suite, where it runs, what `bench all` runs of it, and its summary.
std::string suite_list();

struct AllOptions {
  std::string out_dir = "bench-results";
  bool quick = false;                    // every run's --quick
  std::vector<std::string> only, skip;  // groups (AllRun::group)
};

// `bench all`: the runs of every suite (AllRun), one after the other in this process, each writing
// FILE.json, FILE.csv and FILE.md into out_dir (tools/report.py turns the folder into a report),
// then a summary line per run. A run that fails does not stop the others. Returns 1 when one
// failed, 2 without a usable GPU; throws braid::Error (invalid_argument) for an unknown group.
int run_all(const AllOptions& options);

}  // namespace braid::bench
