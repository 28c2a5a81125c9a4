// `bench decode` on the GPU: random weights (or a checkpoint), a KV cache filled to `context`,
// one decode step of `batch` sequences (forward + greedy argmax) timed eagerly and as a graph.
#include "bench/suites/decode.h"

#include <CLI/CLI.hpp>

#include <cuda_runtime.h>
#include <fmt/core.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "bench/harness/cuda/ceilings.h"
#include "bench/harness/cuda/device.h"
#include "bench/harness/cuda/kernels.h"
#include "bench/harness/cuda/model_setup.h"
#include "bench/harness/cuda/timer.h"
#include "bench/harness/options.h"
#include "braid/buffer.h"
#include "braid/error.h"
#include "braid/ops.h"
#include "core/cuda_check.h"
#include "core/cuda_graph.h"
#include "engine/kv_cache.h"
#include "model/forward.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "ops/cuda/pdl.cuh"

namespace braid::bench {

namespace {

// Kernel nodes in one captured decode step.
int count_kernels(const LaunchFn& step) {
  cudaStream_t s;
  BRAID_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  BRAID_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  try {
    step(0, Stream{s});
  } catch (...) {
    cudaStreamEndCapture(s, &graph);
    if (graph) cudaGraphDestroy(graph);
    cudaStreamDestroy(s);
    throw;
  }
  BRAID_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  const int kernels = detail::count_kernel_nodes(graph);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
  return kernels;
}

// Per component: its time in each of `steps` eager decode steps (summed over the layers), from
// events recorded after each component.
std::map<std::string, std::vector<double>> time_components(
    const model::ModelConfig& c, const model::Weights& w, engine::KVCache& cache,
    model::Workspace& ws, const model::StepInputs& in, int batch, const Tensor& logits,
    const Tensor& next, int steps) {
  std::map<std::string, std::vector<double>> out;
  std::vector<cudaEvent_t> events;
  std::vector<std::string> names;
  auto event_at = [&](size_t i) {
    while (events.size() <= i) {
      cudaEvent_t e;
      BRAID_CUDA_CHECK(cudaEventCreate(&e));
      events.push_back(e);
    }
    return events[i];
  };
  for (int step = 0; step < steps; ++step) {
    names.clear();
    BRAID_CUDA_CHECK(cudaEventRecord(event_at(0), nullptr));
    const model::ForwardProbe probe = [&](const char* component, int) {
      names.emplace_back(component);
      BRAID_CUDA_CHECK(cudaEventRecord(event_at(names.size()), nullptr));
    };
    model::forward(c, w, cache, ws, in, batch, /*all_logits=*/true, logits, {}, &probe, next);
    BRAID_CUDA_CHECK(cudaDeviceSynchronize());
    std::map<std::string, double> step_us;
    for (size_t i = 0; i < names.size(); ++i) {
      float ms = 0;
      BRAID_CUDA_CHECK(cudaEventElapsedTime(&ms, events[i], events[i + 1]));
      step_us[names[i]] += ms * 1e3;
    }
    for (auto& [name, us] : step_us) out[name].push_back(us);
  }
  for (cudaEvent_t e : events) cudaEventDestroy(e);
  return out;
}

// bf16 weights up to this size are checked against the CPU forward (its fp32 copy is twice that).
constexpr size_t kCpuCheckMaxWeightBytes = size_t{3} << 30;

// --capacity: 0 (the context) or at least the context.
void check_capacity(const DecodeOptions& o) {
  if (o.capacity != 0 && o.capacity < o.context)
    throw Error(ErrorKind::invalid_argument,
                fmt::format("bench decode: --capacity ({}) must be at least --context ({})",
                            o.capacity, o.context));
}

}  // namespace

Report run_decode(const DecodeOptions& o) {
  if (!cuda_available())
    throw Error(ErrorKind::unsupported, "bench decode: no CUDA device is visible");
  if (o.batch < 1 || o.context < 1)
    throw Error(ErrorKind::invalid_argument, "bench decode: --batch and --context must be >= 1");
  check_capacity(o);
  BRAID_CUDA_CHECK(cudaSetDevice(o.device));
  const Device dev = Device::cuda(o.device);
  const DType dtype = DType::bf16;

  const DeviceInfo info = require_device(o.device, "bench decode");
  Report run = start_report("decode", info);
  // The copy ceiling of this run: the floor is read against it.
  run.ceilings = measure_ceilings(o.quick, o.device, false, false, [](ResultRow) {});

  ModelSetupOptions so;
  so.model_dir = o.model_dir;
  so.quantize = quantize_from_option(o.quantize, "bench decode");
  if (o.model_dir.empty()) so.shape = decode_preset(o.preset);
  so.label = o.preset;
  so.sequences = o.batch;
  so.context = std::max(o.context, o.capacity);
  so.max_step_tokens = o.batch;
  so.decode_scratch = true;
  so.random_kv = true;
  so.device = o.device;
  const auto m = setup_model(so);
  const model::ModelConfig& c = m->config;
  const model::Weights& w = m->weights;
  engine::KVCache& cache = *m->cache;
  model::Workspace& ws = *m->workspace;
  // A context past the model's positions still measures the memory traffic of that many keys
  // (the weights are random); the row says so.
  const bool past_positions = o.context > c.max_position_embeddings;
  // Each sequence holds `context` tokens; the step appends at position context - 1 (overwriting
  // it each repetition), so every step reads exactly `context` keys.
  const int B = o.batch;
  const StepBatch batch = make_step_batch(*m, B, o.context - 1, 1, /*decode=*/true);
  const model::StepInputs& in = batch.inputs;
  OwnedTensor logits(DType::f32, {B, c.vocab_size}, dev);
  OwnedTensor next(DType::i32, {B}, dev);

  const LaunchFn step = [&](int, Stream s) {
    model::forward(c, w, cache, ws, in, B, /*all_logits=*/true, logits.view(), s, nullptr,
                   next.view());
  };
  step(0, {});  // plans every gemm shape before timing and capture
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());
  const int kernels = count_kernels(step);

