// `braidinfer bench serve`: the load generator (suites/serve/) driven from the command line.
#include "bench/suites/serve.h"

#include <CLI/CLI.hpp>

#include <fmt/core.h>

#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/suites/serve/distribution.h"
#include "bench/suites/serve/load_generator.h"
#include "bench/suites/serve/random_dataset.h"
#include "bench/suites/serve/request_body.h"
#include "bench/suites/serve/serve_client.h"
#include "bench/suites/serve/serve_metrics.h"
#include "bench/suites/serve/serve_report.h"
#include "braid/error.h"
#include "tokenizer/tokenizer.h"

namespace braid::bench {

namespace {

constexpr const char* kCmd = "braidinfer bench serve";
// Without a tokenizer the ids come from [409, 4096): the vocabulary of the embedded
// tiny-fortunes model, and common tokens of every larger one.
constexpr int kDefaultVocabSize = 4096;

// The options: most of them are the run's parameters as the report states them.
struct ServeArgs {
  serve::ServeParameters params = defaults();
  std::string api_key;
  std::string request_rate = "inf";
  int vocab_size = 0;  // 0: the tokenizer's, else kDefaultVocabSize
  std::vector<double> percentiles{90, 99};
  bool test_request = true;

  static serve::ServeParameters defaults() {
    serve::ServeParameters p;
    p.base_url = "http://127.0.0.1:8000", p.endpoint = "/v1/completions";
    p.num_prompts = 1000, p.input_len = 1024, p.output_len = 128, p.timeout_s = 3600;
    return p;
  }
};

double parse_rate(const std::string& s) {
  if (s == "inf") return std::numeric_limits<double>::infinity();
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || !(v > 0) || std::isinf(v))
    throw Error(ErrorKind::invalid_argument,
                fmt::format("{}: --request-rate: expected requests/s > 0 or inf, got '{}'", kCmd,
                            s));
  return v;
}

serve::Api api_of(const std::string& endpoint) {
  const std::string chat = "chat/completions";
  return endpoint.size() >= chat.size() &&
                 endpoint.compare(endpoint.size() - chat.size(), chat.size(), chat) == 0
             ? serve::Api::chat
             : serve::Api::completions;
}

const char* form_name(serve::PromptForm f) {
  switch (f) {
    case serve::PromptForm::token_ids: return "token_ids";
    case serve::PromptForm::tokenizer_text: return "tokenizer_text";
    case serve::PromptForm::random_words: return "random_words";
  }
  return "?";
}

SuiteResult run_serve(const ServeArgs& a) {
  const serve::ServeParameters& o = a.params;
  if (o.dataset != "random")
    throw Error(ErrorKind::invalid_argument,
                fmt::format("{}: --dataset: only 'random' is supported, got '{}'", kCmd,
                            o.dataset));
  if (o.endpoint.empty() || o.endpoint.front() != '/')
    throw Error(ErrorKind::invalid_argument,
                fmt::format("{}: --endpoint: expected a path starting with '/', got '{}'", kCmd,
                            o.endpoint));
  if (o.num_prompts < 1)
    throw Error(ErrorKind::invalid_argument,
                fmt::format("{}: --num-prompts: expected >= 1, got {}", kCmd, o.num_prompts));
  const double rate = parse_rate(a.request_rate);
  const serve::Api api = api_of(o.endpoint);
  serve::describe({}, a.percentiles);  // a bad percentile fails now, not after the whole run

  const serve::ClientOptions client_opts{o.base_url, a.api_key, o.timeout_s};
  // Closed before the run, so its idle connection holds nothing of the server's.
  auto client = std::make_unique<serve::ServeClient>(client_opts);
  std::string model = o.model;
  if (model.empty()) {
    model = client->first_model_id();
    fmt::print(stderr, "{}: model '{}' (the first of {}/v1/models)\n", kCmd, model, o.base_url);
  }

  std::optional<tokenizer::Tokenizer> tok;
  if (!o.tokenizer.empty()) tok = tokenizer::Tokenizer::from_dir(o.tokenizer);
  serve::RandomDatasetOptions ds;
  // One prompt more than the run sends: the test request's, so it warms no prefix cache for a
  // prompt of the run.
  ds.num_prompts = o.num_prompts + 1;
  ds.input_len = o.input_len;
  ds.output_len = o.output_len;
  ds.range_ratio = o.range_ratio;
  ds.seed = o.seed;
  ds.vocab_size = a.vocab_size > 0 ? a.vocab_size : tok ? tok->vocab_size() : kDefaultVocabSize;
  ds.form = tok ? serve::PromptForm::tokenizer_text
            : api == serve::Api::chat ? serve::PromptForm::random_words
                                      : serve::PromptForm::token_ids;
  const std::vector<serve::Prompt> prompts = serve::random_dataset(ds, tok ? &*tok : nullptr);
  const serve::SamplingOptions sampling{o.temperature, o.ignore_eos};
  std::vector<serve::LoadRequest> requests;
  requests.reserve(prompts.size());
  for (const serve::Prompt& p : prompts)
    requests.push_back({serve::request_body(api, model, p, sampling).dump(), p.input_len});
  const serve::LoadRequest test = std::move(requests.back());
  requests.pop_back();

  if (a.test_request) {
    // As vllm bench serve does: one request first, so a wrong URL, model or prompt form fails in
    // a second with the server's reason instead of N times.
    fmt::print(stderr, "{}: test request...\n", kCmd);
    const serve::RequestResult r =
        client->stream(o.endpoint, test.body, test.prompt_len, serve::ServeClient::Clock::now());
    if (!r.ok) {
      SuiteResult failed = not_measured(fmt::format("{}: the test request to {}{} failed: {}",
                                                    kCmd, o.base_url, o.endpoint, r.error));
      failed.exit_code = 1;
      return failed;
    }
  }
  client.reset();

  serve::LoadOptions load;
  load.client = client_opts;
  load.path = o.endpoint;
  load.request_rate = rate;
  load.burstiness = o.burstiness;
  load.max_concurrency = o.max_concurrency;
  load.seed = o.seed;
  const int step = std::max(1, o.num_prompts / 10);
  load.on_progress = [step](int finished, int failed, int total) {
    if (finished % step == 0 || finished == total)
      fmt::print(stderr, "  {}/{} requests finished ({} failed)\n", finished, total, failed);
  };
  fmt::print(stderr, "{}: {} requests, rate {}, max concurrency {}...\n", kCmd, o.num_prompts,
             a.request_rate, o.max_concurrency > 0 ? std::to_string(o.max_concurrency) : "none");
  const serve::LoadRun run = serve::run_load(load, requests);

  serve::ServeReport report;
  report.git_commit = git_commit();
  report.date_utc = utc_now();
  report.params = o;
  serve::ServeParameters& p = report.params;
  p.model = model;
  p.prompt_form = form_name(ds.form);
  p.vocab_size = ds.form == serve::PromptForm::random_words ? 0 : ds.vocab_size;
  p.request_rate = rate;
  p.workers = run.workers;
  report.metrics = serve::compute_metrics(run.results, run.duration_s, a.percentiles);

  SuiteResult result;
  result.text = serve::serve_table(report);
  if (o.max_concurrency == 0 && o.num_prompts > serve::kMaxWorkers)
    result.text += fmt::format("(at most {} requests were in flight: the client's thread limit)\n",
                               serve::kMaxWorkers);
  result.json = serve::serve_json(report);
  result.csv = serve::serve_csv(report);
  result.md = serve::serve_markdown(report);
  result.exit_code = report.metrics.failed > 0 ? 1 : 0;
  return result;
}

}  // namespace

