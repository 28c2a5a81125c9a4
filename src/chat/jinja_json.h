// JSON in and out of template values: messages and tools arrive as JSON (key order kept, as
// Python's json module keeps it), and `tojson` is Python's json.dumps (transformers replaces
// jinja2's HTML-escaping filter with it).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "chat/jinja_value.h"

namespace braid::chat::jinja {

// Strings must be valid UTF-8 and nesting at most kMaxDataDepth (ErrorKind::invalid_argument).
// Integers past int64 become floats.
Value from_json(const nlohmann::ordered_json& j);

// json.dumps(v, ensure_ascii=..., indent=..., separators=..., sort_keys=...). indent: nullopt
// for one line, otherwise the text put before each item per level (Python's indent=N gives N
// spaces). separators: nullopt for Python's defaults (", " or "," with indent, and ": ").
struct DumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;
  std::optional<std::pair<std::string, std::string>> separators;
  bool sort_keys = false;
};
std::string dumps(const Value& v, const DumpOptions& options);

}  // namespace braid::chat::jinja
