// The GPU runner of `bench kernels` (internal to src/bench/suites/cuda/kernels*.cpp): how a case's
// tensors are held, how it is launched and checked, and the host-side helpers the checks share.
// Each op family has a file that turns a KernelCase into a CasePlan:
//   kernels_rows.cpp       embedding .. add_inplace (memory-bound row ops)
//   kernels_gemm.cpp       gemm and the fused GEMM ops
//   kernels_attention.cpp  attention_prefill, attention, attention_decode,
//                          paged_kv_gather
//   kernels_moe.cpp        the bf16 MoE ops and routers
//   kernels_moe_fp8.cpp    the FP8 MoE ops
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench/harness/accuracy.h"
#include "bench/harness/host_copy.h"
#include "bench/harness/timer.h"
#include "bench/suites/kernels.h"
#include "braid/buffer.h"
#include "braid/tensor.h"

namespace braid::bench::kernel_suite {

// What the runner needs to know about the run.
struct SuiteEnv {
  Device device;
  size_t l2_bytes = 0;
  uint64_t seed = 0;  // the case's own seed (fixed: the same data on every run)
};

// One case ready to run. `launch` enqueues the op on input set `set` (the timer rotates through
// `sets` of them); `check` launches the op once on set 0 from the inputs as the setup made them,
// compares its outputs with the CPU reference run on the same inputs and returns the verdict.
// The runner calls check first (it is also the op's first call: argument checks and any plan
// happen there, outside the timing), then times `launch`. `note` tells a reader what they need
// ("weights rotate 4 sets"). The lambdas own the case's tensors.
struct CasePlan {
  int sets = 1;
  LaunchFn launch;
  std::function<Accuracy()> check;
  std::string note;
};

CasePlan plan_row_case(const KernelCase& c, const SuiteEnv& env);        // _rows.cpp
CasePlan plan_gemm_case(const KernelCase& c, const SuiteEnv& env);       // _gemm.cpp
CasePlan plan_attention_case(const KernelCase& c, const SuiteEnv& env);  // _attention.cpp
CasePlan plan_moe_case(const KernelCase& c, const SuiteEnv& env);        // _moe.cpp
CasePlan plan_moe_fp8_case(const KernelCase& c, const SuiteEnv& env);    // _moe_fp8.cpp

// ---- rotating input sets -------------------------------------------------------------------

// `sets` copies of one tensor in one allocation (so thousands of small sets cost one cudaMalloc),
// each copy starting on a 256-byte boundary (the vector paths need 16-byte aligned rows).
class SetTensor {
 public:
  SetTensor() = default;
  SetTensor(DType dtype, std::vector<int64_t> shape, int sets, Device device);
  // The contiguous copy of set `set`, of the tensor's shape.
  Tensor operator[](int set) const;
  int sets() const { return sets_; }
  // Every copy uniform in [lo, hi] (f32/f16/bf16), different values in each copy.
  void fill_uniform(uint64_t seed, float lo, float hi) const;
  // Every byte 0xFF (NaN in every float type): an element the op does not write shows up.
  void poison() const;
  // Values made on the host: `make(set, host)` fills a host tensor of the shape for each set.
  void upload(const std::function<void(int set, const Tensor& host)>& make) const;
  // All copies as one contiguous tensor [sets, stride] (the fills' target).
  const Tensor& storage() const { return storage_.view(); }

 private:
  OwnedTensor storage_;
  std::vector<int64_t> shape_;
  int64_t stride_ = 0;  // elements from one copy to the next
  int sets_ = 0;
  DType dtype_ = DType::f32;
};

// Input sets so that the bytes of one call exceed twice the L2 together (bench::rotating_sets),
// at most `max_sets`.
int case_sets(const KernelCase& c, const SuiteEnv& env, int max_sets = 1 << 16);

// ---- host copies and the check ----------------------------------------------------------------

// to_host and host_rows: harness/host_copy.h.
// A host tensor of `shape` made from a device tensor's bytes (shape and dtype must give the same
// size): views of the same memory with another shape.
OwnedTensor to_host_as(const Tensor& t, const std::vector<int64_t>& shape);

// The rows a check compares: every row up to `count`, else the first, the last and random
// others (moe_sample_tokens), sorted.
std::vector<int64_t> sample_rows(int64_t rows, int count, uint64_t seed);
// "; x, y rotate 4 sets" ("" for one set): the note's words on rotation.
std::string rotation(int sets, const char* what);
// "all 512 rows" / "128 of 4096 rows" / "1 row".
std::string rows_label(size_t checked, int64_t rows, const char* what = "rows");

// Adds every vector along the last dimension of `got` against the same vector of `ref` (host
// tensors of one shape, any dtype incl. integers, strided allowed): an error vector each.
void add_vectors(ErrorAccumulator& acc, const Tensor& got, const Tensor& ref);
// Adds n values read as floats from two host buffers of one dtype.
void add_values(ErrorAccumulator& acc, const void* got, const void* ref, DType dtype, int64_t n);

Accuracy make_accuracy(const ErrorAccumulator& acc, const KernelCase& c, std::string reference);

// Runs fn(begin, end) over [0, n) split across the host's cores (at most 16 threads); the first
// exception thrown by any part is rethrown after all have finished.
void parallel_ranges(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

// Copies experts `experts` of w [E, N, K] (a contiguous device tensor) to a host [U, N, K].
OwnedTensor host_experts(const Tensor& w, const std::vector<int64_t>& experts);

// The rows `rows` (sorted) of a permuted batch with expert offsets `offsets` [E + 1]: the distinct
// experts they belong to (ascending) and the offsets [U + 1] of those rows over those experts
// (the sub-problem a grouped GEMM's reference runs on).
struct RowExperts {
  std::vector<int64_t> experts;
  std::vector<int32_t> offsets;
  std::vector<int64_t> expert_of_row;  // per sampled row, its expert's index into `experts`
  // The offsets [U + 1] of sampled rows [r0, r1) alone over the same experts.
  std::vector<int32_t> offsets_of(int64_t r0, int64_t r1) const;
};
RowExperts experts_of_rows(const std::vector<int32_t>& offsets, const std::vector<int64_t>& rows);

// ---- MoE routing ------------------------------------------------------------------------------

// Writes the balanced routing of input set `set` (balanced_expert) into host ids [T, k] i32.
void fill_balanced_ids(const Tensor& ids, int set, int experts);
// moe_permute of host ids [T, k] on the CPU: what the device op would write.
struct HostPermutation {
  std::vector<int32_t> offsets, sorted_pairs, pair_rows;
};
HostPermutation host_permutation(const Tensor& ids, int experts);

// A contiguous host i32 tensor holding `values`.
OwnedTensor host_i32(const std::vector<int32_t>& values);

}  // namespace braid::bench::kernel_suite
