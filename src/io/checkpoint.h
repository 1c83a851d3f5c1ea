// Checkpoint: whatever a model path points at, opened: an HF directory (config.json +
// safetensors + tokenizer files), a single .gguf file, or the embedded default model.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "io/gguf.h"
#include "io/tensor_store.h"

namespace basalt::io {

enum class CheckpointFormat { HfDir, Gguf };

struct Checkpoint {
  CheckpointFormat format = CheckpointFormat::HfDir;
  std::string path;                  // directory or file ("<embedded>" for the default model)
  nlohmann::json config;             // HF config.json (empty object for GGUF)
  nlohmann::json generation_config;  // generation_config.json, or empty object
  nlohmann::json tokenizer_config;   // tokenizer_config.json, or empty object
  nlohmann::json hf_quant_config;    // hf_quant_config.json (ModelOpt), or empty object
  std::optional<nlohmann::json> tokenizer_json;  // tokenizer.json, if present
  std::shared_ptr<GgufFile> gguf;                // set for GGUF checkpoints (metadata + tensors)
  TensorStore tensors;                           // HF names for HfDir; GGUF names for Gguf
};

// path: a directory with config.json, a .gguf file, or "" for the embedded default model.
// Tensors are optional (a tokenizer-only directory or vocab-only GGUF opens fine).
Checkpoint checkpoint_open(const std::string& path);
// A JSON file; throws "[json] PATH: parse error at byte N: ..." on malformed input.
nlohmann::json json_load_file(const std::string& path);
// The same for JSON text held in memory; name stands for the file in messages.
nlohmann::json json_parse(std::string_view text, const std::string& name);
// The part of a parse error after nlohmann's "[json.exception...] parse error at ...: " prefix
// (of any other json exception, e.g. out_of_range 406 for 1e999: after "[json.exception...] ").
std::string json_error_detail(const nlohmann::json::exception& e);
// 0-based offset of the byte where parsing failed (nlohmann's e.byte counts from 1).
size_t json_error_offset(const nlohmann::json::parse_error& e);

}  // namespace basalt::io
