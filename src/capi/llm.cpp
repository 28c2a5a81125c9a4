// C API: offline inference with the serving engine (braid_llm_*), vLLM's LLM class behind JSON.
// Parsing is in llm_options.cpp and llm_requests.cpp, the results in llm_results.cpp; this file
// owns the handle and runs the engine.
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>

#include "braid/error.h"
#include "capi/capi.h"
#include "capi/llm_json.h"
#include "capi/llm_options.h"
#include "capi/llm_requests.h"
#include "capi/llm_results.h"
#include "engine/engine.h"
#include "engine/llm_engine.h"
#include "model/config.h"

using namespace braid;
using namespace braid::capi;
using namespace braid::capi::llm;

struct braid_llm {
  std::mutex mutex;  // the engine is driven by one thread at a time
  std::unique_ptr<engine::LLMEngine> engine;
  std::optional<std::mt19937_64> seeds;  // options.seed: seeds for requests that bring none
  uint64_t next_request = 0;
  // Set when a failed run could not be cleaned up: the engine's state is unknown from then on.
  std::string broken;
};

namespace {

[[noreturn]] void fail(ErrorKind kind, const char* call, const std::string& message) {
  throw Error(kind, std::string(call) + ": " + message);
}

// Runs `body`, putting `prefix` before the message of a braid::Error it throws (same kind).
template <typename F>
auto with_prefix(const std::string& prefix, F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const Error& e) {
    throw Error(e.kind(), prefix + e.what());
  }
}

// After a failure mid-run: aborts this call's requests and steps until the engine is idle, so
// the next call starts clean. If even that fails, the handle is marked broken.
void abandon(braid_llm& llm, const std::vector<std::string>& ids) noexcept {
  try {
    for (const std::string& id : ids) llm.engine->abort_request(id);
    for (int i = 0; i < 1000 && llm.engine->has_unfinished(); ++i) llm.engine->step();
    if (llm.engine->has_unfinished()) llm.broken = "aborted requests did not drain";
  } catch (const std::exception& e) {
    llm.broken = std::string("cleaning up after a failed run failed: ") + e.what();
  } catch (...) {
    llm.broken = "cleaning up after a failed run failed";
  }
}

// Adds every request, steps the engine until all have finished and returns the results JSON.
std::string run(braid_llm& llm, std::vector<ParsedRequest>& requests) {
  constexpr const char* call = "braid_llm_generate";
  engine::LLMEngine& eng = *llm.engine;
  Results results(requests);
  std::unordered_map<std::string, size_t> index;
  std::vector<std::string> ids;
  try {
    for (size_t i = 0; i < requests.size(); ++i) {
      engine::Request& r = requests[i].request;
      r.id = "braid_llm-" + std::to_string(llm.next_request++);
      with_prefix(std::string(call) + ": requests[" + std::to_string(i) + "]: ",
                  [&] { eng.add_request(r); });
      index.emplace(r.id, i);
      ids.push_back(r.id);
    }
    // A step that runs nothing and reports nothing while requests wait means no sequence fits
    // the KV pool; create() rules that out, this keeps a surprise from hanging the caller.
    int idle_steps = 0;
    while (eng.has_unfinished()) {
      const std::vector<engine::SequenceOutput> outputs = eng.step();
      for (const engine::SequenceOutput& o : outputs)
        if (const auto it = index.find(o.request_id); it != index.end()) results.add(it->second, o);
      idle_steps = eng.last_step().ran || !outputs.empty() ? 0 : idle_steps + 1;
      if (idle_steps >= 3)
        fail(ErrorKind::internal, call,
             "the engine cannot make progress: the waiting sequences do not fit the KV pool (" +
                 std::to_string(eng.num_kv_pages()) + " pages of " +
                 std::to_string(eng.blocks().page_size()) + " tokens)");
    }
  } catch (...) {
    abandon(llm, ids);
    throw;
  }
  if (!results.complete())
    fail(ErrorKind::internal, call, "the engine went idle before every request had finished");
  return results.to_json(eng.tokenizer());
}

braid_llm& handle(const char* call, braid_llm* llm) {
  if (llm == nullptr) fail(ErrorKind::invalid_argument, call, "llm is NULL");
  return *llm;
}

template <typename T>
void require_out(const char* call, const char* name, T** out) {
  if (out == nullptr) fail(ErrorKind::invalid_argument, call, std::string(name) + " is NULL");
}

const tokenizer::Tokenizer& tokenizer_of(const char* call, const braid_llm& llm) {
  const tokenizer::Tokenizer* tok = llm.engine->tokenizer();
  if (!tok) fail(ErrorKind::unsupported, call, "the model folder has no tokenizer.json");
  return *tok;
}

}  // namespace

