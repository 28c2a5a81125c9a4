// Chat templates: the Jinja program a model ships (tokenizer_config.json's "chat_template", or
// chat_template.jinja beside it) that turns a list of messages into the prompt text the model
// was trained on. Rendered byte for byte as Hugging Face transformers' apply_chat_template(
// tokenize=False) renders it: jinja2's ImmutableSandboxedEnvironment with trim_blocks,
// lstrip_blocks and loop controls, transformers' raise_exception, strftime_now and tojson
// (json.dumps, ensure_ascii off), and the special tokens as variables.
//
// The interpreter is our own (src/chat/jinja_*): a template is parsed once and rendered many
// times, from any number of threads at once. Messages are untrusted: every failure, whether the
// template's raise_exception, a message the template cannot handle (missing keys, non-string
// content) or input past the limits (nesting, output size, steps), is braid::Error with the
// template's line and column; nothing a client sends can crash or exhaust the process.
//
// Where it differs from jinja2, in corners chat templates do not reach: integers are 64-bit
// (overflow is ErrorKind::unsupported), filters that give generators in jinja2 (map, select,
// reverse, ...) and dict views give lists, |safe and |escape give plain strings (no Markup
// auto-escaping on concatenation), non-ASCII case mapping is Unicode's simple mapping, and the
// include/extends/import/block tags and recursive loops are ErrorKind::unsupported.
#pragma once

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace braid::chat {

struct RenderOptions {
  bool add_generation_prompt = true;
  // OpenAI-style tool schemas (a list of objects); null: no tools (the template sees none).
  nlohmann::ordered_json tools;
  // More template variables, as transformers' apply_chat_template(**kwargs): enable_thinking
  // (Qwen3), date_string (Llama 3.1), ... They override special tokens of the same name.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  // strftime_now's clock (local time, as Python's datetime.now()); unset: the current time.
  std::optional<std::chrono::system_clock::time_point> now;
};

class ChatTemplate {
 public:
  // The template of a Hugging Face model folder, found as transformers (4.47+, 5.x) finds it:
  // tokenizer_config.json's "chat_template" (a string, or a list of {name, template}), replaced
  // as "default" by chat_template.jinja when that file exists, plus one template per
  // additional_chat_templates/NAME.jinja. Special tokens (bos_token, eos_token, unk_token,
  // sep_token, pad_token, cls_token, mask_token, additional_special_tokens) come from
  // tokenizer_config.json, overridden by special_tokens_map.json. Throws ErrorKind::io for an
  // unreadable or malformed file, ErrorKind::unsupported when the folder has no template, and
  // ErrorKind::invalid_argument / unsupported (with line and column) for a template that does
  // not parse or uses what this interpreter lacks.
  static ChatTemplate from_dir(const std::string& model_dir);
  // One template (as "default"); special_tokens: {"bos_token": "<s>", ...}, each value a string,
  // an AddedToken object {"content": ...} or null (absent).
  static ChatTemplate from_string(
      const std::string& source,
      const nlohmann::ordered_json& special_tokens = nlohmann::ordered_json::object());
  // Whether from_dir would find a template (files present; it does not parse them).
  static bool dir_has_template(const std::string& model_dir);

  // messages: the OpenAI-style list of {"role", "content", ...} objects, passed to the template
  // as they are (content may be a string, a list of parts, or anything JSON). Picks the
  // "tool_use" template when tools are given and the model has one, else "default".
  // Parse requests into ordered_json: a plain nlohmann::json converts, but has already sorted
  // its keys, and `tojson` of a tool or of tool-call arguments would then differ from Python's.
  std::string render(const nlohmann::ordered_json& messages,
                     const RenderOptions& options = {}) const;

  const std::string& source() const;                     // the default template's text
  const nlohmann::ordered_json& special_tokens() const;  // name -> string (or list of strings)

 private:
  struct Impl;
  explicit ChatTemplate(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;  // immutable: copies share it, renders never change it
};

}  // namespace braid::chat
