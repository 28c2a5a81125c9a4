// `braidinfer serve`: the OpenAI-compatible server over the serving engine.
#include <fmt/core.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "bench/harness/options.h"
#include "bench/harness/random_weights.h"
#include "bench/suites/decode.h"
#include "braid/buffer.h"
#include "braid/error.h"
#include "commands.h"
#include "engine/engine.h"
#include "engine/engine_loop.h"
#include "server/chat_renderer.h"
#include "server/http_server.h"

namespace braid::cli {

namespace {

struct ServeArgs {
  std::string model;
  std::string shape;      // a named shape with random weights, for benchmarks
  std::string tokenizer;  // a tokenizer.json folder for --shape
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string device = "auto";
  std::string dtype;
  std::string quantize = "none";
  std::string served_model_name;
  int max_model_len = 0;
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;
  double gpu_memory_utilization = 0.9;
  int num_kv_pages = 0;
  bool no_prefix_caching = false;
  bool enforce_eager = false;
  int max_waiting = 1024;
  int tensor_parallel = 1;
  bool expert_parallel = false;
  size_t max_request_bytes = size_t{32} << 20;
};

server::HttpServer* g_server = nullptr;  // for the signal handler

int run_serve(const ServeArgs& a) {
  if (a.model.empty() == a.shape.empty())
    throw Error(ErrorKind::invalid_argument, "serve: give --model DIR or --shape NAME");
  if (!a.model.empty() && !std::filesystem::is_directory(a.model))
    throw Error(ErrorKind::io, "serve: --model '" + a.model + "' is not a folder");
  if (a.tensor_parallel > 1 && !a.shape.empty())
    throw Error(ErrorKind::invalid_argument,
                "serve: --tensor-parallel loads each rank's part from --model; --shape runs on one device");
  // A CUDA tensor-parallel group needs every kernel loaded when CUDA starts (nccl_comm.h): set
  // before the first CUDA call, which device_from_option may make.
  if (a.tensor_parallel > 1) setenv("CUDA_MODULE_LOADING", "EAGER", 1);
  engine::EngineConfig cfg;
  cfg.tensor_parallel = a.tensor_parallel;
  cfg.expert_parallel = a.expert_parallel;
  cfg.device = bench::device_from_option(a.device, "serve");
  if (!a.dtype.empty()) cfg.dtype = dtype_from_name(a.dtype);
  cfg.quantize = bench::quantize_from_option(a.quantize, "serve");
  cfg.max_model_len = a.max_model_len;
  cfg.max_num_seqs = a.max_num_seqs;
  cfg.max_num_batched_tokens = a.max_num_batched_tokens;
  cfg.gpu_memory_utilization = a.gpu_memory_utilization;
  cfg.num_kv_pages = a.num_kv_pages;
  cfg.enable_prefix_caching = !a.no_prefix_caching;
  cfg.cuda_graphs = !a.enforce_eager;
  if (a.max_waiting < 0) throw Error(ErrorKind::invalid_argument, "serve: --max-waiting must be >= 0");

  const std::string source = a.model.empty() ? a.shape : a.model;
  fmt::print(stderr, "braidinfer serve: loading {} on {}...\n", source, device_name(cfg.device));
  std::unique_ptr<engine::LLMEngine> engine;
  if (a.shape.empty()) {
    engine = std::make_unique<engine::LLMEngine>(a.model, cfg);
  } else {
    // Random weights of a named shape (benchmarks): bf16 on CUDA, f32 on the CPU.
    model::ModelConfig config = bench::decode_preset(a.shape);
    const DType dtype = cfg.dtype ? *cfg.dtype : engine::default_dtype(config, cfg.device, {});
    model::Weights w = bench::random_weights(config, cfg.device, dtype);
    std::unique_ptr<tokenizer::Tokenizer> tok;
    if (!a.tokenizer.empty())
      tok = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_dir(a.tokenizer));
    engine = std::make_unique<engine::LLMEngine>(std::move(config), std::move(w), cfg, std::move(tok));
  }
  fmt::print(stderr,
             "braidinfer serve: {} {} weights{} {:.2f} GB, context {}, KV pool {} pages of {} tokens, "
             "max {} sequences, {} tokens per step, prefix caching {}\n",
             device_name(engine->device()), dtype_name(engine->dtype()),
             engine->model_config().weights == model::WeightFormat::dense
                 ? ""
                 : fmt::format(" (linear layers {})",
                               model::weight_format_name(engine->model_config().weights)),
             static_cast<double>(engine->weight_bytes()) / 1e9, engine->max_model_len(),
             engine->num_kv_pages(), cfg.page_size, cfg.max_num_seqs, cfg.max_num_batched_tokens,
             cfg.enable_prefix_caching ? "on" : "off");
  engine::EngineLoop loop(std::move(engine), a.max_num_seqs, a.max_waiting);

