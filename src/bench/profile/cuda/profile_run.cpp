// `braidinfer profile` on the GPU: the model, the warm-up, and one prefill + N decode steps
// recorded with CUPTI (and marked with NVTX ranges, so nsys and ncu users see the same phases,
// layers and components).
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <string>
#include <vector>

#include <fmt/core.h>

#include "bench/harness/cuda/device.h"
#include "bench/harness/cuda/model_setup.h"
#include "bench/profile/cuda/cupti_collector.h"
#include "bench/profile/profile.h"
#include "bench/suites/decode.h"
#include "braid/buffer.h"
#include "braid/error.h"
#include "braid/stream.h"
#include "core/cuda_check.h"
#include "model/forward.h"

namespace braid::bench {

namespace {

struct ProbeCall {
  std::string component;
  int layer = -1;
};

// The model and every step's inputs, made before anything is recorded (they copy to the GPU).
struct Workload {
  std::unique_ptr<ModelUnderTest> model;
  StepBatch prefill;
  std::vector<StepBatch> decode;  // step i: one token at position prompt_tokens + i
  OwnedTensor logits;             // [1, vocab] f32: scratch of the fused LM head + argmax
  OwnedTensor next;               // [1] i32: the greedy token

  void forward(const StepBatch& b, Stream s, const model::ForwardProbe* probe) {
    const ModelUnderTest& m = *model;
    model::forward(m.config, m.weights, *m.cache, *m.workspace, b.inputs, b.tokens,
                   /*all_logits=*/false, logits.view(), s, probe, next.view());
  }
};

Workload make_workload(const ProfileOptions& o) {
  if (o.prompt_tokens < 1 || o.steps < 1)
    throw Error(ErrorKind::invalid_argument,
                fmt::format("profile: --prompt-tokens ({}) and --steps ({}) must be >= 1",
                            o.prompt_tokens, o.steps));
  if (o.preset.empty() == o.model_dir.empty())
    throw Error(ErrorKind::invalid_argument, "profile: give exactly one of a shape or a model folder");
  ModelSetupOptions so;
  so.model_dir = o.model_dir;
  if (o.model_dir.empty()) {
    so.shape = decode_preset(o.preset);
    so.label = o.preset;
  }
  so.sequences = 1;
  so.context = o.prompt_tokens + o.steps;
  so.max_step_tokens = o.prompt_tokens;
  so.decode_scratch = true;
  so.device = o.device;
  Workload w;
  w.model = setup_model(so);
  w.prefill = make_step_batch(*w.model, 1, 0, o.prompt_tokens, /*decode=*/false);
  for (int i = 0; i < o.steps; ++i)
    w.decode.push_back(make_step_batch(*w.model, 1, o.prompt_tokens + i, 1, /*decode=*/true));
  const Device dev = Device::cuda(o.device);
  w.logits = OwnedTensor(DType::f32, {1, w.model->config.vocab_size}, dev);
  w.next = OwnedTensor(DType::i32, {1}, dev);
  return w;
}

// The probe calls of one forward step (the warm-up's, to name the NVTX ranges of the recording).
std::vector<ProbeCall> probe_calls(Workload& w, const StepBatch& b, Stream s) {
  std::vector<ProbeCall> calls;
  const model::ForwardProbe probe = [&](const char* component, int layer) {
    calls.push_back({component, layer});
  };
  w.forward(b, s, &probe);
  return calls;
}

// Marks one step: the phase range, and through the forward probe its components and layers, on
// CUPTI's clock (when there is a collector) and as NVTX push/pop ranges. NVTX ranges must nest,
// and the probe only names a component once it has been enqueued, so the names come from the
// warm-up's probe calls; a step whose components differ from them is an error.
class StepMarker {
 public:
  StepMarker(const CuptiCollector* cupti, std::string phase, int step,
             const std::vector<ProbeCall>* expected)
      : cupti_(cupti), phase_(std::move(phase)), step_(step), expected_(expected) {}

  void begin_phase() {
    phase_start_ = now();
    nvtxRangePushA(phase_ == "decode" ? fmt::format("decode step {}", step_).c_str() : phase_.c_str());
  }

