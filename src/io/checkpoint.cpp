#include "io/checkpoint.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/embedded.h"
#include "io/safetensors.h"

namespace basalt::io {

namespace fs = std::filesystem;
using nlohmann::json;

std::string json_error_detail(const json::exception& e) {
  // what() reads "[json.exception.parse_error.101] parse error at line 1, column 2: DETAIL",
  // or "[json.exception.out_of_range.406] number overflow parsing '1e999'".
  std::string_view w = e.what();
  size_t at = w.find("parse error");
  size_t colon = at == std::string_view::npos ? at : w.find(": ", at);
  if (colon != std::string_view::npos) return std::string(w.substr(colon + 2));
  size_t tag = w.starts_with("[json.exception.") ? w.find("] ") : std::string_view::npos;
  return std::string(tag == std::string_view::npos ? w : w.substr(tag + 2));
}

size_t json_error_offset(const json::parse_error& e) {
  return e.byte > 0 ? e.byte - 1 : 0;
}

json json_parse(std::string_view text, const std::string& name) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    fail("[json] {}: parse error at byte {}: {}", name, json_error_offset(e), json_error_detail(e));
  } catch (const json::exception& e) {  // out_of_range 406: a number beyond double, 1e999
    fail("[json] {}: parse error: {}", name, json_error_detail(e));
  }
}

json json_load_file(const std::string& path) {
  return json_parse(read_text_file(path), path);
}

namespace {

constexpr const char* kJsonFiles[] = {"config.json", "generation_config.json", "tokenizer.json",
                                      "tokenizer_config.json", "hf_quant_config.json"};

// Fills the JSON members from name -> text; absent files leave their defaults.
template <typename Lookup>
void set_json_files(Checkpoint& ck, const std::string& prefix, Lookup text_of) {
  for (const char* f : kJsonFiles) {
    std::optional<std::string> text = text_of(f);
    if (!text) continue;
    json j = json_parse(*text, prefix + "/" + f);
    if (std::strcmp(f, "tokenizer.json") == 0) {
      ck.tokenizer_json = std::move(j);
      continue;
    }
    if (!j.is_object()) fail("[checkpoint] {}/{}: not a JSON object", prefix, f);
    if (std::strcmp(f, "config.json") == 0) ck.config = std::move(j);
    if (std::strcmp(f, "generation_config.json") == 0) ck.generation_config = std::move(j);
    if (std::strcmp(f, "tokenizer_config.json") == 0) ck.tokenizer_config = std::move(j);
    if (std::strcmp(f, "hf_quant_config.json") == 0) ck.hf_quant_config = std::move(j);
  }
}

Checkpoint empty_checkpoint(CheckpointFormat f, const std::string& path) {
  Checkpoint ck;
  ck.format = f;
  ck.path = path;
  ck.config = json::object();
  ck.generation_config = json::object();
  ck.tokenizer_config = json::object();
  ck.hf_quant_config = json::object();
  return ck;
}

// The GGUF's tensors are copied into ck.tensors: views are small and both copies share the
// mmap, so ck.gguf->tensors and ck.tensors stay valid and equal.
Checkpoint open_gguf(const Blob& blob, const std::string& path) {
  Checkpoint ck = empty_checkpoint(CheckpointFormat::Gguf, path);
  ck.gguf = std::make_shared<GgufFile>(gguf_parse(blob));
  ck.tensors = ck.gguf->tensors;
  return ck;
}

Checkpoint open_dir(const std::string& dir) {
  Checkpoint ck = empty_checkpoint(CheckpointFormat::HfDir, dir);
  bool any_json = false;
  set_json_files(ck, dir, [&](const char* f) -> std::optional<std::string> {
    fs::path p = fs::path(dir) / f;
    if (!fs::is_regular_file(p)) return std::nullopt;
    any_json = true;
    return read_text_file(p.string());
  });
  bool has_tensors = fs::is_regular_file(fs::path(dir) / "model.safetensors") ||
                     fs::is_regular_file(fs::path(dir) / "model.safetensors.index.json");
  if (has_tensors) {
    if (!fs::is_regular_file(fs::path(dir) / "config.json"))
      fail("[checkpoint] {}: config.json is missing (a directory with model.safetensors needs it)",
           dir);
    ck.tensors = safetensors_load_dir(dir);
  } else if (!any_json) {
    fail(
        "[checkpoint] {}: not a model directory (no config.json, model.safetensors or tokenizer "
        "files)",
        dir);
  }
  return ck;
}

Checkpoint open_embedded() {
  const EmbeddedFile* files = basalt_embedded_files();
  if (!files || !files[0].name)
    fail(
        "[checkpoint] this build has no embedded default model (models/default/ is empty); "
        "pass -m PATH");
  const std::string prefix = "<embedded>";
  auto find = [&](std::string_view name) -> const EmbeddedFile* {
    for (const EmbeddedFile* f = files; f->name; ++f)
      if (name == f->name) return f;
    return nullptr;
  };
  for (const EmbeddedFile* f = files; f->name; ++f) {
    std::string_view n = f->name;
    if (n.size() > 5 && n.substr(n.size() - 5) == ".gguf")
      return open_gguf(blob_static(f->data, f->size, prefix + "/" + f->name), prefix);
  }
  Checkpoint ck = empty_checkpoint(CheckpointFormat::HfDir, prefix);
  set_json_files(ck, prefix, [&](const char* name) -> std::optional<std::string> {
    const EmbeddedFile* f = find(name);
    if (!f) return std::nullopt;
    return std::string(reinterpret_cast<const char*>(f->data), f->size);
  });
  if (const EmbeddedFile* f = find("model.safetensors")) {
    if (!find("config.json"))
      fail("[checkpoint] {}: config.json is missing (the embedded model.safetensors needs it)",
           prefix);
    ck.tensors = safetensors_parse(blob_static(f->data, f->size, prefix + "/model.safetensors"));
  }
  return ck;
}

bool starts_with_gguf_magic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace

Checkpoint checkpoint_open(const std::string& path) {
  if (path.empty()) return open_embedded();
  std::error_code ec;
  fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) fail("[checkpoint] {}: no such file or directory", path);
  if (fs::is_directory(st)) return open_dir(path);
  bool gguf_name = fs::path(path).extension() == ".gguf";
  if (gguf_name || starts_with_gguf_magic(path)) return open_gguf(blob_map_file(path), path);
  if (fs::path(path).extension() == ".safetensors")
    fail(
        "[checkpoint] {}: a bare .safetensors file has no config; pass the directory holding it "
        "and config.json",
        path);
  fail("[checkpoint] {}: neither a model directory nor a GGUF file", path);
}

}  // namespace basalt::io