  server::ServerConfig sc;
  sc.host = a.host;
  sc.port = a.port;
  const std::string base = std::filesystem::path(source).lexically_normal().filename().string();
  sc.model_names = {a.served_model_name.empty() ? source : a.served_model_name, source, base};
  sc.max_request_bytes = a.max_request_bytes;
  sc.render_chat = server::chat_renderer(a.model);
  if (!a.model.empty() && !sc.render_chat)
    fmt::print(stderr, "braidinfer serve: {} has no chat template: /v1/chat/completions answers 400\n", a.model);
  server::HttpServer http(loop, sc);
  const int port = http.bind();
  for (const std::string& note : engine->model_config().notes)
    fmt::print(stderr, "braidinfer serve: note: {}\n", note);
  fmt::print(stderr, "braidinfer serve: model '{}' at http://{}:{}/v1 (Ctrl-C stops)\n",
             sc.model_names[0], a.host, port);
  g_server = &http;
  std::signal(SIGINT, [](int) { if (g_server) g_server->stop(); });
  std::signal(SIGTERM, [](int) { if (g_server) g_server->stop(); });
  http.serve();
  g_server = nullptr;
  fmt::print(stderr, "braidinfer serve: stopped\n");
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* s = app.add_subcommand("serve", "OpenAI-compatible HTTP server (continuous batching)");
  auto* model = s->add_option("--model", a->model, "Hugging Face model folder");
  auto* shape = s->add_option("--shape", a->shape,
                              "Instead of --model: a named model shape with random weights");
  model->excludes(shape);
  s->add_option("--tokenizer", a->tokenizer, "With --shape: a folder with tokenizer.json");
  s->add_option("--host", a->host, "Address to listen on")->capture_default_str();
  s->add_option("--port", a->port, "Port (0: any free port)")->capture_default_str();
  s->add_option("--device", a->device, "cpu, cuda or auto")->capture_default_str();
  s->add_option("--dtype", a->dtype, "Compute dtype (f32, bf16, f16); default per device");
  s->add_option("--quantize", a->quantize, std::string(bench::kQuantizeHelp) + " (with --model)")
      ->capture_default_str()
      ->needs(model);
  s->add_option("--served-model-name", a->served_model_name,
                "The model's name in the API (default: the --model argument)");
  s->add_option("--max-model-len", a->max_model_len,
                "Context length (default: the model's, at most 8192)");
  s->add_option("--max-num-seqs", a->max_num_seqs, "Sequences in a batch at most")
      ->capture_default_str();
  s->add_option("--max-num-batched-tokens", a->max_num_batched_tokens,
                "Tokens in one step at most (prompts longer than this are prefilled in chunks)")
      ->capture_default_str();
  s->add_option("--gpu-memory-utilization", a->gpu_memory_utilization,
                "Share of the GPU memory free after weights and workspace given to the KV cache")
      ->capture_default_str();
  s->add_option("--num-kv-pages", a->num_kv_pages, "KV cache pages (overrides the memory share)");
  s->add_flag("--no-enable-prefix-caching", a->no_prefix_caching, "Turn prefix caching off");
  s->add_flag("--enforce-eager", a->enforce_eager, "No CUDA graphs for decode steps");
  s->add_option("--tensor-parallel", a->tensor_parallel,
                "Ranks the model is split over (Megatron-style): GPUs cuda:0 .. N-1 over NCCL, or "
                "threads on the CPU")
      ->capture_default_str();
  s->add_flag("--expert-parallel", a->expert_parallel,
              "With --tensor-parallel N on a mixture-of-experts model: rank r holds whole routed "
                "experts [r E / N, (r + 1) E / N) instead of a slice of every expert (E a "
                "multiple of N; everything else is split as before); a no-op with one rank");
  s->add_option("--max-waiting", a->max_waiting,
                "Requests queued beyond --max-num-seqs before new ones get 503")
      ->capture_default_str();
  s->add_option("--max-request-bytes", a->max_request_bytes, "Largest request body (413 beyond)")
      ->capture_default_str();
  s->callback([a, &exit_code] { exit_code = run_serve(*a); });
}

}  // namespace braid::cli
