// Reading tokenizer.json: which shapes are supported, and a clear error for everything else.
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "braid/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer_data.h"
#include "tokenizer/nfc.h"
#include "tokenizer/utf8.h"

namespace braid::tokenizer {
namespace {

using nlohmann::json;

// GPT-2's pre-tokenizer regex, used by ByteLevel with use_regex = true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

[[noreturn]] void fail(ErrorKind kind, const std::string& path, const std::string& problem) {
  throw Error(kind, "tokenizer: '" + path + "': " + problem);
}

std::string type_of(const json& j) {
  if (!j.is_object()) return "";
  const auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

// A token id: an integer in [0, 2^31). Read through get<int32_t> unchecked, a float or a larger
// integer is undefined behaviour (found by fuzz_tokenizer_load) or a silently wrapped id.
int32_t token_id(const json& v, const std::string& path, const std::string& what) {
  if (!v.is_number_integer() || (v.is_number_unsigned() ? v.get<uint64_t>() > INT32_MAX
                                                        : v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX))
    fail(ErrorKind::io, path, what + " has id " + v.dump() + ", not an integer in [0, 2^31)");
  return static_cast<int32_t>(v.get<int64_t>());
}

// A flag that may be absent or null (then `fallback`).
bool flag(const json& j, const char* key, bool fallback) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? fallback : it->get<bool>();
}

// An optional string that may be absent, null or "" (all meaning "none").
std::string optional_string(const json& j, const char* key) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? std::string() : it->get<std::string>();
}

void load_model(const json& model, TokenizerData& d) {
  const std::string& path = d.path;
  if (!model.is_object()) fail(ErrorKind::io, path, "no \"model\" object");
  const std::string type = type_of(model);
  // Old files omit the type; a model with merges is BPE.
  if (type != "BPE" && !(type.empty() && model.contains("merges")))
    fail(ErrorKind::unsupported, path,
         "model type '" + (type.empty() ? std::string("(none)") : type) +
             "' is not supported (only byte-level BPE is)");
  if (flag(model, "byte_fallback", false))
    fail(ErrorKind::unsupported, path, "BPE byte_fallback is not supported (only byte-level BPE)");
  if (!optional_string(model, "continuing_subword_prefix").empty() ||
      !optional_string(model, "end_of_word_suffix").empty())
    fail(ErrorKind::unsupported, path,
         "BPE continuing_subword_prefix / end_of_word_suffix are not supported");
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"].get<double>() > 0)
    fail(ErrorKind::unsupported, path, "BPE dropout is not supported");

  const auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_object() || vocab->empty())
    fail(ErrorKind::io, path, "the BPE model has no \"vocab\" object");
  d.bpe.vocab.reserve(vocab->size());
  for (const auto& [token, id] : vocab->items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
      fail(ErrorKind::io, path, "vocab entry '" + token + "' has id " + id.dump() +
                                    ", expected a non-negative integer");
    d.bpe.vocab.emplace(token, id.get<int32_t>());
  }

  const auto merges = model.find("merges");
  if (merges == model.end() || !merges->is_array() || merges->empty())
    fail(ErrorKind::io, path, "the BPE model has no merges");
  d.bpe.merges.reserve(merges->size());
  int32_t rank = 0;
  for (const json& m : *merges) {
    // Two spellings: "left right" (older files) and ["left", "right"] (tokenizers >= 0.20).
    std::string left, right;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        fail(ErrorKind::io, path, "merge " + std::to_string(rank) + " (" + m.dump() +
                                      ") is not two tokens separated by one space");
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      fail(ErrorKind::io, path, "merge " + std::to_string(rank) + " (" + m.dump() +
                                    ") is neither \"a b\" nor [\"a\", \"b\"]");
    }
    if (!d.bpe.add_merge(left, right, rank))
      fail(ErrorKind::io, path, "merge " + std::to_string(rank) + " (" + m.dump() +
                                    ") uses a token missing from the vocab");
    ++rank;
  }

  d.bpe.ignore_merges = flag(model, "ignore_merges", false);
  const std::string unk = optional_string(model, "unk_token");
  if (!unk.empty()) {
    const auto it = d.bpe.vocab.find(unk);
    if (it == d.bpe.vocab.end()) fail(ErrorKind::io, path, "unk_token '" + unk + "' is not in the vocab");
    d.bpe.unk_id = it->second;
  }
  d.bpe.fuse_unk = flag(model, "fuse_unk", false);
  d.bpe.finish_loading();
}

