// The CPU side of the timer: configuration checks and labels (the CUDA side is cuda/timer.cpp).
#include "bench/harness/timer.h"

#include <algorithm>
#include <string>

#include "braid/error.h"

namespace braid::bench {

namespace {

[[noreturn]] void bad_field(const char* field, const std::string& expected, int given) {
  throw_arg_error(ErrorKind::invalid_argument, "bench timer", field, expected,
                  std::to_string(given));
}

}  // namespace

void validate(const TimingConfig& c) {
  if (c.sets < 1) bad_field("sets", "at least 1", c.sets);
  if (c.warmup < 0) bad_field("warmup", "at least 0", c.warmup);
  if (c.reps < 1) bad_field("reps", "at least 1", c.reps);
  if (c.batch < 1) bad_field("batch", "at least 1", c.batch);
  if (c.mode == TimingMode::per_launch && c.batch != 1)
    bad_field("batch", "1 in per_launch mode (one launch per sample)", c.batch);
}

const char* mode_name(TimingMode mode) {
  switch (mode) {
    case TimingMode::per_launch: return "per_launch";
    case TimingMode::back_to_back: return "back_to_back";
    case TimingMode::graph: return "graph";
  }
  return "?";
}

std::string timing_label(const TimingConfig& c) {
  std::string label = mode_name(c.mode);
  if (c.mode != TimingMode::per_launch) label += " x" + std::to_string(c.batch);
  return label;
}

int rotating_sets(size_t bytes_per_set, size_t l2_bytes, int min_sets) {
  int sets = std::max(1, min_sets);
  if (bytes_per_set == 0) return sets;
  // Smallest n with n * bytes_per_set > 2 * l2_bytes.
  const size_t needed = 2 * l2_bytes / bytes_per_set + 1;
  return std::max(sets, static_cast<int>(std::min<size_t>(needed, 1u << 20)));
}

}  // namespace braid::bench
