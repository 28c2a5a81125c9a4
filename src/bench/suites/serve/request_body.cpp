#include "bench/suites/serve/request_body.h"

#include "braid/error.h"

namespace braid::bench::serve {

nlohmann::json request_body(Api api, const std::string& model, const Prompt& prompt,
                            const SamplingOptions& sampling) {
  nlohmann::json body = {{"model", model}};
  if (api == Api::chat) {
    if (!prompt.ids.empty())
      throw Error(ErrorKind::invalid_argument,
                  "serve request: chat messages are text, got a prompt of token ids (give a "
                  "tokenizer, or use random words)");
    body["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", prompt.text}}});
  } else if (!prompt.ids.empty()) {
    body["prompt"] = prompt.ids;
  } else {
    body["prompt"] = prompt.text;
  }
  body["max_tokens"] = prompt.output_len;
  body["temperature"] = sampling.temperature;
  if (sampling.ignore_eos) body["ignore_eos"] = true;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  return body;
}

}  // namespace braid::bench::serve
