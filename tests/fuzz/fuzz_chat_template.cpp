// Fuzz target: a chat template (Jinja source), then after a NUL byte the conversation as JSON:
// a list of messages, or {"messages": [...], "tools": [...], "kwargs": {...},
// "add_generation_prompt": bool}. Without a usable conversation a fixed one is rendered. The
// template is parsed, then rendered; both may refuse only with braid::Error (the interpreter's
// limits on nesting, steps and output size keep hostile templates from hanging or exhausting
// memory, which libFuzzer's -timeout and -rss_limit_mb would report).
#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "braid/error.h"
#include "chat/chat_template.h"
#include "fuzz/fuzz_util.h"

using nlohmann::ordered_json;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [source, conversation] = braid::fuzz::split_at_nul(data, size);
  ordered_json messages = ordered_json::parse(R"([{"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
      {"role": "user", "content": [{"type": "text", "text": "What is RoPE?"}]}])");
  braid::chat::RenderOptions options;
  options.now = std::chrono::system_clock::time_point(std::chrono::seconds(1700000000));
  const ordered_json given = ordered_json::parse(conversation, nullptr, /*exceptions=*/false);
  if (given.is_array()) {
    messages = given;
  } else if (given.is_object()) {
    if (auto it = given.find("messages"); it != given.end()) messages = *it;
    if (auto it = given.find("tools"); it != given.end()) options.tools = *it;
    if (auto it = given.find("kwargs"); it != given.end() && it->is_object()) options.extra = *it;
    if (auto it = given.find("add_generation_prompt"); it != given.end() && it->is_boolean())
      options.add_generation_prompt = it->get<bool>();
  }
  try {
    const auto tmpl = braid::chat::ChatTemplate::from_string(
        std::string(source), {{"bos_token", "<s>"}, {"eos_token", "</s>"}});
    (void)tmpl.render(messages, options);
  } catch (const braid::Error&) {
  }
  return 0;
}