SuiteRun serve_command(CLI::App& cmd) {
  auto a = std::make_shared<ServeArgs>();
  cmd.add_option("--base-url", a->params.base_url, "Server: http://HOST:PORT[/PREFIX]")
      ->capture_default_str();
  cmd.add_option("--endpoint", a->params.endpoint,
                  "/v1/completions or /v1/chat/completions (a path ending in chat/completions "
                  "is sent chat messages)")
      ->capture_default_str();
  cmd.add_option("--model", a->params.model,
                 "Model name to send (default: the first of /v1/models)");
  cmd.add_option("--api-key", a->api_key, "Sent as 'Authorization: Bearer KEY'");
  cmd.add_option("--dataset", a->params.dataset, "Prompt source (random)")
      ->capture_default_str();
  cmd.add_option("--input-len", a->params.input_len, "Prompt tokens")->capture_default_str();
  cmd.add_option("--output-len", a->params.output_len, "max_tokens of each request")
      ->capture_default_str();
  cmd.add_option("--range-ratio", a->params.range_ratio,
                  "Lengths uniform in [L(1-R), L(1+R)], 0 <= R < 1")
      ->capture_default_str();
  cmd.add_option("--num-prompts", a->params.num_prompts, "Requests to send")
      ->capture_default_str();
  cmd.add_option("--request-rate", a->request_rate,
                  "Requests/s with Poisson arrivals, or inf: all at once")
      ->capture_default_str();
  cmd.add_option("--burstiness", a->params.burstiness,
                  "Gamma shape of the arrival gaps (1: Poisson; < 1 burstier, > 1 more even)")
      ->capture_default_str();
  cmd.add_option("--max-concurrency", a->params.max_concurrency,
                  "Requests in flight at most (0: no limit but the client's 1024 threads)")
      ->capture_default_str();
  cmd.add_option("--seed", a->params.seed, "Seed of the prompts and the arrival times")
      ->capture_default_str();
  cmd.add_option("--vocab-size", a->vocab_size,
                  "Prompt ids are drawn from [V/10, V) (default: the tokenizer's vocabulary, "
                  "else 4096)");
  cmd.add_option("--tokenizer", a->params.tokenizer,
                  "Folder with tokenizer.json: prompts are the random ids decoded to text "
                  "(without it, completions get id arrays and chat gets random English words)");
  cmd.add_flag("--ignore-eos,!--no-ignore-eos", a->params.ignore_eos,
                "Ask the server to generate max_tokens regardless of end-of-text (default on)");
  cmd.add_option("--temperature", a->params.temperature, "Sampling temperature (0: greedy)")
      ->capture_default_str();
  cmd.add_option("--timeout-s", a->params.timeout_s,
                  "A request fails after this many seconds (or this long without data)")
      ->capture_default_str();
  cmd.add_option("--percentiles", a->percentiles, "Latency percentiles to report, comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  cmd.add_flag("!--no-test-request", a->test_request,
                "Skip the single request sent before the run to check the server answers");
  return [a] { return run_serve(*a); };
}

}  // namespace braid::bench
