// safetensors: 8-byte little-endian header length, JSON header, then raw tensor bytes.
// Every dtype of the format is accepted; sizes and offsets are validated against the blob.
#pragma once
#include <string>

#include "core/blob.h"
#include "io/tensor_store.h"

namespace basalt::io {

// Parses one safetensors blob (mmap'd file or embedded bytes). Views point into the blob,
// which the returned store keeps alive. Throws basalt::Error("[safetensors] NAME: ...").
TensorStore safetensors_parse(const Blob& blob);
TensorStore safetensors_load_file(const std::string& path);
// A model directory: model.safetensors, or model.safetensors.index.json and its shards.
TensorStore safetensors_load_dir(const std::string& dir);

}  // namespace basalt::io