  // Returns the probe to pass to forward(); call right before it.
  const model::ForwardProbe* begin_forward() {
    forward_start_ = now();
    open(0);
    return &probe_;
  }

  void end_phase(std::vector<HostRange>& ranges) {
    if (expected_ && marks_.size() != expected_->size())
      throw Error(ErrorKind::internal,
                  fmt::format("profile: {} step {} marked {} components, the warm-up {}", phase_,
                              step_, marks_.size(), expected_->size()));
    const uint64_t end = now();
    nvtxRangePop();
    if (cupti_) add_step_ranges(ranges, phase_, step_, phase_start_,
                                expected_ ? forward_start_ : phase_start_, marks_, end);
  }

 private:
  uint64_t now() const { return cupti_ ? cupti_->now() : 0; }

  // Pushes the NVTX ranges of expected component i (and its layer when it starts one).
  void open(size_t i) {
    if (!expected_ || i >= expected_->size()) return;
    const ProbeCall& c = (*expected_)[i];
    if (c.layer >= 0 && (i == 0 || (*expected_)[i - 1].layer != c.layer))
      nvtxRangePushA(fmt::format("layer {}", c.layer).c_str());
    nvtxRangePushA(c.component.c_str());
  }

  void on_probe(const char* component, int layer) {
    const uint64_t t = now();
    const size_t i = marks_.size();
    if (!expected_ || i >= expected_->size() || (*expected_)[i].component != component ||
        (*expected_)[i].layer != layer)
      throw Error(ErrorKind::internal,
                  fmt::format("profile: forward's component {} (layer {}) in {} step {} differs "
                              "from the warm-up's sequence",
                              component, layer, phase_, step_));
    nvtxRangePop();  // the component
    const bool layer_ends = layer >= 0 && (i + 1 == expected_->size() || (*expected_)[i + 1].layer != layer);
    if (layer_ends) nvtxRangePop();
    marks_.push_back({component, layer, t});
    open(i + 1);
  }

  const CuptiCollector* cupti_;
  std::string phase_;
  int step_;
  const std::vector<ProbeCall>* expected_;  // null: a graph replay (no forward call)
  uint64_t phase_start_ = 0, forward_start_ = 0;
  std::vector<ComponentMark> marks_;
  model::ForwardProbe probe_ = [this](const char* component, int layer) { on_probe(component, layer); };
};

// One decode step captured once into a graph over fixed inputs; each replay first copies that
// step's inputs in.
class DecodeGraph {
 public:
  DecodeGraph(Workload& w, int past, Stream s) : inputs_(make_step_batch(*w.model, 1, past, 1, true)) {
    cudaStream_t stream = static_cast<cudaStream_t>(s.handle);
    BRAID_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
      w.forward(inputs_, s, nullptr);
    } catch (...) {
      cudaGraph_t g = nullptr;
      cudaStreamEndCapture(stream, &g);
      if (g) cudaGraphDestroy(g);
      throw;
    }
    BRAID_CUDA_CHECK(cudaStreamEndCapture(stream, &graph_));
    BRAID_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
  }
  ~DecodeGraph() {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
  }
  DecodeGraph(const DecodeGraph&) = delete;
  DecodeGraph& operator=(const DecodeGraph&) = delete;

  void replay(const StepBatch& step, Stream s) {
    cudaStream_t stream = static_cast<cudaStream_t>(s.handle);
    const Tensor src = step.storage.view(), dst = inputs_.storage.view();
    if (src.numel() != dst.numel())
      throw Error(ErrorKind::internal, "profile: a decode step's inputs differ in size from the graph's");
    BRAID_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.numel() * sizeof(int32_t),
                                     cudaMemcpyDeviceToDevice, stream));
    BRAID_CUDA_CHECK(cudaGraphLaunch(exec_, stream));
  }

 private:
  StepBatch inputs_;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

struct WarmedUp {
  std::vector<ProbeCall> prefill_calls, decode_calls;
};

