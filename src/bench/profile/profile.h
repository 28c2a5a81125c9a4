// `braidinfer profile`: what the GPU did during one prefill and N decode steps, from a CUPTI
// activity trace. This header is the CPU-only half (unit-tested in CI with synthetic records):
// the records (kernels, copies, the host API calls that launched them, the host ranges the
// profiler marked), their analysis (per-kernel and per-component tables per phase, launch gaps,
// kernels per token) and its forms (terminal table, JSON, Markdown, Chrome trace JSON).
// cuda/cupti_collector.cpp collects the records, cuda/profile_run.cpp runs the model.
//
// Attribution: a GPU activity belongs to the host range (phase, layer, component) whose interval
// holds the start of the API call that launched it (same correlation id). Components are the
// names model::forward passes to its ForwardProbe; the probe is called after each component has
// been enqueued, so component i spans [probe call i-1 (or the forward's start), probe call i].
// A decode step replayed from a CUDA graph launches everything from one cudaGraphLaunch outside
// forward(), so its kernels are attributed to the step but to no component ("(graph)"): the
// per-component table needs eager steps.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/harness/report.h"
#include "bench/profile/ncu_csv.h"

namespace braid::bench {

// ---- records ----

enum class ActivityKind { kernel, memcpy, memset };
const char* activity_kind_name(ActivityKind kind);  // "kernel", "memcpy", "memset"

// One kernel, copy or memset as the GPU ran it. Times are CUPTI timestamps (ns).
struct GpuActivity {
  ActivityKind kind = ActivityKind::kernel;
  std::string name;  // kernel: its symbol as CUPTI reports it (mangled); else "memcpy HtoD", ...
  uint64_t start_ns = 0, end_ns = 0;
  uint32_t device = 0, stream = 0;
  uint32_t correlation = 0;  // the launching API call's correlation id
  uint32_t graph_id = 0;     // nonzero when a CUDA graph launched it
  int grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};  // kernels
  int registers = 0;                              // per thread
  int static_shared = 0, dynamic_shared = 0;      // bytes per block
  uint64_t bytes = 0;                             // copies and memsets
  double duration_us() const { return (end_ns - start_ns) / 1e3; }
};

// One CUDA runtime or driver API call on the host.
struct ApiCall {
  std::string name;  // "cudaLaunchKernel", "cuLaunchKernelEx", ...
  bool runtime = true;
  uint64_t start_ns = 0, end_ns = 0;
  uint32_t thread = 0;
  uint32_t correlation = 0;
};

// A host interval the profiler marked, on CUPTI's clock.
enum class RangeLevel { phase, layer, component };
struct HostRange {
  RangeLevel level = RangeLevel::phase;
  std::string phase;  // "prefill" or "decode"
  int step = 0;       // decode step (0 for the prefill)
  int layer = -1;     // component and layer ranges; -1 outside the layers
  std::string name;   // "prefill", "decode step 3", "layer 5", "qkv_proj"
  uint64_t start_ns = 0, end_ns = 0;
};

struct ProfileTrace {
  std::vector<GpuActivity> activities;
  std::vector<ApiCall> api_calls;
  std::vector<HostRange> ranges;
  uint64_t dropped_records = 0;  // records CUPTI could not store (then the tables undercount)
};

// What was profiled, for the report headers.
struct ProfileSetup {
  std::string what;          // the run in words, when it is not `profile`'s prefill + decode steps
  std::string model;         // the shape's name or the checkpoint folder
  bool random_weights = false;
  int layers = 0;
  int prompt_tokens = 0;
  int steps = 0;             // decode steps recorded
  bool graph = false;        // decode steps replayed from a CUDA graph
  bool has_device = false;
  DeviceInfo device;
};

// A probe call of model::forward: `component` of `layer` enqueued by `at_ns`.
struct ComponentMark {
  std::string component;
  int layer = -1;
  uint64_t at_ns = 0;
};

// Appends the ranges of one forward step: the phase range [phase_start, phase_end], one range
// per mark (component i from mark i-1, the first from forward_start) and one per layer (from its
// first component's start to its last component's end). Throws braid::Error (invalid_argument)
// when the times are out of order.
void add_step_ranges(std::vector<HostRange>& out, const std::string& phase, int step,
                     uint64_t phase_start_ns, uint64_t forward_start_ns,
                     const std::vector<ComponentMark>& marks, uint64_t phase_end_ns);