extern "C" {

braid_status braid_llm_create(const char* model_dir, const char* options_json, braid_llm** out) {
  const char* call = "braid_llm_create";
  if (out) *out = nullptr;
  return guarded(call, [&] {
    require_out(call, "out", out);
    if (model_dir == nullptr || *model_dir == '\0')
      fail(ErrorKind::invalid_argument, call, "model_dir is NULL or empty");
    LlmOptions options = parse_options(options_json);
    // Loading errors name the folder or file themselves.
    const std::string where = std::string(call) + ": ";
    // The config first: max_model_len is checked before any memory is taken.
    const model::ModelConfig config = with_prefix(where, [&] { return model::load_config(model_dir); });
    if (config.max_position_embeddings > 0 &&
        options.engine.max_model_len > config.max_position_embeddings)
      fail(ErrorKind::invalid_argument, call,
           "options.max_model_len is " + std::to_string(options.engine.max_model_len) +
               ", but the model's max_position_embeddings is " +
               std::to_string(config.max_position_embeddings));
    // An explicit pool must hold one full context (the runner checks it too, in its own words).
    const int context = engine::default_context(config, options.engine.max_model_len);
    const int page = options.engine.page_size;
    if (options.engine.num_kv_pages > 0 && int64_t{options.engine.num_kv_pages} * page < context)
      fail(ErrorKind::invalid_argument, call,
           "options.num_kv_pages is " + std::to_string(options.engine.num_kv_pages) + " (" +
               std::to_string(int64_t{options.engine.num_kv_pages} * page) + " tokens in pages of " +
               std::to_string(page) + "), less than one full context of max_model_len " +
               std::to_string(context) + " tokens: raise num_kv_pages to at least " +
               std::to_string((context + page - 1) / page) + " or lower max_model_len");
    auto llm = std::make_unique<braid_llm>();
    llm->engine = with_prefix(where, [&] {
      return std::make_unique<engine::LLMEngine>(model_dir, options.engine);
    });
    if (options.seed) llm->seeds.emplace(*options.seed);
    *out = llm.release();
  });
}

void braid_llm_destroy(braid_llm* llm) {
  // Freeing the engine does not throw; the guard keeps a surprise from crossing into C anyway.
  try {
    delete llm;
  } catch (...) {
  }
}

braid_status braid_llm_generate(braid_llm* llm, const char* requests_json, char** results_json) {
  const char* call = "braid_llm_generate";
  if (results_json) *results_json = nullptr;
  return guarded(call, [&] {
    require_out(call, "results_json", results_json);
    braid_llm& h = handle(call, llm);
    std::lock_guard<std::mutex> lock(h.mutex);
    if (!h.broken.empty())
      fail(ErrorKind::internal, call,
           "this engine failed earlier (" + h.broken + "); destroy it and create another");
    engine::LLMEngine& eng = *h.engine;
    std::vector<ParsedRequest> requests = parse_requests(requests_json, eng.tokenizer(), eng.max_model_len());
    // The engine's own checks (vocabulary, sampling ranges, lengths) on all, before any runs.
    for (size_t i = 0; i < requests.size(); ++i) {
      engine::Request probe = requests[i].request;
      probe.id = "check";
      with_prefix(std::string(call) + ": requests[" + std::to_string(i) + "]: ",
                  [&] { eng.check(probe); });
    }
    if (h.seeds)
      for (ParsedRequest& r : requests)
        if (!r.request.seeded) {
          r.request.sampling.seed = (*h.seeds)();
          r.request.seeded = true;
        }
    const std::string json = run(h, requests);
    *results_json = to_c_string(json);
  });
}

braid_status braid_llm_tokenize(braid_llm* llm, const char* text, int add_special_tokens,
                                char** ids_json) {
  const char* call = "braid_llm_tokenize";
  if (ids_json) *ids_json = nullptr;
  return guarded(call, [&] {
    require_out(call, "ids_json", ids_json);
    const tokenizer::Tokenizer& tok = tokenizer_of(call, handle(call, llm));
    if (text == nullptr) fail(ErrorKind::invalid_argument, call, "text is NULL");
    const std::vector<int32_t> ids =
        with_prefix(std::string(call) + ": ", [&] { return tok.encode(text, add_special_tokens != 0); });
    *ids_json = to_c_string(dump(json(ids)));
  });
}

braid_status braid_llm_detokenize(braid_llm* llm, const int32_t* ids, int64_t count,
                                  int skip_special_tokens, char** text) {
  const char* call = "braid_llm_detokenize";
  if (text) *text = nullptr;
  return guarded(call, [&] {
    require_out(call, "text", text);
    const tokenizer::Tokenizer& tok = tokenizer_of(call, handle(call, llm));
    if (count < 0) fail(ErrorKind::invalid_argument, call, "count is negative: " + std::to_string(count));
    if (count > 0 && ids == nullptr)
      fail(ErrorKind::invalid_argument, call, "ids is NULL but count is " + std::to_string(count));
    std::vector<int32_t> v(ids, ids + count);
    for (int64_t i = 0; i < count; ++i)
      if (v[static_cast<size_t>(i)] < 0)
        fail(ErrorKind::invalid_argument, call,
             "ids[" + std::to_string(i) + "] is " + std::to_string(v[static_cast<size_t>(i)]) +
                 ", not a token id");
    *text = to_c_string(tok.decode(v, skip_special_tokens != 0));
  });
}

braid_status braid_llm_info(braid_llm* llm, char** info_json) {
  const char* call = "braid_llm_info";
  if (info_json) *info_json = nullptr;
  return guarded(call, [&] {
    require_out(call, "info_json", info_json);
    const engine::LLMEngine& eng = *handle(call, llm).engine;
    const model::ModelConfig& c = eng.model_config();
    const json info = {{"device", device_name(eng.device())},
                       {"dtype", std::string(dtype_name(eng.dtype()))},
                       {"weights", c.weights == model::WeightFormat::fp8_blocks ? "fp8_blocks"
                                   : c.weights == model::WeightFormat::fp8_per_channel
                                       ? "fp8_per_channel"
                                       : "dense"},
                       {"architecture", std::string(model::arch_name(c.arch))},
                       {"tensor_parallel_size", eng.tensor_parallel()},
                       {"expert_parallel", eng.expert_parallel()},
                       {"max_model_len", eng.max_model_len()},
                       {"vocab_size", c.vocab_size},
                       {"num_kv_pages", eng.num_kv_pages()},
                       {"page_size", eng.blocks().page_size()},
                       {"eos_token_ids", c.eos_token_ids},
                       {"has_tokenizer", eng.tokenizer() != nullptr}};
    *info_json = to_c_string(dump(info));
  });
}

void braid_free_string(char* s) { std::free(s); }

}  // extern "C"
