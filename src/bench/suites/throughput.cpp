#include "bench/suites/throughput.h"

#include <CLI/CLI.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <random>

#include "bench/harness/cuda/ceilings.h"
#include "bench/harness/cuda/device.h"
#include "bench/harness/cuda_only.h"
#include "bench/harness/options.h"
#include "bench/harness/random_weights.h"
#include "bench/profile/profile.h"
#include "bench/suites/decode.h"
#include "braid/error.h"

namespace braid::bench {

namespace {

// FLOPs of the matrix products per token (2 per multiply-add), the LM head excluded (it runs on
// the sampled rows only), for the experts a token is routed to.
double matmul_flops_per_token(const model::ModelConfig& c) {
  const double H = c.hidden_size;
  double per_token = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    per_token += H * (c.q_dim() + 2.0 * c.kv_dim()) + double(c.q_dim()) * H;
    if (c.layer_is_moe(l))
      per_token += H * c.num_experts + 3.0 * H * c.moe_intermediate_size * c.experts_per_token;
    else
      per_token += 3.0 * H * c.intermediate_size;
  }
  return 2 * per_token;
}

double kv_bytes_per_token(const model::ModelConfig& c, size_t dtype_bytes) {
  return 2.0 * c.num_layers * c.num_kv_heads * c.head_dim * static_cast<double>(dtype_bytes);
}

// Decode batches by size, and every step that carries a prompt chunk.
std::string bucket_of(const engine::StepInfo& s) {
  if (s.decode_seqs != s.seqs) return "prefill+decode";
  for (int hi : {1, 4, 8, 16, 32, 64, 128, 256, 512})
    if (s.seqs <= hi) {
      const int lo = hi <= 4 ? (hi == 1 ? 1 : 2) : hi / 2 + 1;
      return lo == hi ? fmt::format("decode {}", hi) : fmt::format("decode {}-{}", lo, hi);
    }
  return "decode 513+";
}

struct Bucket {
  std::vector<double> us;
  double bytes = 0, flops = 0, floor_s = 0, sequential_s = 0, seconds = 0;
  int graph_steps = 0, tokens = 0;
};

// Runs up to o.profile_steps steps under CUPTI (after one unmarked step that takes CUPTI's
// one-time set-up) and returns the profile's tables: steps with prompt chunks as the "prefill"
// phase, pure decode steps as "decode"; components come from forward()'s probe in eager steps.
std::string profile_steps(engine::LLMEngine& eng, const ThroughputOptions& o, const std::string& label,
                          const std::function<void()>& one_step) {
  std::vector<double> host_ms[2];  // per phase: the engine's own step time
  const auto record = cuda_only(BRAID_CUDA_ONLY(record_activity), "bench throughput --profile-steps");
  const ProfileTrace trace = record([&](const std::function<uint64_t()>& now,
                                        std::vector<HostRange>& ranges) {
    one_step();
    std::vector<ComponentMark> marks;
    const model::ForwardProbe probe = [&](const char* component, int layer) {
      marks.push_back({component, layer, now()});
    };
    struct ProbeOff {  // the probe lives on this stack frame: unset it on every way out
      engine::ModelRunner& runner;
      ~ProbeOff() { runner.set_forward_probe(nullptr); }
    } probe_off{eng.runner()};
    eng.runner().set_forward_probe(&probe);
    for (int i = 0; i < o.profile_steps && eng.has_unfinished(); ++i) {
      marks.clear();
      const uint64_t start = now();
      one_step();
      const uint64_t end = now();
      const engine::StepInfo& s = eng.last_step();
      if (!s.ran) continue;
      const bool mixed = s.decode_seqs != s.seqs;
      host_ms[mixed ? 0 : 1].push_back(s.seconds * 1e3);
      add_step_ranges(ranges, mixed ? "prefill" : "decode", i, start, start, marks, end);
    }
  });
  ProfileSetup setup;
  setup.model = label;
  setup.layers = eng.model_config().num_layers;
  setup.steps = o.profile_steps;
  setup.graph = o.engine.cuda_graphs;
  setup.what = fmt::format("{} engine steps of bench throughput from step {} ({} in / {} out): "
                           "\"prefill\" = steps with prompt chunks (eager), \"decode\" = decode-only "
                           "steps ({})",
                           o.profile_steps, o.profile_from, o.input_len, o.output_len,
                           o.engine.cuda_graphs ? "CUDA graph replays" : "eager");
  std::string out = format_profile(setup, analyze_profile(trace), NcuSummary{});
  for (int p = 0; p < 2; ++p)
    if (!host_ms[p].empty())
      out += fmt::format("{} steps: engine step time (host, upload to tokens) median {:.3f} ms over {}\n",
                         p == 0 ? "prefill" : "decode", percentile(host_ms[p], 50), host_ms[p].size());
  return out;
}

}  // namespace

