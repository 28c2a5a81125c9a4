// `braidinfer generate`: text from a Hugging Face model folder, streamed as it is produced.
#include <fmt/core.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/harness/options.h"
#include "braid/buffer.h"
#include "braid/error.h"
#include "chat/chat_template.h"
#include "commands.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/prompt_ids.h"
#include "tokenizer/tokenizer.h"

namespace braid::cli {

namespace {

struct GenerateArgs {
  std::string model;
  std::string prompt;
  std::string prompt_ids;  // "1,2,3": bypasses the tokenizer
  int new_tokens = 64;
  std::string device = "auto";
  std::string dtype;
  std::string quantize = "none";
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  int max_context = 0;
  bool ignore_eos = false;
  bool no_special = false;
  bool print_ids = false;
  bool chat = false;   // --prompt is a user message, put through the model's chat template
  std::string system;  // --chat's optional system message
  int tensor_parallel = 1;  // --tensor-parallel
  bool expert_parallel = false;  // --expert-parallel
};

int run_generate(const GenerateArgs& a) {
  if (!std::filesystem::is_directory(a.model))
    throw Error(ErrorKind::io, "generate: --model '" + a.model + "' is not a folder");
  // A CUDA tensor-parallel group needs every kernel loaded when CUDA starts (nccl_comm.h): set
  // before the first CUDA call, which device_from_option may make.
  if (a.tensor_parallel > 1) setenv("CUDA_MODULE_LOADING", "EAGER", 1);
  engine::EngineOptions options;
  options.device = bench::device_from_option(a.device, "generate");
  if (!a.dtype.empty()) options.dtype = dtype_from_name(a.dtype);
  options.quantize = bench::quantize_from_option(a.quantize, "generate");
  options.max_context = a.max_context;
  if (a.tensor_parallel < 1)
    throw Error(ErrorKind::invalid_argument,
                "generate: --tensor-parallel must be at least 1, got " + std::to_string(a.tensor_parallel));
  options.tensor_parallel.size = a.tensor_parallel;
  options.tensor_parallel.expert_parallel = a.expert_parallel;
  engine::SamplingParams sampling{a.temperature, a.top_k, a.top_p, a.seed};
  engine::validate(sampling);

  std::unique_ptr<tokenizer::Tokenizer> tok;
  std::vector<int32_t> prompt;
  if (!a.prompt_ids.empty()) {
    prompt = engine::parse_prompt_ids(a.prompt_ids);
  } else if (a.chat) {
    // The template writes the special tokens (BOS, role markers) itself: none are added again.
    const chat::ChatTemplate templ = chat::ChatTemplate::from_dir(a.model);
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (!a.system.empty()) messages.push_back({{"role", "system"}, {"content", a.system}});
    messages.push_back({{"role", "user"}, {"content", a.prompt}});
    chat::RenderOptions render;
    render.add_generation_prompt = true;
    const std::string text = templ.render(messages, render);
    tok = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_dir(a.model));
    prompt = tok->encode(text, /*add_special_tokens=*/false);
  } else {
    tok = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_dir(a.model));
    prompt = tok->encode(a.prompt, !a.no_special);
  }
  engine::Engine eng(a.model, options);
  for (const std::string& note : eng.config().notes) fmt::print(stderr, "note: {}\n", note);
  const std::vector<int32_t> eos =
      a.ignore_eos ? std::vector<int32_t>{}
                   : std::vector<int32_t>(eng.config().eos_token_ids.begin(),
                                          eng.config().eos_token_ids.end());

  std::unique_ptr<tokenizer::StreamDecoder> stream;
  if (tok) {
    stream = std::make_unique<tokenizer::StreamDecoder>(*tok, /*skip_special_tokens=*/true);
    if (!a.chat) fmt::print("{}", a.prompt);  // a chat reply is shown alone
  }
  std::fflush(stdout);
  auto on_token = [&](int32_t id) {
    if (a.print_ids || !stream)
      fmt::print("{}{}", id, stream ? " " : ",");
    else
      fmt::print("{}", stream->push(id));
    std::fflush(stdout);
  };
  const engine::GenerationResult r =
      engine::generate(eng, prompt, a.new_tokens, sampling, eos, on_token);
  if (stream && !a.print_ids) fmt::print("{}", stream->finish());
  if (const std::string note = engine::context_stop_note(r, a.new_tokens, eng.context());
      !note.empty()) {
    std::fflush(stdout);
    fmt::print(stderr, "\n{}\n", note);
  }

