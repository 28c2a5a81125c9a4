#include "bench/suites/registry.h"

#include <fmt/core.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "bench/harness/cuda_only.h"
#include "bench/suites/attention.h"
#include "bench/suites/attention_decode.h"
#include "bench/suites/attention_mla.h"
#include "bench/suites/ceilings.h"
#include "bench/suites/decode.h"
#include "bench/suites/gemv.h"
#include "bench/suites/kernels.h"
#include "bench/suites/moe.h"
#include "bench/suites/moe_fp8.h"
#include "bench/suites/prefill.h"
#include "bench/suites/router.h"
#include "bench/suites/serve.h"
#include "bench/suites/throughput.h"
#include "braid/buffer.h"
#include "braid/error.h"

namespace braid::bench {

const std::vector<Suite>& suites() {
  // {name, summary, needs CUDA, command, {bench all's runs: {file, arguments, group}}}. The
  // ceilings run first; the long end-to-end suites last.
  static const std::vector<Suite> table = {
      {"ceilings",
       "Measure copy bandwidth, bf16 GEMM/GEMV and fp8 GEMM rates and kernel launch costs", true,
       BRAID_CUDA_ONLY(ceilings_command), {{"ceilings", {}, "ceilings"}}},
      {"kernels",
       "Every op (norms, RoPE, GEMMs, attention, MoE, FP8) over model shapes: time, GB/s, "
       "TFLOP/s, % of ceiling, and a check against the CPU reference on every row",
       true, &kernels_command, {{"kernels", {}, "kernels"}}},
      {"attention",
       "FlashAttention forward (attention_prefill, bf16) on ANCHORS.md's shapes, checked against "
       "fp64, with the copy and GEMM ceilings of the same run",
       true, BRAID_CUDA_ONLY(attention_command), {{"attention", {}, "attention"}}},
      {"attention-decode",
       "Decode attention over a paged KV cache on ANCHORS.md's shapes (32/8 heads, d128, bf16)",
       true, BRAID_CUDA_ONLY(attention_decode_command), {{"attention_decode", {}, "attention"}}},
      {"attention-mla",
       "DeepSeek's latent attention (attention_mla, absorbed, bf16) on decode shapes of "
       "DeepSeek-V3 (128 heads) and V2-Lite (16 heads), with the copy ceiling of the same run",
       true, BRAID_CUDA_ONLY(attention_mla_command), {{"attention_mla", {}, "attention"}}},
      {"gemv",
       "GEMV (m <= 16) against cuBLASLt on the projections of Qwen2.5-0.5B, Llama-3.2-1B and "
       "Llama-2-7B",
       true, BRAID_CUDA_ONLY(gemv_command), {{"gemv", {}, "kernels"}}},
      {"router",
       "MoE router (moe_route_topk_softmax, bf16, renormalised; or moe_route_grouped) per call, "
       "against the fixed cost of an empty and a read-write kernel and the copy ceiling of the "
       "same run (seed 000)",
       true, BRAID_CUDA_ONLY(router_command),
       {{"router", {}, "moe"}, {"router_grouped", {"--router", "grouped"}, "moe"}}},
      {"moe",
       "bf16 MoE layer (router gemm, route, permute, gather, grouped GEMMs, combine; moe_experts "
       "for decode) per step and whole, with dense cuBLAS, load statistics and a CPU check",
       true, BRAID_CUDA_ONLY(moe_command), {{"moe", {}, "moe"}}},
      {"moe-fp8",
       "FP8 block-scale MoE: seed 003's definition (moe_fp8_block_scale and its pipeline of "
       "public ops, per step) and seed 001's layer with fp8 experts, against their floors, the "
       "bf16 layer and dense cuBLASLt fp8, with sampled checks against fp32",
       true, BRAID_CUDA_ONLY(moe_fp8_command), {{"moe_fp8", {}, "moe"}}},
      {"decode", "Time one decode step (ms/token, GB/s, % of floor)", true,
       BRAID_CUDA_ONLY(decode_command),
       {{"decode_llama-3.2-1b", {"--shape", "llama-3.2-1b", "--breakdown"}, "decode"},
        {"decode_llama-3.1-8b", {"--shape", "llama-3.1-8b", "--breakdown"}, "decode"},
        {"decode_qwen3-30b-a3b", {"--shape", "qwen3-30b-a3b", "--breakdown"}, "decode"}}},
      {"prefill", "Seed 001's end-to-end prefill: small/medium/large models, ms and tokens/s", true,
       BRAID_CUDA_ONLY(prefill_command), {{"prefill", {}, "prefill"}}},
      {"throughput",
       "The serving engine offline: N random prompts at once, tokens/s against the step-time "
       "floor",
       false, &throughput_command, {}},
      {"serve",
       "Load an OpenAI-compatible server with random prompts and measure TTFT, TPOT, ITL, E2E "
       "latency and throughput as vllm bench serve does (no GPU needed; exits 1 if a request "
       "failed)",
       false, &serve_command, {}},
  };
  return table;
}

std::string suite_list() {
  bool cuda_build = true;  // a build without CUDA lacks some GPU suite's command
  for (const Suite& s : suites()) cuda_build = cuda_build && (s.command || !s.needs_cuda);
  std::string out = fmt::format("{:<17} {:<22} {}\n", "suite", "runs", "bench all (group: file)");
  for (const Suite& s : suites()) {
    const std::string where = !s.needs_cuda   ? "any build"
                              : !s.command    ? "GPU (not this build)"
                              : !cuda_build   ? "GPU (here: --list)"
                                              : "GPU";
    std::vector<std::string> runs;
    for (const AllRun& r : s.all) runs.push_back(r.group + ": " + r.file);
    const std::string all = runs.empty() ? "-" : fmt::format("{}", fmt::join(runs, ", "));
    out += fmt::format("{:<17} {:<22} {}\n{:<17} {}\n", s.name, where, all, "", s.summary);
  }
  return out;
}

int run_all(const AllOptions& a) {
  for (const Suite& s : suites())
    if (!s.all.empty() && !s.command) {  // a build without CUDA lacks the suites bench all runs
      fmt::print(stderr, "braidinfer bench all: this build has no CUDA support\n");
      return 2;
    }
  std::vector<std::string> groups;  // in table order, each once
  for (const Suite& s : suites())
    for (const AllRun& r : s.all)
      if (std::find(groups.begin(), groups.end(), r.group) == groups.end())
        groups.push_back(r.group);
  for (const auto* list : {&a.only, &a.skip})
    for (const std::string& g : *list)
      if (std::find(groups.begin(), groups.end(), g) == groups.end())
        throw Error(ErrorKind::invalid_argument,
                    fmt::format("bench all: unknown suite '{}' (known: {})", g,
                                fmt::join(groups, ", ")));
  if (!cuda_available()) {
    fmt::print(stderr, "braidinfer bench all: no CUDA device is visible (nothing to measure)\n");
    return 2;
  }
  std::filesystem::create_directories(a.out_dir);
  struct Chosen {
    const Suite* suite;
    const AllRun* run;
  };
  std::vector<Chosen> chosen;
  for (const Suite& s : suites())
    for (const AllRun& r : s.all) {
      const bool wanted = a.only.empty() || std::count(a.only.begin(), a.only.end(), r.group);
      const bool skipped = std::count(a.skip.begin(), a.skip.end(), r.group) > 0;
      if (wanted && !skipped) chosen.push_back({&s, &r});
    }
  struct Outcome {
    std::string file;
    int exit_code;
    double seconds;
  };
  std::vector<Outcome> outcomes;
  const auto start = std::chrono::steady_clock::now();
  auto seconds_since = [](auto t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  for (size_t i = 0; i < chosen.size(); ++i) {
    const Suite& s = *chosen[i].suite;
    const AllRun& r = *chosen[i].run;
    const std::string line = fmt::format("{}{}{}", s.name, r.args.empty() ? "" : " ",
                                         fmt::join(r.args, " "));
    fmt::print(stderr, "\n=== [{}/{}] bench {} ({:.0f} s elapsed) ===\n", i + 1, chosen.size(),
               line, seconds_since(start));
    fmt::print("\n=== bench {} ===\n", line);
    std::fflush(stdout);
    std::vector<std::string> args = r.args;
    const std::string base = (std::filesystem::path(a.out_dir) / r.file).string();
    for (const char* ext : {"json", "csv", "md"}) {
      args.push_back(std::string("--") + ext);
      args.push_back(base + "." + ext);
    }
    if (a.quick) args.push_back("--quick");
    const auto t0 = std::chrono::steady_clock::now();
    const int code = run_suite(s, args);
    outcomes.push_back({r.file, code, seconds_since(t0)});
    std::fflush(stdout);
  }
  fmt::print("\n=== bench all: {} suites in {:.0f} s, results in {} ===\n", outcomes.size(),
             seconds_since(start), a.out_dir);
  int failed = 0;
  for (const Outcome& o : outcomes) {
    fmt::print("  {:<24} {:>7.1f} s  {}\n", o.file, o.seconds,
               o.exit_code == 0 ? "ok" : fmt::format("FAILED (exit {})", o.exit_code));
    failed += o.exit_code != 0;
  }
  return failed ? 1 : 0;
}

}  // namespace braid::bench