StepWork step_work(const model::ModelConfig& c, const engine::StepInfo& s, size_t dtype_bytes) {
  StepWork w;
  // Weights: those a step of this many tokens reaches (decode_step_bytes with no context).
  w.matmul_bytes = decode_step_bytes(c, std::max(s.tokens, 1), 0, dtype_bytes);
  w.matmul_flops = matmul_flops_per_token(c) * s.tokens + 2.0 * c.hidden_size * c.vocab_size * s.seqs;
  w.attention_bytes = kv_bytes_per_token(c, dtype_bytes) * static_cast<double>(s.kv_tokens);
  w.attention_flops = 4.0 * c.num_layers * c.num_heads * c.head_dim * s.attention_pairs;
  w.bytes = w.matmul_bytes + w.attention_bytes;
  w.flops = w.matmul_flops + w.attention_flops;
  return w;
}

namespace {
// Seconds of compute: the matrix products at their rate, attention at the bf16 one.
double compute_seconds(double matmul_flops, double attention_flops, const Ceilings& c, bool fp8) {
  const double matmul_rate = fp8 ? c.fp8_gemm_tflops : c.gemm_tflops;
  return matmul_flops / (matmul_rate * 1e12) + attention_flops / (c.gemm_tflops * 1e12);
}
bool known(const Ceilings& c, bool fp8) {
  return c.copy_gbps > 0 && c.gemm_tflops > 0 && (!fp8 || c.fp8_gemm_tflops > 0);
}
}  // namespace

double step_floor_seconds(const StepWork& w, const Ceilings& c, bool fp8_matmuls) {
  if (!known(c, fp8_matmuls)) return 0;
  return std::max(w.bytes / (c.copy_gbps * 1e9),
                  compute_seconds(w.matmul_flops, w.attention_flops, c, fp8_matmuls));
}

double sequential_floor_seconds(const StepWork& w, const Ceilings& c, bool fp8_matmuls) {
  if (!known(c, fp8_matmuls)) return 0;
  return std::max(w.matmul_bytes / (c.copy_gbps * 1e9),
                  compute_seconds(w.matmul_flops, 0, c, fp8_matmuls)) +
         std::max(w.attention_bytes / (c.copy_gbps * 1e9),
                  compute_seconds(0, w.attention_flops, c, fp8_matmuls));
}