  const std::string params =
      fmt::format("{}{} batch {} context {}{}", o.model_dir.empty() ? o.preset : o.model_dir,
                  so.quantize == model::Quantize::none ? "" : " quantize fp8", B, o.context,
                  o.capacity > o.context ? fmt::format(" capacity {}", o.capacity) : "");
  const double bytes = decode_step_bytes(c, B, o.context, dtype_size(dtype));
  const std::string note =
      fmt::format("{} kernels/step{}, weights {:.2f} GB{}", kernels,
                  cuda::programmatic_launch_enabled() ? "" : " (BRAID_PDL=0: no programmatic launch)",
                  w.bytes / 1e9,
                  past_positions ? fmt::format(", context past the model's {} positions",
                                               c.max_position_embeddings)
                                 : "");
  TimingConfig graph{TimingMode::graph, 1, 3, o.quick ? 10 : 30, 10};
  TimingConfig eager{TimingMode::back_to_back, 1, 3, o.quick ? 10 : 30, 10};
  run.rows.push_back({"decode_step", params, timing_label(graph), time_launches(step, graph), bytes,
                      0, Bound::memory, note});
  run.rows.push_back({"decode_step", params, timing_label(eager), time_launches(step, eager), bytes,
                      0, Bound::memory, note});
  // The step once more with logits out (instead of the fused greedy head), its first sequence
  // against the CPU forward of the same weights and cache: for random weights small enough that
  // their fp32 copy and the reference's fp64 dot products take seconds on the host.
  if (m->random_weights && w.bytes <= kCpuCheckMaxWeightBytes) {
    model::forward(c, w, cache, ws, in, B, /*all_logits=*/true, logits.view());
    fmt::print(stderr, "  checking the step's logits against the CPU forward...\n");
    const Accuracy a = check_last_logits(*m, logits.view(), o.context - 1, 1);
    for (ResultRow& r : run.rows)
      if (r.name == "decode_step") r.accuracy = a;
  }
  if (o.breakdown) {
    const auto component_bytes = decode_component_bytes(c, B, o.context, dtype_size(dtype));
    for (auto& [name, samples] : time_components(c, w, cache, ws, in, B, logits.view(), next.view(),
                                                  o.quick ? 5 : 20)) {
      const auto it = component_bytes.find(name);
      run.rows.push_back({"decode_component", name, "eager, events", summarize(samples),
                          it == component_bytes.end() ? 0.0 : it->second, 0, Bound::memory, ""});
    }
  }
  return run;
}

SuiteRun decode_command(CLI::App& cmd) {
  auto o = std::make_shared<DecodeOptions>();
  std::string names;
  for (const auto& n : decode_preset_names()) names += (names.empty() ? "" : "|") + n;
  auto* shape = cmd.add_option("--shape", o->preset, "Model shape with random weights: " + names);
  auto* model = cmd.add_option("--model", o->model_dir, "A Hugging Face model folder");
  shape->excludes(model);
  cmd.add_option("--quantize", o->quantize, std::string(kQuantizeHelp) + " (with --model)")
      ->capture_default_str()
      ->needs(model);
  cmd.add_option("--batch", o->batch, "Sequences decoded together")->capture_default_str();
  cmd.add_option("--context", o->context, "Tokens in each sequence's KV cache")
      ->capture_default_str();
  cmd.add_option("--capacity", o->capacity,
                 "Keys each sequence's page table holds (default: --context; generate and serve "
                 "allocate max_model_len)");
  cmd.add_option("--device", o->device, "CUDA device index")->capture_default_str();
  cmd.add_flag("--quick", o->quick, "Fewer repetitions");
  cmd.add_flag("--breakdown", o->breakdown,
               "Also time each component of the step (eager, CUDA events between components)");
  return [o] {
    if (o->preset.empty() && o->model_dir.empty())
      throw Error(ErrorKind::invalid_argument, "bench decode: give --shape NAME or --model DIR");
    if (!o->preset.empty()) decode_preset(o->preset);  // names a bad shape
    quantize_from_option(o->quantize, "bench decode");   // a bad value, before the GPU check
    check_capacity(*o);
    if (!cuda_available())
      return not_measured("braidinfer bench decode: no usable CUDA device (nothing to measure)");
    const Report run = run_decode(*o);
    return report_result(run, decode_summary(run), nlohmann::json::object(),
                         fmt::format("; copy ceiling {:.0f} GB/s", run.ceilings.copy_gbps));
  };
}

}  // namespace braid::bench
