// `bench decode` on the GPU: random weights (or a checkpoint), a KV cache filled to `context`,
// one decode step of `batch` sequences (forward + greedy argmax) timed eagerly and as a graph.
#include <cuda_runtime.h>
#include <fmt/core.h>

#include <string>
#include <vector>

#include "bench/ceilings.h"
#include "bench/decode.h"
#include "bench/device.h"
#include "bench/kernels.h"
#include "bench/timer.h"
#include "braid/buffer.h"
#include "braid/error.h"
#include "braid/ops.h"
#include "core/cuda_check.h"
#include "core/cuda_graph.h"
#include "engine/kv_cache.h"
#include "model/forward.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace braid::bench {

namespace {

// Random weights: small uniform values (norm weights near 1) so activations stay finite.
model::Weights random_weights(const model::ModelConfig& c, Device device, DType dtype) {
  uint64_t seed = 1;
  return model::build_weights(c, device, dtype,
                              [&](const std::string& name, const std::vector<int64_t>&,
                                  const Tensor& dst) {
                                const bool norm = name.find("norm") != std::string::npos;
                                fill_uniform(dst, seed++, norm ? 0.9f : -0.03f, norm ? 1.1f : 0.03f,
                                             {});
                              });
}

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

}  // namespace

Report run_decode(const DecodeOptions& o) {
  if (!cuda_available())
    throw Error(ErrorKind::unsupported, "bench decode: no CUDA device is visible");
  if (o.batch < 1 || o.context < 1)
    throw Error(ErrorKind::invalid_argument, "bench decode: --batch and --context must be >= 1");
  BRAID_CUDA_CHECK(cudaSetDevice(o.device));
  const Device dev = Device::cuda(o.device);
  const DType dtype = DType::bf16;

  std::string reason;
  const auto info = query_device(o.device, &reason);
  if (!info) throw Error(ErrorKind::unsupported, "bench decode: " + reason);
  Report run = start_report("decode", *info);
  // The copy ceiling of this run: the floor is read against it.
  std::vector<ResultRow> copy_rows;
  measure_copy_ceiling(o.quick, o.device, [&](ResultRow r) { copy_rows.push_back(std::move(r)); });
  run.ceilings = ceilings_from_rows(copy_rows);

  const model::ModelConfig c = o.model_dir.empty() ? decode_preset(o.preset)
                                                   : model::load_config(o.model_dir);
  // A context past the model's positions still measures the memory traffic of that many keys
  // (the weights are random); the row says so.
  const bool past_positions = o.context > c.max_position_embeddings;
  const model::Weights w = o.model_dir.empty()
                               ? random_weights(c, dev, dtype)
                               : model::load_weights(c, model::Checkpoint::open(o.model_dir), dev, dtype);
  // Each sequence holds `context` tokens; the step appends at position context - 1 (overwriting
  // it each repetition), so every step reads exactly `context` keys.
  engine::KVCache cache(c, o.context, 16, dev, dtype, o.batch);
  for (size_t l = 0; l < cache.k.size(); ++l) {
    fill_uniform(cache.k[l].view(), 1000 + l, -1.0f, 1.0f, {});
    fill_uniform(cache.v[l].view(), 2000 + l, -1.0f, 1.0f, {});
  }
  model::Workspace ws(c, o.batch, dev, dtype, int64_t{cache.pages_per_seq} * cache.page_size);

  const int B = o.batch;
  OwnedTensor host(DType::i32, {5 * B + 1}, Device::cpu());
  int32_t* h = host.view().ptr<int32_t>();
  for (int s = 0; s < B; ++s) {
    h[s] = (s * 7919 + 11) % c.vocab_size;                            // tokens
    h[B + s] = o.context - 1;                                         // positions
    h[2 * B + s] = static_cast<int32_t>(cache.slot(s, o.context - 1));  // slots
    h[3 * B + s] = o.context;                                         // kv_lens
  }
  for (int s = 0; s <= B; ++s) h[4 * B + s] = s;  // cu_seqlens_q: one query per sequence
  OwnedTensor inputs(DType::i32, {5 * B + 1}, dev);
  copy(host.view(), inputs.view());
  const Tensor d = inputs.view();
  const model::StepInputs in{d.slice(0, 0, B), d.slice(0, B, 2 * B), d.slice(0, 2 * B, 3 * B),
                             d.slice(0, 4 * B, 5 * B + 1), d.slice(0, 3 * B, 4 * B),
                             /*decode=*/true};
  OwnedTensor logits(DType::f32, {B, c.vocab_size}, dev);
  OwnedTensor next(DType::i32, {B}, dev);

  const LaunchFn step = [&](int, Stream s) {
    model::forward(c, w, cache, ws, in, B, /*all_logits=*/true, logits.view(), s, nullptr,
                   next.view());
  };
  step(0, {});  // plans every gemm shape before timing and capture
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());
  const int kernels = count_kernels(step);

  const std::string params = fmt::format("{} batch {} context {}",
                                         o.model_dir.empty() ? o.preset : o.model_dir, B, o.context);
  const double bytes = decode_step_bytes(c, B, o.context, dtype_size(dtype));
  const std::string note =
      fmt::format("{} kernels/step, weights {:.2f} GB{}", kernels, w.bytes / 1e9,
                  past_positions ? fmt::format(", context past the model's {} positions",
                                               c.max_position_embeddings)
                                 : "");
  TimingConfig graph{TimingMode::graph, 1, 3, o.quick ? 10 : 30, 10};
  TimingConfig eager{TimingMode::back_to_back, 1, 3, o.quick ? 10 : 30, 10};
  run.rows.push_back({"decode_step", params, timing_label(graph), time_launches(step, graph), bytes,
                      0, Bound::memory, note});
  run.rows.push_back({"decode_step", params, timing_label(eager), time_launches(step, eager), bytes,
                      0, Bound::memory, note});
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

}  // namespace braid::bench