// The API call that launched each correlation id: a runtime call wins over the driver call it
// made with the same id.
std::unordered_map<uint32_t, const ApiCall*> launching_calls(const ProfileTrace& trace);

// Removes the API calls and activities that started before t0_ns (CUPTI's own warm-up: the
// first launches after tracing is enabled pay its one-time setup).
void drop_records_before(ProfileTrace& trace, uint64_t t0_ns);

// ---- kernel names ----

// The demangled symbol (the input itself when it is not a mangled C++ name).
std::string demangle_symbol(const std::string& symbol);
// A readable short form of a demangled name: no return type, no parameter list, no namespace or
// class qualifiers (template arguments included), at most max_chars (template arguments cut
// first, marked "...").
std::string short_kernel_name(const std::string& demangled, size_t max_chars = 64);

// ---- analysis ----

// Where one activity belongs. phase is "" when it could not be attributed (no API record with its
// correlation id, or a launch outside every phase range).
struct Attribution {
  std::string phase;
  int step = 0;
  std::string component;  // "" outside the component ranges
  int layer = -1;
};
inline constexpr const char* kGraphComponent = "(graph)";        // launched by a graph replay
inline constexpr const char* kOutsideComponent = "(outside forward)";

struct KernelRow {
  std::string symbol;     // as CUPTI reports it (mangled), or "memcpy HtoD" ...
  std::string demangled;  // full name
  std::string short_name;
  ActivityKind kind = ActivityKind::kernel;
  int calls = 0;
  double total_us = 0, avg_us = 0;
  double share = 0;  // of the phase's GPU time (sum of all its activities' durations)
  // Kernels: from the end of the kernel that finished before it in its step to its own end (the
  // step's first: its duration), summed over its calls, per step. With programmatic dependent
  // launch a kernel's duration includes the time it waits for its predecessor; this is what it
  // adds to the step instead. The kernel rows of a step add up to its wall time (first kernel
  // start to last kernel end: a graph replay's input copy, and the host's launch of the replay
  // after it, stay out, as in the wall time). Copies: 0.
  double elapsed_us_per_step = 0;
  std::optional<NcuKernelMetrics> ncu;  // folded in from Nsight Compute, when it profiled it
};

struct ComponentRow {
  std::string component;
  double us_per_step = 0;       // GPU time of its activities, summed over layers, per step
  // First start to last end of its activities in each layer, summed over layers, per step: the
  // time the component holds the GPU, gaps between its kernels included and kernels that overlap
  // (programmatic dependent launch) counted once. What CUDA events around the component measure
  // (bench decode --breakdown), less the host's launch delays.
  double span_us_per_step = 0;
  // From the end of the component before it (in the order the step ran them) to its own last
  // end, summed over layers, per step: launch gaps before it included, so the components of a
  // step add up to its wall time. The figure CUDA events recorded after each component measure.
  double elapsed_us_per_step = 0;
  double kernels_per_step = 0;  // activities (kernels, copies) per step
  double share = 0;             // of the phase's GPU time
};

// Idle time between consecutive kernels on one stream within a step (from the end of the
// previous one to the start of the next; overlapping ones make no gap).
struct GapStats {
  int count = 0;
  double median_us = 0, p90_us = 0, max_us = 0, total_us = 0;
  double share_of_wall = 0;  // total gaps / total step wall time
};

struct PhaseSummary {
  std::string phase;  // "prefill" or "decode"
  int steps = 0;      // steps with at least one activity
  int kernels = 0;    // kernel launches in the phase (copies and memsets not counted)
  int activities = 0;
  double gpu_us = 0;  // sum of the activities' durations
  double kernels_per_step = 0;
  // Per step, from its kernels (copies and memsets are in the tables, not here):
  double busy_us_per_step = 0;  // union of kernel intervals, mean over steps
  double wall_us_per_step = 0;  // first kernel start to last kernel end, mean over steps
  // Median host time of the API calls that launched the phase's activities (cudaLaunchKernel,
  // cuLaunchKernelEx, ...), CUPTI's tracing cost included: what eager launch gaps are made of.
  double launch_call_us_median = 0;
  std::vector<double> wall_us;  // per step
  GapStats gaps;
  std::vector<KernelRow> kernels_table;  // by total time, largest first
  std::vector<ComponentRow> components;  // in forward order (first seen)
};

