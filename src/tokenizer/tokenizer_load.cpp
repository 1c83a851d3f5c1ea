// The entry points that find a tokenizer: from a checkpoint, or from a path.
#include <filesystem>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace basalt::tok {

std::unique_ptr<Tokenizer> tokenizer_from_checkpoint(const io::Checkpoint& ckpt) {
  if (ckpt.tokenizer_json) return tokenizer_from_json(*ckpt.tokenizer_json, ckpt.tokenizer_config);
  if (ckpt.gguf && ckpt.gguf->find("tokenizer.ggml.model")) return tokenizer_from_gguf(*ckpt.gguf);
  fail("[tokenizer] {}: no tokenizer.json and no GGUF vocabulary", ckpt.path);
}

std::unique_ptr<Tokenizer> tokenizer_load(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p(path);
  if (!path.empty() && fs::is_regular_file(p) && p.extension() == ".json") {
    nlohmann::json config = nlohmann::json::object();
    fs::path cfg = p.parent_path() / "tokenizer_config.json";
    if (fs::is_regular_file(cfg)) config = io::json_load_file(cfg.string());
    return tokenizer_from_json(io::json_load_file(path), config);
  }
  return tokenizer_from_checkpoint(io::checkpoint_open(path));
}

}  // namespace basalt::tok
