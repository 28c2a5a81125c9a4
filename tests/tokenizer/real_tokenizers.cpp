#include "tokenizer/real_tokenizers.h"

#include <filesystem>
#include <map>
#include <memory>

namespace braid::test {

std::string real_tokenizer_file(const std::string& name) {
  return std::string(BRAID_SOURCE_DIR) + "/.cache/tokenizers/" + name + "/tokenizer.json";
}

const tokenizer::Tokenizer* real_tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<tokenizer::Tokenizer>> loaded;
  auto it = loaded.find(name);
  if (it == loaded.end()) {
    const std::string file = real_tokenizer_file(name);
    std::unique_ptr<tokenizer::Tokenizer> tok;
    if (std::filesystem::exists(file))
      tok = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_file(file));
    it = loaded.emplace(name, std::move(tok)).first;
  }
  return it->second.get();
}

}  // namespace braid::test
