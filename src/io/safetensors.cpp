#include "io/safetensors.h"

#include <bit>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "io/checkpoint.h"

namespace basalt::io {

namespace {

static_assert(std::endian::native == std::endian::little, "safetensors is little-endian");

// Larger headers are not metadata but a corrupt length; the reference reader caps at 100 MB.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

using nlohmann::json;

std::vector<int64_t> parse_shape(const json& j, const std::string& file, const std::string& name) {
  if (!j.is_array())
    fail("[safetensors] {}: tensor '{}' has a shape that is not an array", file, name);
  std::vector<int64_t> shape;
  for (const auto& d : j) {
    if (!d.is_number_integer())
      fail("[safetensors] {}: tensor '{}' has a non-integer dimension {} in its shape", file, name,
           d.dump());
    if (d.is_number_unsigned() && d.get<uint64_t>() > uint64_t(INT64_MAX))
      fail("[safetensors] {}: tensor '{}' has a dimension {} too large in shape {}", file, name,
           d.dump(), j.dump());
    int64_t v = d.get<int64_t>();
    if (v < 0)
      fail("[safetensors] {}: tensor '{}' has a negative dimension {} in shape {}", file, name,
           d.dump(), j.dump());
    shape.push_back(v);
  }
  return shape;
}

// Returns numel, or fails when the product overflows int64 (no real tensor is that big). The
// product of the non-zero dims must fit too, so no order of multiplying the shape overflows:
// [0, 2^40, 2^40] has no elements but its last two dims multiply past int64.
int64_t checked_numel(const std::vector<int64_t>& shape, const std::string& file,
                      const std::string& name) {
  int64_t n = 1, nonzero = 1;
  for (int64_t d : shape) {
    if (d != 0 && __builtin_mul_overflow(nonzero, d, &nonzero))
      fail("[safetensors] {}: tensor '{}' has shape {} whose element count overflows", file, name,
           shape_str(shape));
    n *= d;  // 0 or equal to nonzero: cannot overflow
  }
  return n;
}

TensorView parse_entry(const std::string& name, const json& e, const Blob& blob, size_t base) {
  const std::string& file = blob.name;
  if (!e.is_object()) fail("[safetensors] {}: tensor '{}' entry is not an object", file, name);
  auto dt = e.find("dtype");
  if (dt == e.end() || !dt->is_string())
    fail("[safetensors] {}: tensor '{}' has no \"dtype\" string", file, name);
  TensorView t;
  t.name = name;
  if (!dtype_from_safetensors(dt->get<std::string>(), &t.dtype))
    fail("[safetensors] {}: tensor '{}' has unknown dtype '{}'", file, name,
         dt->get<std::string>());
  auto sh = e.find("shape");
  if (sh == e.end()) fail("[safetensors] {}: tensor '{}' has no \"shape\"", file, name);
  t.shape = parse_shape(*sh, file, name);
  auto off = e.find("data_offsets");
  if (off == e.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned())
    fail(
        "[safetensors] {}: tensor '{}' data_offsets must be an array of 2 non-negative integers, "
        "got {}",
        file, name, off == e.end() ? std::string("nothing") : off->dump());
  uint64_t begin = (*off)[0].get<uint64_t>(), end = (*off)[1].get<uint64_t>();
  uint64_t data_size = blob.size - base;
  if (end < begin)
    fail("[safetensors] {}: tensor '{}' data_offsets [{}, {}] end before begin", file, name, begin,
         end);
  if (end > data_size)
    fail("[safetensors] {}: tensor '{}' data_offsets [{}, {}] run past the data section ({} bytes)",
         file, name, begin, end, data_size);
  int64_t numel = checked_numel(t.shape, file, name);
  uint64_t need = uint64_t(numel) * uint64_t(dtype_block_bytes(t.dtype));  // safetensors: 1/block
  if (numel != 0 && need / uint64_t(numel) != uint64_t(dtype_block_bytes(t.dtype)))
    need = std::numeric_limits<uint64_t>::max();
  if (end - begin != need)
    fail("[safetensors] {}: tensor '{}' has {} bytes, shape {} of {} needs {}", file, name,
         end - begin, shape_str(t.shape), dtype_name(t.dtype), need);
  t.data = blob.data + base + begin;
  t.nbytes = size_t(end - begin);
  return t;
}

}  // namespace

TensorStore safetensors_parse(const Blob& blob) {
  const std::string& file = blob.name;
  if (blob.size < 8)
    fail("[safetensors] {}: file is {} bytes, too short for the 8-byte header length", file,
         blob.size);
  uint64_t n;
  std::memcpy(&n, blob.data, 8);
  if (n > kMaxHeaderBytes)
    fail("[safetensors] {}: header length {} is absurd (limit {} bytes); not a safetensors file?",
         file, n, kMaxHeaderBytes);
  if (n > blob.size - 8)
    fail("[safetensors] {}: header length {} is larger than the file ({} bytes)", file, n,
         blob.size);
  std::string_view text(reinterpret_cast<const char*>(blob.data) + 8, size_t(n));
  json h;
  try {
    h = json::parse(text);
  } catch (const json::parse_error& e) {
    fail("[safetensors] {}: header is not valid JSON: parse error at byte {}: {}", file,
         json_error_offset(e), json_error_detail(e));
  } catch (const json::exception& e) {  // out_of_range 406: a number beyond double, 1e999
    fail("[safetensors] {}: header is not valid JSON: {}", file, json_error_detail(e));
  }
  if (!h.is_object()) fail("[safetensors] {}: header is not a JSON object", file);
  size_t base = 8 + size_t(n);
  TensorStore store;
  for (const auto& [name, e] : h.items()) {
    if (name == "__metadata__") {
      if (!e.is_object()) fail("[safetensors] {}: __metadata__ is not an object", file);
      continue;
    }
    store.add(parse_entry(name, e, blob, base));
  }
  store.keep(blob);
  return store;
}

TensorStore safetensors_load_file(const std::string& path) {
  return safetensors_parse(blob_map_file(path));
}

TensorStore safetensors_load_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  fs::path single = fs::path(dir) / "model.safetensors";
  fs::path index = fs::path(dir) / "model.safetensors.index.json";
  if (fs::is_regular_file(single)) return safetensors_load_file(single.string());
  if (!fs::is_regular_file(index))
    fail("[safetensors] {}: neither model.safetensors nor model.safetensors.index.json exists",
         dir);
  const std::string ifile = index.string();
  json j = json_load_file(ifile);
  auto wm = j.is_object() ? j.find("weight_map") : j.end();
  if (wm == j.end() || !wm->is_object() || wm->empty())
    fail("[safetensors] {}: no \"weight_map\" object (tensor name -> shard file)", ifile);
  std::map<std::string, std::vector<std::string>> by_shard;  // shard -> tensor names
  for (const auto& [name, shard] : wm->items()) {
    if (!shard.is_string())
      fail("[safetensors] {}: weight_map entry '{}' is not a file name", ifile, name);
    std::string s = shard.get<std::string>();
    // Shards live beside the index; a path would let an index read arbitrary files.
    if (s.empty() || s.find('/') != std::string::npos || s == "." || s == "..")
      fail("[safetensors] {}: weight_map entry '{}' names shard '{}', not a plain file name", ifile,
           name, s);
    by_shard[s].push_back(name);
  }
  TensorStore store;
  for (const auto& [shard, names] : by_shard) {
    fs::path p = fs::path(dir) / shard;
    if (!fs::is_regular_file(p))
      fail("[safetensors] {}: shard '{}' (holding '{}') does not exist", ifile, shard,
           names.front());
    TensorStore part = safetensors_load_file(p.string());
    for (const auto& name : names)
      if (!part.contains(name))
        fail("[safetensors] {}: tensor '{}' is mapped to shard '{}' but is not in it", ifile, name,
             shard);
    store.merge(std::move(part));
  }
  return store;
}

}  // namespace basalt::io