struct ProfileAnalysis {
  std::vector<PhaseSummary> phases;  // "prefill" first, then "decode" (those with activities)
  std::vector<Attribution> attribution;  // one per trace activity, same order
  int unattributed = 0;                  // activities with no phase
  uint64_t dropped_records = 0;
};

// Attributes every activity and builds the tables. Throws braid::Error (invalid_argument) for an
// activity that ends before it starts.
ProfileAnalysis analyze_profile(const ProfileTrace& trace);

// Median / 90th percentile (nearest rank) / max of a list; 0 for an empty one.
double percentile(std::vector<double> values, double p);

// Attaches Nsight Compute results to the kernel rows with the same symbol (every phase).
void fold_ncu_results(ProfileAnalysis& analysis, const std::vector<NcuKernelMetrics>& ncu);

// ---- output ----

struct NcuSummary {  // what the --ncu run did, for the report
  bool ran = false;
  std::string phase;                  // the phase ncu profiled
  std::string command;                // the ncu command line
  std::vector<std::string> missing_metrics;  // asked for, not in ncu's output
  Ceilings ceilings;                  // the ridge point's ceilings (measured in the same run)
};

// Terminal report: header, then per phase the kernel table (top_kernels rows, the rest summed in
// one line), the per-step figures and launch gaps, the component table; the ncu table last.
std::string format_profile(const ProfileSetup& setup, const ProfileAnalysis& analysis,
                           const NcuSummary& ncu, int top_kernels = 25);
std::string profile_to_markdown(const ProfileSetup& setup, const ProfileAnalysis& analysis,
                                const NcuSummary& ncu);
nlohmann::json profile_to_json(const ProfileSetup& setup, const ProfileAnalysis& analysis,
                               const NcuSummary& ncu);

// Chrome trace ("traceEvents", opened by Perfetto and chrome://tracing): a "GPU" process with one
// track per stream (kernels, copies and memsets as complete events with grid, block, registers,
// shared memory, correlation id and attribution in args), a "host" process with the phase /
// layer / component ranges nested on one track and the CUDA API calls on a second. Timestamps in
// microseconds from the first record.
nlohmann::json chrome_trace(const ProfileTrace& trace, const ProfileAnalysis& analysis);

// ---- any GPU work (CUDA builds only: cuda/record_activity.cpp) ----

// Records the CUPTI activity of the GPU work `body` enqueues; body marks its own host ranges (a
// phase range per step at least, add_step_ranges) on the clock it is handed (CUPTI's, ns), and
// synchronizes before it returns. Records from before body started are dropped. Throws
// braid::Error (unsupported) without CUPTI. `bench throughput --profile-steps` uses it.
using RecordBody =
    std::function<void(const std::function<uint64_t()>& now, std::vector<HostRange>& ranges)>;
ProfileTrace record_activity(const RecordBody& body);

// ---- the run (CUDA builds only: cuda/profile_run.cpp) ----

struct ProfileOptions {
  std::string preset;     // a decode_preset name, or
  std::string model_dir;  // a Hugging Face folder
  int prompt_tokens = 512;
  int steps = 16;
  bool graph = false;
  int device = 0;
};

struct ProfileRun {
  ProfileSetup setup;
  ProfileTrace trace;
};

// Loads the model, warms up (one prefill and two decode steps, so every GEMM plan exists), then
// records one prefill of prompt_tokens and `steps` decode steps (batch 1, greedy ids) with CUPTI
// and NVTX ranges. Throws braid::Error (unsupported) without CUDA or CUPTI.
ProfileRun run_profile(const ProfileOptions& options);

// The child of `--ncu`: the same warm-up, then `phase` ("prefill" or "decode") between
// cudaProfilerStart and cudaProfilerStop (ncu runs with --profile-from-start off); no CUPTI.
void run_profile_for_ncu(const ProfileOptions& options, const std::string& phase);

}  // namespace braid::bench