// One prefill and up to two decode steps, so every cuBLASLt plan and lazy allocation exists
// before anything is recorded.
WarmedUp warm_up(Workload& w, Stream s) {
  WarmedUp out;
  out.prefill_calls = probe_calls(w, w.prefill, s);
  for (size_t i = 0; i < std::min<size_t>(2, w.decode.size()); ++i)
    out.decode_calls = probe_calls(w, w.decode[i], s);
  BRAID_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(s.handle)));
  return out;
}

void sync(Stream s) { BRAID_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(s.handle))); }

}  // namespace

ProfileRun run_profile(const ProfileOptions& o) {
  if (!cuda_available()) throw Error(ErrorKind::unsupported, "profile: no CUDA device is visible");
  BRAID_CUDA_CHECK(cudaSetDevice(o.device));
  CuptiCollector cupti;  // before the model: a missing CUPTI fails fast
  Workload w = make_workload(o);
  StreamOwner owner;
  const Stream s = owner.get();
  const WarmedUp warm = warm_up(w, s);
  std::unique_ptr<DecodeGraph> graph;
  if (o.graph) {
    graph = std::make_unique<DecodeGraph>(w, o.prompt_tokens, s);
    graph->replay(w.decode[0], s);  // the first replay uploads the graph
    sync(s);
  }
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());

  std::vector<HostRange> ranges;
  cupti.start();
  // The first launches under tracing pay CUPTI's one-time setup (milliseconds on an H100): one
  // unrecorded step first, its records dropped below.
  w.forward(w.decode[0], s, nullptr);
  if (graph) graph->replay(w.decode[0], s);
  sync(s);
  const uint64_t recording_start = cupti.now();
  {
    StepMarker prefill(&cupti, "prefill", 0, &warm.prefill_calls);
    prefill.begin_phase();
    w.forward(w.prefill, s, prefill.begin_forward());
    sync(s);
    prefill.end_phase(ranges);
  }
  for (int i = 0; i < o.steps; ++i) {
    // Each step waits for its token, as a generation loop does before the next step.
    StepMarker step(&cupti, "decode", i, graph ? nullptr : &warm.decode_calls);
    step.begin_phase();
    if (graph) {
      graph->replay(w.decode[static_cast<size_t>(i)], s);
    } else {
      w.forward(w.decode[static_cast<size_t>(i)], s, step.begin_forward());
    }
    sync(s);
    step.end_phase(ranges);
  }
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());
  ProfileRun run;
  run.trace = cupti.stop();
  drop_records_before(run.trace, recording_start);
  run.trace.ranges = std::move(ranges);

  ProfileSetup& setup = run.setup;
  setup.model = w.model->label;
  setup.random_weights = w.model->random_weights;
  setup.layers = w.model->config.num_layers;
  setup.prompt_tokens = o.prompt_tokens;
  setup.steps = o.steps;
  setup.graph = o.graph;
  std::string reason;
  if (auto info = query_device(o.device, &reason)) {
    setup.has_device = true;
    setup.device = *info;
  }
  return run;
}

void run_profile_for_ncu(const ProfileOptions& o, const std::string& phase) {
  if (phase != "prefill" && phase != "decode")
    throw Error(ErrorKind::invalid_argument,
                fmt::format("profile: the ncu phase must be prefill or decode, got '{}'", phase));
  if (!cuda_available()) throw Error(ErrorKind::unsupported, "profile: no CUDA device is visible");
  BRAID_CUDA_CHECK(cudaSetDevice(o.device));
  Workload w = make_workload(o);
  StreamOwner owner;
  const Stream s = owner.get();
  const WarmedUp warm = warm_up(w, s);
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<HostRange> unused;
  BRAID_CUDA_CHECK(cudaProfilerStart());
  if (phase == "prefill") {
    StepMarker m(nullptr, "prefill", 0, &warm.prefill_calls);
    m.begin_phase();
    w.forward(w.prefill, s, m.begin_forward());
    sync(s);
    m.end_phase(unused);
  } else {
    for (int i = 0; i < o.steps; ++i) {
      StepMarker m(nullptr, "decode", i, &warm.decode_calls);
      m.begin_phase();
      w.forward(w.decode[static_cast<size_t>(i)], s, m.begin_forward());
      sync(s);
      m.end_phase(unused);
    }
  }
  BRAID_CUDA_CHECK(cudaProfilerStop());
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace braid::bench
