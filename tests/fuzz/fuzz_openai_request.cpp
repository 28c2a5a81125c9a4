// Fuzz target: an HTTP request body for /v1/completions and /v1/chat/completions, parsed into
// engine requests as the server parses it (tiny-fortunes' tokenizer, the Qwen3 chat template from
// tests/data, a 512-token context). A body that is not JSON is answered 400 before the parser;
// for the rest, the parser may refuse only with ApiError or braid::Error (both become error
// responses). Accepted requests must fit the context and the vocabulary.
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "braid/error.h"
#include "chat/chat_template.h"
#include "fuzz/fuzz_util.h"
#include "server/api_error.h"
#include "server/openai_request.h"

using nlohmann::ordered_json;

namespace {

const braid::server::ApiContext& context() {
  static const auto tok = braid::tokenizer::Tokenizer::from_dir(
      std::string(BRAID_SOURCE_DIR) + "/models/tiny-fortunes");
  static const braid::server::ApiContext ctx = [] {
    std::ifstream in(std::string(BRAID_SOURCE_DIR) + "/tests/data/chat/templates/qwen3.jinja");
    std::stringstream source;
    source << in.rdbuf();
    const auto tmpl = braid::chat::ChatTemplate::from_string(source.str());
    braid::server::ApiContext c;
    c.tokenizer = &tok;
    c.render_chat = [tmpl](const ordered_json& messages, const ordered_json& tools,
                           const ordered_json& kwargs, bool add_generation_prompt) {
      braid::chat::RenderOptions o;
      o.add_generation_prompt = add_generation_prompt;
      o.tools = tools;
      o.extra = kwargs.is_object() ? kwargs : ordered_json::object();
      return tmpl.render(messages, o);
    };
    c.max_model_len = 512;
    c.vocab_size = tok.vocab_size();
    c.model_names = {"tiny-fortunes"};
    return c;
  }();
  return ctx;
}

void check(const braid::server::ApiJob& job, const braid::server::ApiContext& c) {
  for (const auto& r : job.requests)
    for (int32_t id : r.prompt)
      if (id < 0 || id >= c.vocab_size)
        braid::fuzz::property_failed("an accepted prompt holds an id outside the vocabulary");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& c = context();
  const ordered_json body = ordered_json::parse(data, data + size, nullptr, /*exceptions=*/false);
  if (body.is_discarded()) return 0;
  for (auto parse : {&braid::server::parse_completion_request,
                     &braid::server::parse_chat_request}) {
    try {
      braid::server::check_model(body, c);
      check(parse(body, c), c);
    } catch (const braid::server::ApiError&) {
    } catch (const braid::Error&) {
    }
  }
  return 0;
}
