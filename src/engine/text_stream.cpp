#include "engine/text_stream.h"

#include <algorithm>

namespace braid::engine {

namespace {

// The largest n <= limit that does not cut a UTF-8 character of s in two.
size_t char_boundary(const std::string& s, size_t limit) {
  size_t n = std::min(limit, s.size());
  while (n > 0 && n < s.size() && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return n;
}

}  // namespace

TextStream::TextStream(const tokenizer::Tokenizer& tokenizer, bool skip_special_tokens,
                       std::vector<std::string> stop, bool include_stop_str)
    : decoder_(tokenizer, skip_special_tokens), include_stop_(include_stop_str) {
  for (std::string& s : stop)
    if (!s.empty()) stop_.push_back(std::move(s));
  for (const std::string& s : stop_) max_stop_ = std::max(max_stop_, s.size());
}

std::optional<std::string> TextStream::push(int32_t token) {
  if (stopped_) return std::nullopt;
  const size_t before = text_.size();
  text_ += decoder_.push(token);
  if (stop_.empty() || text_.size() == before) return std::nullopt;
  // Only a stop string that ends in the new text can be new: search from where it could start.
  const size_t from = before >= max_stop_ ? before - max_stop_ + 1 : 0;
  size_t best = std::string::npos;
  const std::string* found = nullptr;
  for (const std::string& s : stop_) {
    const size_t at = text_.find(s, from);
    if (at != std::string::npos && at < best) best = at, found = &s;
  }
  if (!found) return std::nullopt;
  text_.resize(include_stop_ ? best + found->size() : best);
  emitted_ = std::min(emitted_, text_.size());
  stopped_ = true;
  return *found;
}

std::string TextStream::take(bool final) {
  if (final && !stopped_) {
    text_ += decoder_.finish();
    stopped_ = true;
  }
  size_t end = text_.size();
  if (!final && !stopped_ && max_stop_ > 0)
    end = char_boundary(text_, text_.size() >= max_stop_ - 1 ? text_.size() - (max_stop_ - 1) : 0);
  if (end <= emitted_) return {};
  std::string out = text_.substr(emitted_, end - emitted_);
  emitted_ = end;
  return out;
}

}  // namespace braid::engine
