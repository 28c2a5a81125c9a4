#include "tokenizer/tokenizer.h"

#include "braid/error.h"
#include "tokenizer/tokenizer_data.h"
#include "tokenizer/nfc.h"
#include "tokenizer/utf8.h"

namespace braid::tokenizer {
namespace {

// Runs the pre-tokenizer steps over one piece of normalized text, then BPE over each word.
void encode_plain(const TokenizerData& d, std::string_view text, std::vector<int32_t>& ids) {
  std::vector<std::string> pieces{std::string(text)};
  std::vector<std::string> next;
  for (const PreTokenizerStep& step : d.pre_tokenizer) {
    next.clear();
    for (std::string& piece : pieces) {
      if (!step.regex) {  // ByteLevel add_prefix_space
        if (piece.front() != ' ') piece.insert(piece.begin(), ' ');
        next.push_back(std::move(piece));
        continue;
      }
      // Split "Isolated": every match is a piece, and so is the text between matches.
      size_t done = 0;
      for (const auto& [begin, end] : step.regex->find_all(piece)) {
        if (begin > done) next.push_back(piece.substr(done, begin - done));
        next.push_back(piece.substr(begin, end - begin));
        done = end;
      }
      if (done < piece.size()) next.push_back(piece.substr(done));
    }
    pieces.swap(next);
  }
  for (const std::string& word : pieces) d.bpe.encode_word(word, ids);
}

}  // namespace

Tokenizer Tokenizer::from_file(const std::string& tokenizer_json) {
  return Tokenizer(load_tokenizer_json(tokenizer_json));
}

Tokenizer Tokenizer::from_dir(const std::string& dir) {
  return from_file(dir.empty() || dir.back() == '/' ? dir + "tokenizer.json" : dir + "/tokenizer.json");
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const TokenizerData& d = *data_;
  const size_t bad = utf8_first_invalid(text);
  if (bad != std::string_view::npos)
    throw Error(ErrorKind::invalid_argument,
                "tokenizer: encode: argument 'text': expected valid UTF-8, got an invalid byte at "
                "offset " + std::to_string(bad));

  // Added tokens first: those matched in the raw text, then, after normalizing what is left,
  // those matched in normalized text. Only the plain text between them is pre-tokenized.
  std::vector<int32_t> ids;
  for (const Segment& raw : d.raw_matcher.split(text)) {
    if (raw.token_id >= 0) {
      ids.push_back(raw.token_id);
      continue;
    }
    const std::string_view piece = text.substr(raw.begin, raw.end - raw.begin);
    const std::string normalized = d.nfc ? nfc(piece) : std::string(piece);
    for (const Segment& seg : d.normalized_matcher.split(normalized)) {
      if (seg.token_id >= 0)
        ids.push_back(seg.token_id);
      else
        encode_plain(d, std::string_view(normalized).substr(seg.begin, seg.end - seg.begin), ids);
    }
  }

  if (!add_special_tokens || d.single_template.empty()) return ids;
  std::vector<int32_t> out;
  out.reserve(ids.size() + 4);
  for (const TemplatePiece& p : d.single_template) {
    if (p.is_sequence)
      out.insert(out.end(), ids.begin(), ids.end());
    else
      out.insert(out.end(), p.ids.begin(), p.ids.end());
  }
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  // The byte-level decoder joins the bytes of all tokens first and converts once, so a character
  // split across tokens comes out whole.
  std::string bytes;
  for (int32_t id : ids) {
    if (skip_special_tokens && is_special(id)) continue;
    bytes += token_bytes(id);
  }
  std::string text;
  text.reserve(bytes.size());
  utf8_append_lossy(bytes, text, /*hold_incomplete=*/false);
  return text;
}

int Tokenizer::vocab_size() const { return static_cast<int>(data_->id_to_token.size()); }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  const std::string key(token);
  if (const auto it = data_->added_by_content.find(key); it != data_->added_by_content.end())
    return it->second;
  if (const auto it = data_->bpe.vocab.find(key); it != data_->bpe.vocab.end()) return it->second;
  return std::nullopt;
}

std::string Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return data_->id_to_token[id];
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && data_->special[id];
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  static const std::string none;
  if (id < 0 || id >= vocab_size()) return none;
  return data_->id_to_bytes[id];
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string StreamDecoder::push(int32_t id) {
  if (skip_special_tokens_ && tokenizer_.is_special(id)) return {};
  pending_ += tokenizer_.token_bytes(id);
  // Everything but a cut-off character at the end is final: ill-formed bytes become U+FFFD now,
  // exactly as decode() would convert them, since no later byte can change that.
  std::string out;
  const size_t held = utf8_append_lossy(pending_, out, /*hold_incomplete=*/true);
  pending_.erase(0, pending_.size() - held);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out;
  utf8_append_lossy(pending_, out, /*hold_incomplete=*/false);
  pending_.clear();
  return out;
}

}  // namespace braid::tokenizer
