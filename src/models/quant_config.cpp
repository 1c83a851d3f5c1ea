#include "models/quant_config.h"

#include <fmt/format.h>

#include "core/error.h"

namespace basalt::models {

using nlohmann::json;

std::string QuantConfig::describe() const {
  switch (method) {
    case QuantMethod::None:
      return "none";
    case QuantMethod::ModelOptNvfp4:
      return "ModelOpt NVFP4 (E2M1, E4M3 scale per 16, f32 per tensor)";
    case QuantMethod::ModelOptFp8:
      return "ModelOpt FP8 (E4M3, f32 per tensor)";
    case QuantMethod::CompressedFp8:
      return "compressed-tensors FP8 (E4M3, per channel or per tensor)";
    case QuantMethod::Fp8Block:
      return fmt::format("FP8 (E4M3, f32 per {}x{} block)", block, block);
  }
  return "?";
}

namespace {

std::vector<std::string> string_list(const json& j, const char* key, const std::string& file) {
  std::vector<std::string> out;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return out;
  if (!it->is_array()) fail("[quant] {}: '{}' must be a list of module names", file, key);
  for (const auto& v : *it) {
    if (!v.is_string()) fail("[quant] {}: '{}' must be a list of module names", file, key);
    out.push_back(v.get<std::string>());
  }
  return out;
}

void modelopt_algo(QuantConfig& q, const json& j, const std::string& file) {
  auto it = j.find("quant_algo");
  if (it == j.end() || !it->is_string())
    fail("[quant] {}: missing 'quant_algo' (ModelOpt checkpoints say NVFP4 or FP8)", file);
  const std::string algo = it->get<std::string>();
  if (algo == "NVFP4") {
    q.method = QuantMethod::ModelOptNvfp4;
    if (auto g = j.find("group_size");
        g != j.end() && !g->is_null() && (!g->is_number_integer() || g->get<int64_t>() != 16))
      fail("[quant] {}: NVFP4 group_size {} (basalt reads 16, the format's)", file, g->dump());
  } else if (algo == "FP8") {
    q.method = QuantMethod::ModelOptFp8;
  } else {
    fail("[quant] {}: unknown quant_algo '{}' (basalt reads NVFP4 and FP8)", file, algo);
  }
  for (const char* key : {"exclude_modules", "ignore"})
    for (auto& m : string_list(j, key, file)) q.excluded.push_back(std::move(m));
  q.source = file;
}

}  // namespace

QuantConfig quant_config_parse(const json& config, const json& hf_quant, const std::string& dir) {
  QuantConfig q;
  // hf_quant_config.json (ModelOpt's own file) first: older ModelOpt exports have no
  // quantization_config in config.json.
  if (hf_quant.is_object() && !hf_quant.empty()) {
    const std::string file = dir + "/hf_quant_config.json";
    auto it = hf_quant.find("quantization");
    if (it == hf_quant.end() || !it->is_object())
      fail("[quant] {}: missing the 'quantization' object", file);
    modelopt_algo(q, *it, file);
    return q;
  }
  auto it = config.find("quantization_config");
  if (it == config.end() || it->is_null()) return q;
  const std::string file = dir + "/config.json";
  const json& j = *it;
  if (!j.is_object()) fail("[quant] {}: quantization_config must be an object", file);
  auto m = j.find("quant_method");
  if (m == j.end() || !m->is_string())
    fail("[quant] {}: quantization_config has no quant_method", file);
  const std::string method = m->get<std::string>();
  if (method == "modelopt") {
    modelopt_algo(q, j, file);
  } else if (method == "fp8") {
    if (auto fmt_it = j.find("fmt"); fmt_it != j.end() && *fmt_it != "e4m3")
      fail("[quant] {}: fp8 fmt {} (basalt reads e4m3)", file, fmt_it->dump());
    q.method = QuantMethod::Fp8Block;
    auto b = j.find("weight_block_size");
    if (b == j.end() || b->is_null()) {
      q.block = 0;  // per-tensor weight_scale_inv
    } else if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number_integer() ||
               (*b)[0] != (*b)[1] || (*b)[0].get<int64_t>() <= 0) {
      fail("[quant] {}: weight_block_size {} (basalt reads square blocks, e.g. [128, 128])", file,
           b->dump());
    } else {
      q.block = (*b)[0].get<int64_t>();
    }
    for (auto& s : string_list(j, "modules_to_not_convert", file)) q.excluded.push_back(s);
    q.source = file;
  } else if (method == "compressed-tensors") {
    const std::string format = j.value("format", std::string());
    if (format != "float-quantized" && format != "naive-quantized")
      fail("[quant] {}: compressed-tensors format '{}' (basalt reads float-quantized FP8)", file,
           format);
    auto groups = j.find("config_groups");
    if (groups == j.end() || !groups->is_object() || groups->empty())
      fail("[quant] {}: compressed-tensors without config_groups", file);
    for (const auto& [name, g] : groups->items()) {
      const json w = g.value("weights", json::object());
      if (w.value("type", std::string()) != "float" || w.value("num_bits", 0) != 8)
        fail(
            "[quant] {}: config group '{}' quantises weights to {} {}-bit (basalt reads float "
            "8-bit)",
            file, name, w.value("type", std::string("?")), w.value("num_bits", 0));
      const std::string strategy = w.value("strategy", std::string());
      if (strategy != "channel" && strategy != "tensor")
        fail("[quant] {}: config group '{}' strategy '{}' (basalt reads channel and tensor)", file,
             name, strategy);
    }
    q.method = QuantMethod::CompressedFp8;
    q.excluded = string_list(j, "ignore", file);
    q.source = file;
  } else {
    fail("[quant] {}: unknown quant_method '{}' (basalt reads modelopt, fp8, compressed-tensors)",
         file, method);
  }
  return q;
}

}  // namespace basalt::models