ThroughputRun run_throughput(const ThroughputOptions& o) {
  if (o.input_len < 1 || o.output_len < 1 || o.num_prompts < 1)
    throw Error(ErrorKind::invalid_argument,
                "bench throughput: --input-len, --output-len and --num-prompts must be >= 1");
  if (!(o.range_ratio >= 0 && o.range_ratio < 1))
    throw Error(ErrorKind::invalid_argument, "bench throughput: --range-ratio must be in [0, 1)");
  if (o.profile_steps < 0 || o.profile_from < 0)
    throw Error(ErrorKind::invalid_argument,
                "bench throughput: --profile-steps and --profile-from must be >= 0");
  if (o.model_dir.empty() == o.shape.empty())
    throw Error(ErrorKind::invalid_argument, "bench throughput: give --model or --shape (one)");
  if (o.engine.tensor_parallel > 1 && !o.shape.empty())
    throw Error(ErrorKind::invalid_argument,
                "bench throughput: --tensor-parallel loads each rank's part from --model; --shape "
                "runs on one device");

  ThroughputRun run;
  DeviceInfo device;
  const bool cuda = o.engine.device.is_cuda();
  const int index = o.engine.device.index;
  if (cuda) {
    std::string why;
    if (auto d = cuda_only(BRAID_CUDA_ONLY(query_device), "bench throughput")(index, &why))
      device = *d;
  }
  run.report = start_report("throughput", device);
  run.report.has_device = cuda;
  if (cuda) {
    std::vector<ResultRow> rows;
    run.report.ceilings = cuda_only(BRAID_CUDA_ONLY(measure_ceilings), "bench throughput")(
        o.quick_ceilings, index, true, false, [&](ResultRow r) { rows.push_back(r); });
    for (ResultRow& r : rows) record_row(run.report, std::move(r));
  }

  std::unique_ptr<engine::LLMEngine> eng;
  std::string label = o.model_dir;
  if (!o.shape.empty()) {
    model::ModelConfig config = decode_preset(o.shape);
    const DType dtype = cuda ? DType::bf16 : DType::f32;
    model::Weights w = random_weights(config, o.engine.device, dtype);
    eng = std::make_unique<engine::LLMEngine>(std::move(config), std::move(w), o.engine);
    label = o.shape + " (random weights)";
  } else {
    eng = std::make_unique<engine::LLMEngine>(o.model_dir, o.engine);
    if (o.engine.quantize != model::Quantize::none) label += " (quantize fp8)";
  }
  const model::ModelConfig& config = eng->model_config();
  const size_t dtype_bytes = dtype_size(eng->dtype());
  const bool fp8 = config.weights != model::WeightFormat::dense;

  // Random prompts (ids past the first few, which are often special), seeded.
  std::mt19937_64 rng(o.seed);
  auto length = [&](int len) {
    const int lo = std::max(1, static_cast<int>(len * (1 - o.range_ratio)));
    const int hi = std::max(lo, static_cast<int>(len * (1 + o.range_ratio)));
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  std::uniform_int_distribution<int32_t> token(std::min(10, config.vocab_size - 1), config.vocab_size - 1);
  int64_t prompt_tokens = 0, output_tokens = 0;
  std::vector<engine::Request> requests;
  for (int i = 0; i < o.num_prompts; ++i) {
    engine::Request r;
    r.id = std::to_string(i);
    r.prompt.resize(static_cast<size_t>(length(o.input_len)));
    for (int32_t& t : r.prompt) t = token(rng);
    r.stop.max_tokens = length(o.output_len);
    r.stop.ignore_eos = true;
    prompt_tokens += static_cast<int64_t>(r.prompt.size());
    eng->check(r);
    requests.push_back(std::move(r));
  }

  const auto t0 = std::chrono::steady_clock::now();
  for (const engine::Request& r : requests) eng->add_request(r);
  std::map<std::string, Bucket> buckets;
  Bucket all;
  int steps_run = 0;
  auto one_step = [&] {
    for (const engine::SequenceOutput& out : eng->step())
      output_tokens += static_cast<int64_t>(out.tokens.size());
    ++steps_run;
    const engine::StepInfo& s = eng->last_step();
    if (!s.ran) return;
    const StepWork w = step_work(config, s, dtype_bytes);
    const double floor_s = step_floor_seconds(w, run.report.ceilings, fp8);
    const double sequential_s = sequential_floor_seconds(w, run.report.ceilings, fp8);
    for (Bucket* b : {&buckets[bucket_of(s)], &all}) {
      b->us.push_back(s.seconds * 1e6);
      b->bytes += w.bytes, b->flops += w.flops, b->floor_s += floor_s, b->seconds += s.seconds;
      b->sequential_s += sequential_s;
      b->graph_steps += s.graph ? 1 : 0;
      b->tokens += s.tokens;
    }
  };
  std::string profile;
  while (eng->has_unfinished()) {
    if (o.profile_steps > 0 && steps_run == o.profile_from && cuda)
      profile = profile_steps(*eng, o, label, one_step);
    else
      one_step();
  }
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  auto ratio = [](const Bucket& b) { return b.floor_s > 0 ? fmt::format("{:.2f}x", b.seconds / b.floor_s) : "n/a"; };
  auto sequential = [](const Bucket& b) {
    return b.sequential_s > 0 ? fmt::format("{:.2f}x", b.seconds / b.sequential_s) : "n/a";
  };
  const std::string params_base = fmt::format("{} in {} out {} prompts", o.input_len, o.output_len,
                                              o.num_prompts);
  for (const auto& [name, b] : buckets) {
    const double n = static_cast<double>(b.us.size());
    ResultRow row;
    row.name = "step " + name;
    row.params = fmt::format("{} steps, {} tokens", b.us.size(), b.tokens);
    row.timing = fmt::format("engine steps ({} from graphs)", b.graph_steps);
    row.stats = summarize(b.us);
    row.bytes = b.bytes / n;
    row.flops = b.flops / n;
    row.bound = roofline_bound(row.flops, row.bytes, run.report.ceilings);
    row.note = fmt::format("sum {:.1f} ms, floor {:.1f} ms, {} the floor; sequential floor {:.1f} ms, {}",
                           b.seconds * 1e3, b.floor_s * 1e3, ratio(b), b.sequential_s * 1e3,
                           sequential(b));
    record_row(run.report, std::move(row));
  }
  ResultRow total;
  total.name = "throughput " + label;
  total.params = params_base;
  total.timing = "whole run";
  total.stats = summarize({elapsed * 1e6});
  total.bytes = all.bytes;
  total.flops = all.flops;
  total.bound = roofline_bound(total.flops, total.bytes, run.report.ceilings);
  total.note = fmt::format("{:.2f} req/s, {:.0f} output tok/s, {:.0f} total tok/s; steps {:.2f} s, floor "
                           "{:.2f} s, {} the floor; sequential floor {:.2f} s, {}",
                           o.num_prompts / elapsed, output_tokens / elapsed,
                           (prompt_tokens + output_tokens) / elapsed, all.seconds, all.floor_s, ratio(all),
                           all.sequential_s, sequential(all));
  record_row(run.report, total);

  run.summary = fmt::format(
      "{} on {} {}: {} prompts ({} prompt tokens, {} generated) in {:.2f} s\n"
      "  {:.2f} requests/s, {:.0f} output tokens/s, {:.0f} total tokens/s\n"
      "  {} steps ({} from CUDA graphs), {:.2f} s in steps; step-time floor {:.2f} s -> {} the floor\n"
      "  (sequential floor, matrix products then attention each at its bound: {:.2f} s -> {})\n"
      "  KV pool {} pages, {} preemptions, prefix cache hit {:.1f}%\n",
      label, device_name(eng->device()), dtype_name(eng->dtype()), o.num_prompts, prompt_tokens,
      output_tokens, elapsed, o.num_prompts / elapsed, output_tokens / elapsed,
      (prompt_tokens + output_tokens) / elapsed, all.us.size(), all.graph_steps, all.seconds,
      all.floor_s, ratio(all), all.sequential_s, sequential(all), eng->num_kv_pages(), eng->scheduler().preemptions(),
      eng->blocks().prefix_queried_tokens()
          ? 100.0 * eng->blocks().prefix_hit_tokens() / eng->blocks().prefix_queried_tokens()
          : 0.0);
  if (o.profile_steps > 0)
    run.summary += profile.empty() ? fmt::format("\nno profile: the run ended before step {} or "
                                                 "had no CUDA device\n", o.profile_from)
                                   : "\n" + profile;
  return run;
}

SuiteRun throughput_command(CLI::App& cmd) {
  struct Args {
    ThroughputOptions options;
    std::string device = "auto";
    std::string quantize = "none";
    bool enforce_eager = false, no_prefix_caching = false;
  };
  auto a = std::make_shared<Args>();
  ThroughputOptions& o = a->options;
  auto* model = cmd.add_option("--model", o.model_dir, "Hugging Face model folder");
  auto* shape = cmd.add_option("--shape", o.shape, "A named model shape with random weights (CUDA)");
  model->excludes(shape);
  cmd.add_option("--quantize", a->quantize, std::string(kQuantizeHelp) + " (with --model)")
      ->capture_default_str()
      ->needs(model);
  cmd.add_option("--input-len", o.input_len, "Prompt tokens")->capture_default_str();
  cmd.add_option("--output-len", o.output_len, "Generated tokens per prompt")->capture_default_str();
  cmd.add_option("--num-prompts", o.num_prompts, "Prompts")->capture_default_str();
  cmd.add_option("--range-ratio", o.range_ratio, "Lengths uniform in [len (1-r), len (1+r)]");
  cmd.add_option("--seed", o.seed, "Prompt seed")->capture_default_str();
  cmd.add_option("--device", a->device, "cpu, cuda or auto")->capture_default_str();
  cmd.add_option("--max-model-len", o.engine.max_model_len, "Context length");
  cmd.add_option("--max-num-seqs", o.engine.max_num_seqs, "Sequences in a batch at most")
      ->capture_default_str();
  cmd.add_option("--max-num-batched-tokens", o.engine.max_num_batched_tokens,
                 "Tokens per step at most")
      ->capture_default_str();
  cmd.add_option("--gpu-memory-utilization", o.engine.gpu_memory_utilization,
                 "Share of the free GPU memory for the KV cache")
      ->capture_default_str();
  cmd.add_option("--num-kv-pages", o.engine.num_kv_pages, "KV cache pages (overrides the share)");
  cmd.add_option("--tensor-parallel", o.engine.tensor_parallel,
                 "Ranks the model is split over (with --model): GPUs cuda:0 .. N-1 over NCCL, or "
                 "threads on the CPU")
      ->capture_default_str();
  cmd.add_flag("--expert-parallel", o.engine.expert_parallel,
               "With --tensor-parallel N on a mixture-of-experts model: rank r holds whole routed "
                 "experts [r E / N, (r + 1) E / N) instead of a slice of every expert (E a "
                 "multiple of N; everything else is split as before); a no-op with one rank");
  cmd.add_flag("--enforce-eager", a->enforce_eager, "No CUDA graphs");
  cmd.add_flag("--no-enable-prefix-caching", a->no_prefix_caching, "Prefix caching off");
  cmd.add_flag("--quick-ceilings", o.quick_ceilings, "Smaller ceiling measurements");
  cmd.add_option("--profile-steps", o.profile_steps,
                 "Record N steps with CUPTI and print their kernels (CUDA)");
  cmd.add_option("--profile-from", o.profile_from, "The first step recorded")->capture_default_str();
  return [a] {
    ThroughputOptions o = a->options;
    // A CUDA tensor-parallel group needs every kernel loaded when CUDA starts (nccl_comm.h): set
    // before the first CUDA call, which device_from_option makes.
    if (o.engine.tensor_parallel > 1) setenv("CUDA_MODULE_LOADING", "EAGER", 1);
    o.engine.device = device_from_option(a->device, "bench throughput");
    o.engine.quantize = quantize_from_option(a->quantize, "bench throughput");
    o.engine.cuda_graphs = !a->enforce_eager;
    o.engine.enable_prefix_caching = !a->no_prefix_caching;
    if (o.engine.max_model_len == 0)
      o.engine.max_model_len = static_cast<int>(o.input_len * (1 + o.range_ratio)) +
                               static_cast<int>(o.output_len * (1 + o.range_ratio)) + 1;
    const ThroughputRun run = run_throughput(o);
    return report_result(run.report, run.summary);
  };
}

}  // namespace braid::bench
