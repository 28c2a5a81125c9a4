// What Tokenizer::from_file reads out of tokenizer.json (private to src/tokenizer/).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/regex.h"

namespace braid::tokenizer {

// One pre-tokenizer step applied to every piece in turn: a regex split that keeps matches and
// the text between them as separate pieces (Split "Isolated"), or, with no regex, ByteLevel's
// add_prefix_space (a space put before a piece that does not start with one).
struct PreTokenizerStep {
  std::unique_ptr<Regex> regex;
};

// TemplateProcessing's "single" template: special tokens around the sequence ("$A").
struct TemplatePiece {
  bool is_sequence = false;
  std::vector<int32_t> ids;  // a special token's ids
};

struct TokenizerData {
  std::string path;  // for error messages
  BpeModel bpe;
  bool nfc = false;  // normalizer NFC, else none

  std::vector<AddedToken> added_tokens;
  AddedTokenMatcher raw_matcher;         // added tokens with normalized = false
  AddedTokenMatcher normalized_matcher;  // added tokens with normalized = true

  std::vector<PreTokenizerStep> pre_tokenizer;
  std::vector<TemplatePiece> single_template;  // empty: nothing is added

  // Indexed by id, vocab_size long; holes are "" and not special.
  std::vector<std::string> id_to_token;
  std::vector<std::string> id_to_bytes;
  std::vector<char> special;
  std::unordered_map<std::string, int32_t> added_by_content;
};

// Parses tokenizer.json; throws braid::Error naming the file and the problem.
std::shared_ptr<const TokenizerData> load_tokenizer_json(const std::string& path);

}  // namespace braid::tokenizer