  const double prefill_tps = r.prefill_ms > 0 ? r.prompt_tokens / (r.prefill_ms / 1e3) : 0;
  const double ms_per_token = r.decode_steps ? r.decode_ms / r.decode_steps : 0;
  fmt::print("\n[prompt {} tokens | prefill {:.2f} ms, {:.0f} tok/s | generated {} tokens, decode "
             "{:.3f} ms/token, {:.1f} tok/s | {} {}{}{}]\n",
             r.prompt_tokens, r.prefill_ms, prefill_tps, r.tokens.size(), ms_per_token,
             ms_per_token > 0 ? 1e3 / ms_per_token : 0.0, device_name(eng.device()),
             dtype_name(eng.dtype()),
             eng.config().weights == model::WeightFormat::dense
                 ? ""
                 : fmt::format(", {} linear layers", model::weight_format_name(eng.config().weights)),
             r.stopped_at_eos ? ", stopped at end of text" : "");
  return 0;
}

}  // namespace

void add_generate_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* g = app.add_subcommand("generate", "Generate text from a Hugging Face model folder");
  g->add_option("--model", a->model, "Folder with config.json, *.safetensors, tokenizer.json")
      ->required();
  auto* prompt = g->add_option("--prompt", a->prompt, "Prompt text");
  auto* ids = g->add_option("--prompt-ids", a->prompt_ids,
                            "Prompt as comma-separated token ids (no tokenizer needed)");
  prompt->excludes(ids);
  g->add_option("-n,--new-tokens", a->new_tokens, "Tokens to generate")->capture_default_str();
  g->add_option("--device", a->device, "cpu, cuda or auto")->capture_default_str();
  g->add_option("--dtype", a->dtype, "Compute dtype (f32, bf16, f16); default per device");
  g->add_option("--quantize", a->quantize, bench::kQuantizeHelp)->capture_default_str();
  g->add_option("--temperature", a->temperature, "0 = greedy")->capture_default_str();
  g->add_option("--top-k", a->top_k, "Sample among the k most likely tokens (0 = all)");
  g->add_option("--top-p", a->top_p, "Nucleus sampling mass")->capture_default_str();
  g->add_option("--seed", a->seed, "Sampling seed")->capture_default_str();
  g->add_option("--tensor-parallel", a->tensor_parallel,
                "Ranks the model is split over (Megatron-style): GPUs cuda:0 .. N-1 over NCCL, or "
                "threads on the CPU")
      ->capture_default_str();
  g->add_flag("--expert-parallel", a->expert_parallel,
              "With --tensor-parallel N on a mixture-of-experts model: rank r holds whole routed "
                "experts [r E / N, (r + 1) E / N) instead of a slice of every expert (E a "
                "multiple of N; everything else is split as before); a no-op with one rank");
  g->add_option("--max-context", a->max_context,
                "Context length to allocate (default: the model's, at most 8192)");
  g->add_flag("--ignore-eos", a->ignore_eos, "Do not stop at end-of-text tokens");
  g->add_flag("--no-special", a->no_special, "Do not add the tokenizer's special tokens (BOS)");
  g->add_flag("--print-ids", a->print_ids, "Print token ids instead of text");
  auto* chat = g->add_flag("--chat", a->chat,
                           "Treat --prompt as a user message and apply the model's chat template "
                           "(add_generation_prompt on; the template adds the special tokens)");
  chat->excludes(ids);
  g->add_option("--system", a->system, "System message for --chat")->needs(chat);
  g->callback([a, &exit_code] {
    if (a->prompt.empty() && a->prompt_ids.empty())
      throw Error(ErrorKind::invalid_argument, "generate: give --prompt or --prompt-ids");
    exit_code = run_generate(*a);
  });
}

}  // namespace braid::cli
