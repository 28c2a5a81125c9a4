#include "chat/chat_template.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "braid/error.h"
#include "chat/jinja_json.h"
#include "chat/jinja_parser.h"
#include "chat/jinja_render.h"
#include "chat/py_text.h"

namespace braid::chat {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

struct ChatTemplate::Impl {
  std::map<std::string, jinja::Program> templates;  // by name; "default" unless only named ones
  ordered_json special_tokens = ordered_json::object();
};

namespace {

const char* const kSpecialTokenNames[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                          "pad_token", "cls_token", "mask_token"};

jinja::Program compile(const std::string& source, const std::string& origin) {
  if (!py::valid_utf8(source))
    throw Error(ErrorKind::invalid_argument, "chat template (" + origin + "): not valid UTF-8");
  jinja::Program p;
  p.source = jinja::normalize_source(source);
  try {
    p.body = jinja::parse(p.source);
  } catch (const jinja::SyntaxError& e) {
    const jinja::LineCol lc = jinja::line_col(p.source, e.pos);
    throw Error(e.kind, "chat template (" + origin + ") line " + std::to_string(lc.line) +
                            ", column " + std::to_string(lc.column) + ": " + e.message);
  }
  return p;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::io, "chat template: cannot read " + path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error(ErrorKind::io, "chat template: error reading " + path.string());
  return ss.str();
}

ordered_json read_json(const fs::path& path) {
  const std::string text = read_file(path);
  try {
    return ordered_json::parse(text);
  } catch (const std::exception& e) {
    throw Error(ErrorKind::io,
                "chat template: " + path.string() + " is not valid JSON: " + e.what());
  }
}

// A special token as tokenizer_config.json writes it: a string, or an AddedToken object.
std::optional<std::string> token_text(const ordered_json& v, const std::string& where) {
  if (v.is_null()) return std::nullopt;
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  throw Error(ErrorKind::io,
              "chat template: " + where + " is neither a string nor an object with \"content\"");
}

// Copies the special tokens of `config` (a tokenizer_config.json or special_tokens_map.json, or
// the caller's object) into `out`, later sources overriding earlier ones.
void merge_special_tokens(const ordered_json& config, ordered_json& out, const std::string& where) {
  if (!config.is_object())
    throw Error(ErrorKind::invalid_argument, "chat template: " + where + " is not a JSON object");
  for (const char* name : kSpecialTokenNames) {
    if (!config.contains(name)) continue;
    if (auto t = token_text(config[name], where + " " + name))
      out[name] = *t;
    else
      out.erase(name);
  }
  if (config.contains("additional_special_tokens") &&
      config["additional_special_tokens"].is_array()) {
    ordered_json list = ordered_json::array();
    for (const auto& t : config["additional_special_tokens"])
      if (auto s = token_text(t, where + " additional_special_tokens")) list.push_back(*s);
    if (list.empty())
      out.erase("additional_special_tokens");
    else
      out["additional_special_tokens"] = std::move(list);
  }
}

// tokenizer_config.json's chat_template: a string, or [{name, template}, ...].
std::map<std::string, std::string> config_templates(const ordered_json& config,
                                                    const std::string& where) {
  std::map<std::string, std::string> out;
  if (!config.contains("chat_template") || config["chat_template"].is_null()) return out;
  const ordered_json& t = config["chat_template"];
  if (t.is_string()) {
    out["default"] = t.get<std::string>();
  } else if (t.is_array()) {
    for (const auto& item : t) {
      if (!item.is_object() || !item.contains("name") || !item.contains("template") ||
          !item["name"].is_string() || !item["template"].is_string())
        throw Error(ErrorKind::io,
                    "chat template: " + where +
                        " chat_template list items must be {\"name\": ..., \"template\": ...}");
      out[item["name"].get<std::string>()] = item["template"].get<std::string>();
    }
  } else {
    throw Error(ErrorKind::io,
                "chat template: " + where + " chat_template must be a string or a list");
  }
  return out;
}

std::vector<fs::path> additional_templates(const fs::path& dir) {
  std::vector<fs::path> files;
  const fs::path extra = dir / "additional_chat_templates";
  std::error_code ec;
  if (!fs::is_directory(extra, ec)) return files;
  for (const auto& entry : fs::directory_iterator(extra, ec))
    if (entry.is_regular_file() && entry.path().extension() == ".jinja")
      files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

ChatTemplate ChatTemplate::from_string(const std::string& source,
                                       const ordered_json& special_tokens) {
  auto impl = std::make_shared<Impl>();
  impl->templates.emplace("default", compile(source, "string"));
  merge_special_tokens(special_tokens, impl->special_tokens, "special tokens");
  return ChatTemplate(std::move(impl));
}

bool ChatTemplate::dir_has_template(const std::string& model_dir) {
  const fs::path dir(model_dir);
  std::error_code ec;
  if (fs::is_regular_file(dir / "chat_template.jinja", ec) || !additional_templates(dir).empty())
    return true;
  const fs::path config = dir / "tokenizer_config.json";
  if (!fs::is_regular_file(config, ec)) return false;
  try {
    const ordered_json j = read_json(config);
    return j.is_object() && j.contains("chat_template") && !j["chat_template"].is_null();
  } catch (const Error&) {
    return false;
  }
}

ChatTemplate ChatTemplate::from_dir(const std::string& model_dir) {
  const fs::path dir(model_dir);
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error(ErrorKind::io, "chat template: '" + model_dir + "' is not a folder");
  auto impl = std::make_shared<Impl>();
  std::map<std::string, std::pair<std::string, std::string>> sources;  // name -> (text, origin)

  const fs::path config_path = dir / "tokenizer_config.json";
  if (fs::exists(config_path, ec)) {
    const ordered_json config = read_json(config_path);
    if (!config.is_object())
      throw Error(ErrorKind::io,
                  "chat template: " + config_path.string() + " is not a JSON object");
    merge_special_tokens(config, impl->special_tokens, "tokenizer_config.json");
    for (auto& [name, text] : config_templates(config, "tokenizer_config.json"))
      sources[name] = {text, "tokenizer_config.json"};
  }
  const fs::path map_path = dir / "special_tokens_map.json";
  if (fs::exists(map_path, ec)) {
    const ordered_json map = read_json(map_path);
    if (!map.is_object())
      throw Error(ErrorKind::io, "chat template: " + map_path.string() + " is not a JSON object");
    merge_special_tokens(map, impl->special_tokens, "special_tokens_map.json");
  }
  // transformers: chat_template.jinja replaces the config's template as the default.
  const fs::path jinja_path = dir / "chat_template.jinja";
  if (fs::exists(jinja_path, ec))
    sources["default"] = {read_file(jinja_path), "chat_template.jinja"};
  for (const fs::path& p : additional_templates(dir))
    sources[p.stem().string()] = {read_file(p),
                                  "additional_chat_templates/" + p.filename().string()};

  if (sources.empty())
    throw Error(ErrorKind::unsupported, "model folder '" + model_dir +
                                            "' has no chat template (no chat_template in "
                                            "tokenizer_config.json, no chat_template.jinja)");
  for (auto& [name, src] : sources) impl->templates.emplace(name, compile(src.first, src.second));
  return ChatTemplate(std::move(impl));
}

const std::string& ChatTemplate::source() const {
  const auto it = impl_->templates.find("default");
  return (it != impl_->templates.end() ? it : impl_->templates.begin())->second.source;
}

const ordered_json& ChatTemplate::special_tokens() const { return impl_->special_tokens; }

std::string ChatTemplate::render(const ordered_json& messages, const RenderOptions& options) const {
  if (!messages.is_array())
    throw Error(ErrorKind::invalid_argument, "chat template: messages must be a JSON array");
  const bool has_tools = !options.tools.is_null();
  if (has_tools) {
    if (!options.tools.is_array())
      throw Error(ErrorKind::invalid_argument,
                  "chat template: tools must be a JSON array of objects");
    for (const auto& t : options.tools)
      if (!t.is_object())
        throw Error(
            ErrorKind::invalid_argument,
            "chat template: each tool must be a JSON schema object (transformers: \"Tools should "
            "either be a JSON schema, or a callable function\")");
  }
  if (!options.extra.is_null() && !options.extra.is_object())
    throw Error(ErrorKind::invalid_argument,
                "chat template: extra variables must be a JSON object");

  // transformers picks "tool_use" when tools are passed and the model names one, else "default".
  const jinja::Program* program = nullptr;
  if (has_tools) {
    const auto it = impl_->templates.find("tool_use");
    if (it != impl_->templates.end()) program = &it->second;
  }
  if (!program) {
    const auto it = impl_->templates.find("default");
    if (it == impl_->templates.end())
      throw Error(
          ErrorKind::unsupported,
          "chat template: the model has several chat templates and none is named 'default'");
    program = &it->second;
  }

  // The variables, as render(messages=..., tools=..., documents=None, add_generation_prompt=...,
  // **{**special_tokens_map, **kwargs}) passes them.
  jinja::RenderInput input;
  auto set = [&](const std::string& name, jinja::Value v) {
    for (auto& [k, old] : input.variables)
      if (k == name) {
        old = std::move(v);
        return;
      }
    input.variables.emplace_back(name, std::move(v));
  };
  try {
    for (auto it = impl_->special_tokens.begin(); it != impl_->special_tokens.end(); ++it)
      set(it.key(), jinja::from_json(it.value()));
    if (options.extra.is_object()) {
      for (auto it = options.extra.begin(); it != options.extra.end(); ++it) {
        const std::string& k = it.key();
        if (k == "messages" || k == "tools" || k == "documents" || k == "add_generation_prompt")
          throw Error(ErrorKind::invalid_argument,
                      "chat template: extra variable '" + k +
                          "' collides with an argument of apply_chat_template");
        set(k, jinja::from_json(it.value()));
      }
    }
    set("messages", jinja::from_json(messages));
    set("tools", has_tools ? jinja::from_json(options.tools) : jinja::Value::none());
    set("documents", jinja::Value::none());
    set("add_generation_prompt", jinja::Value::boolean(options.add_generation_prompt));
  } catch (const jinja::TemplateError& e) {
    throw Error(e.kind, "chat template: " + e.message);
  }
  input.now = options.now ? *options.now : std::chrono::system_clock::now();
  return jinja::render(*program, input);
}

}  // namespace braid::chat