void load_normalizer(const json& n, TokenizerData& d) {
  if (n.is_null()) return;
  const std::string type = type_of(n);
  if (type == "NFC") {
    d.nfc = true;
  } else if (type == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array()) {
    for (const json& inner : n["normalizers"]) load_normalizer(inner, d);
  } else {
    fail(ErrorKind::unsupported, d.path,
         "normalizer type '" + type + "' is not supported (supported: none, NFC)");
  }
}

// Appends the steps of one pre-tokenizer; `byte_level_seen` tracks that ByteLevel comes last.
void load_pre_tokenizer(const json& p, TokenizerData& d, bool& byte_level_seen) {
  const std::string& path = d.path;
  const std::string type = type_of(p);
  if (byte_level_seen && type != "Sequence")
    fail(ErrorKind::unsupported, path,
         "pre-tokenizer '" + type + "' after ByteLevel is not supported (ByteLevel must be last)");

  if (type == "Sequence") {
    const auto list = p.find("pretokenizers");
    if (list == p.end() || !list->is_array())
      fail(ErrorKind::io, path, "Sequence pre-tokenizer without a \"pretokenizers\" list");
    for (const json& inner : *list) load_pre_tokenizer(inner, d, byte_level_seen);
  } else if (type == "Split") {
    const std::string behavior = p.value("behavior", "");
    if (behavior != "Isolated")
      fail(ErrorKind::unsupported, path,
           "Split pre-tokenizer behavior '" + behavior + "' is not supported (only Isolated)");
    if (flag(p, "invert", false))
      fail(ErrorKind::unsupported, path, "Split pre-tokenizer with invert = true is not supported");
    const json& pattern = p.at("pattern");
    if (pattern.contains("Regex"))
      d.pre_tokenizer.push_back({std::make_unique<Regex>(pattern["Regex"].get<std::string>(), false)});
    else if (pattern.contains("String"))
      d.pre_tokenizer.push_back({std::make_unique<Regex>(pattern["String"].get<std::string>(), true)});
    else
      fail(ErrorKind::io, path, "Split pre-tokenizer pattern is neither Regex nor String");
  } else if (type == "ByteLevel") {
    if (flag(p, "add_prefix_space", false)) d.pre_tokenizer.push_back({nullptr});
    if (flag(p, "use_regex", true)) d.pre_tokenizer.push_back({std::make_unique<Regex>(kGpt2Pattern, false)});
    byte_level_seen = true;
  } else {
    fail(ErrorKind::unsupported, path,
         "pre-tokenizer type '" + (type.empty() ? std::string("(none)") : type) +
             "' is not supported (supported: ByteLevel, Split with a regex, Sequence of them)");
  }
}

void load_post_processor(const json& p, TokenizerData& d) {
  if (p.is_null()) return;
  const std::string type = type_of(p);
  if (type == "ByteLevel") return;  // adjusts offsets only; ids are unchanged
  if (type == "Sequence" && p.contains("processors") && p["processors"].is_array()) {
    for (const json& inner : p["processors"]) load_post_processor(inner, d);
    return;
  }
  if (type != "TemplateProcessing")
    fail(ErrorKind::unsupported, d.path,
         "post-processor type '" + type +
             "' is not supported (supported: ByteLevel, TemplateProcessing, Sequence of them)");

  const json& specials = p.at("special_tokens");
  d.single_template.clear();
  for (const json& item : p.at("single")) {
    TemplatePiece piece;
    if (item.contains("Sequence")) {
      if (item["Sequence"].value("id", "A") != "A")
        fail(ErrorKind::unsupported, d.path, "TemplateProcessing 'single' refers to sequence B");
      piece.is_sequence = true;
    } else if (item.contains("SpecialToken")) {
      const std::string name = item["SpecialToken"].at("id").get<std::string>();
      if (!specials.contains(name))
        fail(ErrorKind::io, d.path, "TemplateProcessing uses '" + name + "', missing from special_tokens");
      const json& ids = specials[name].at("ids");
      if (!ids.is_array()) fail(ErrorKind::io, d.path, "special token '" + name + "': ids is not a list");
      for (const json& id : ids)
        piece.ids.push_back(token_id(id, d.path, "TemplateProcessing's special token '" + name + "'"));
    } else {
      fail(ErrorKind::io, d.path, "TemplateProcessing item " + item.dump() + " is not understood");
    }
    d.single_template.push_back(std::move(piece));
  }
}

void load_added_tokens(const json& list, TokenizerData& d) {
  if (list.is_null()) return;
  for (const json& t : list) {
    AddedToken a;
    a.content = t.at("content").get<std::string>();
    a.id = token_id(t.at("id"), d.path, "added token '" + a.content + "'");
    a.special = flag(t, "special", false);
    a.lstrip = flag(t, "lstrip", false);
    a.rstrip = flag(t, "rstrip", false);
    a.single_word = flag(t, "single_word", false);
    a.normalized = flag(t, "normalized", !a.special);
    if (utf8_first_invalid(a.content) != std::string::npos)
      fail(ErrorKind::io, d.path, "added token " + std::to_string(a.id) + " is not valid UTF-8");
    d.added_tokens.push_back(std::move(a));
  }

  std::vector<const AddedToken*> raw, normalized;
  std::vector<std::string> raw_patterns, normalized_patterns;
  for (const AddedToken& a : d.added_tokens) {
    d.added_by_content[a.content] = a.id;
    if (a.normalized) {
      normalized.push_back(&a);
      normalized_patterns.push_back(d.nfc ? nfc(a.content) : a.content);
    } else {
      raw.push_back(&a);
      raw_patterns.push_back(a.content);
    }
  }
  d.raw_matcher = AddedTokenMatcher(raw, raw_patterns);
  d.normalized_matcher = AddedTokenMatcher(normalized, normalized_patterns);
}

// The id tables are indexed by id, so the ids must number the tokens about densely (real
// vocabularies do: 0 .. V - 1, added tokens after): an id far past the count of tokens would
// allocate tables of that size (a fuzzed file asked for 41 GB). Refused, naming it.
void build_id_tables(TokenizerData& d, const std::string& path) {
  int32_t max_id = -1;
  for (const auto& [token, id] : d.bpe.vocab) max_id = std::max(max_id, id);
  for (const AddedToken& a : d.added_tokens) max_id = std::max(max_id, a.id);
  const size_t tokens = d.bpe.vocab.size() + d.added_tokens.size();
  if (static_cast<size_t>(max_id) + 1 > 2 * tokens + 1024)
    fail(ErrorKind::io, path,
         "token id " + std::to_string(max_id) + " is far beyond the " + std::to_string(tokens) +
             " tokens the file defines (ids must number the vocabulary densely)");
  const auto n = static_cast<size_t>(max_id) + 1;
  d.id_to_token.assign(n, std::string());
  d.special.assign(n, 0);
  for (const auto& [token, id] : d.bpe.vocab) d.id_to_token[id] = token;
  for (const AddedToken& a : d.added_tokens) {
    d.id_to_token[a.id] = a.content;
    d.special[a.id] = a.special;
  }
  // The ByteLevel decoder: a token whose characters are all in the byte alphabet stands for
  // those bytes; any other token (an added token with, say, a plain space) for its own UTF-8.
  d.id_to_bytes.resize(n);
  for (size_t id = 0; id < n; ++id) {
    auto bytes = symbols_to_bytes(d.id_to_token[id]);
    d.id_to_bytes[id] = bytes ? std::move(*bytes) : d.id_to_token[id];
  }
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::io, path, std::string("cannot open: ") + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail(ErrorKind::io, path, "read failed");
  return std::move(ss).str();
}

}  // namespace

std::shared_ptr<const TokenizerData> load_tokenizer_json(const std::string& path) {
  const std::string text = read_file(path);
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    fail(ErrorKind::io, path, std::string("not valid JSON: ") + e.what());
  }
  if (!root.is_object()) fail(ErrorKind::io, path, "not a tokenizer.json (the top level is not an object)");

  auto d = std::make_shared<TokenizerData>();
  d->path = path;
  try {
    static const json null_json;
    load_model(root.contains("model") ? root["model"] : null_json, *d);  // by reference: no copy
    load_normalizer(root.value("normalizer", json()), *d);

    bool byte_level_seen = false;
    const json pre = root.value("pre_tokenizer", json());
    if (pre.is_null())
      fail(ErrorKind::unsupported, path, "no pre-tokenizer (only byte-level BPE is supported)");
    load_pre_tokenizer(pre, *d, byte_level_seen);
    if (!byte_level_seen)
      fail(ErrorKind::unsupported, path,
           "the pre-tokenizer has no ByteLevel step (only byte-level BPE is supported)");

    const json decoder = root.value("decoder", json());
    if (type_of(decoder) != "ByteLevel")
      fail(ErrorKind::unsupported, path,
           "decoder '" + (decoder.is_null() ? std::string("null") : type_of(decoder)) +
               "' is not supported (only ByteLevel)");

    load_post_processor(root.value("post_processor", json()), *d);
    load_added_tokens(root.value("added_tokens", json()), *d);
  } catch (const json::exception& e) {
    // A field of the wrong type or a missing required field.
    fail(ErrorKind::io, path, std::string("malformed tokenizer.json: ") + e.what());
  }
  build_id_tables(*d, path);
  return d;
}

}  // namespace braid::tokenizer
