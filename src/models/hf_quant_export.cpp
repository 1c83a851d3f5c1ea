#include "models/hf_quant_export.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>

#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "io/safetensors_write.h"
#include "models/quant_config.h"
#include "ops/ref/scaled.h"

namespace basalt {

namespace fs = std::filesystem;
using nlohmann::json;

bool hf_quant_target_parse(const std::string& s, HfQuantTarget* out) {
  if (s == "nvfp4")
    *out = HfQuantTarget::Nvfp4;
  else if (s == "fp8")
    *out = HfQuantTarget::Fp8;
  else if (s == "fp8-block")
    *out = HfQuantTarget::Fp8Block;
  else
    return false;
  return true;
}

namespace {

constexpr int64_t kBlock = 128;  // fp8-block edge

// Whether `name` is a linear weight this tool quantises (before the K % 16 check).
bool is_linear_weight(const std::string& name, const TensorView& t) {
  if (t.shape.size() != 2 || !name.ends_with("_proj.weight")) return false;
  if (name.find(".layers.") == std::string::npos) return false;
  if (name.rfind("mtp.", 0) == 0 || name.find("visual") != std::string::npos) return false;
  return dtype_is_float(t.dtype) && dtype_block_elems(t.dtype) == 1;
}

// Rows [r0, r1) of a plain float tensor [N, K] as f32.
void rows_f32(const TensorView& t, int64_t K, int64_t r0, int64_t r1, float* out) {
  const int64_t n = (r1 - r0) * K, first = r0 * K;
  if (t.dtype == DType::F32) {
    std::memcpy(out, t.data + first * 4, size_t(n) * 4);
    return;
  }
  if (t.dtype == DType::BF16) {
    const auto* p = reinterpret_cast<const uint16_t*>(t.data) + first;
    for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(p[i]);
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = float(dtype_read_f64(t.dtype, t.data, first + i));
}

// One quantised matrix: every output tensor of the module is a slice of this.
struct Quantised {
  std::vector<uint8_t> q, S;  // codes; NVFP4 E4M3 scales
  std::vector<float> s;       // f32 scale(s)
};

Quantised quantise(const TensorView& t, HfQuantTarget target, ThreadPool& pool) {
  const int64_t N = t.shape[0], K = t.shape[1];
  std::vector<float> x(size_t(N * K));
  pool.parallel_ranges(N, 1,
                       [&](int64_t r0, int64_t r1) { rows_f32(t, K, r0, r1, x.data() + r0 * K); });
  Quantised out;
  if (target == HfQuantTarget::Fp8Block) {
    out.q.resize(size_t(N * K));
    out.s.resize(size_t(((N + kBlock - 1) / kBlock) * ((K + kBlock - 1) / kBlock)));
    ref::quantize_fp8_block(x.data(), N, K, kBlock, out.q.data(), out.s.data());
    return out;
  }
  // amax over the tensor: per-range maxima combined (max is exact in any order).
  std::mutex mu;
  float amax = 0.0f;
  pool.parallel_ranges(N, 1, [&](int64_t r0, int64_t r1) {
    float m = 0.0f;
    for (int64_t i = r0 * K; i < r1 * K; ++i) m = std::max(m, std::fabs(x[size_t(i)]));
    std::lock_guard<std::mutex> lock(mu);
    amax = std::max(amax, m);
  });
  if (target == HfQuantTarget::Nvfp4) {
    const float g = ref::nvfp4_global_scale(amax);
    out.q.resize(size_t(N * K / 2));
    out.S.resize(size_t(N * K / 16));
    out.s = {g};
    pool.parallel_ranges(N, 1, [&](int64_t r0, int64_t r1) {
      ref::quantize_nvfp4_rows(x.data() + r0 * K, r1 - r0, K, g, out.q.data() + r0 * K / 2,
                               out.S.data() + r0 * K / 16);
    });
  } else {
    const float s = ref::fp8_tensor_scale(amax);
    out.q.resize(size_t(N * K));
    out.s = {s};
    pool.parallel_ranges(N, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t i = r0 * K; i < r1 * K; ++i)
        out.q[size_t(i)] = f32_to_fp8_e4m3(x[size_t(i)] / s);
    });
  }
  return out;
}

void write_json(const fs::path& p, const json& j) {
  std::ofstream f(p, std::ios::binary);
  f << j.dump(2) << "\n";
  if (!f) fail("[quantize] {}: cannot write", p.string());
}

}  // namespace

HfQuantStats hf_quant_write(
    const io::Checkpoint& ck, HfQuantTarget target, const std::string& out_dir, int threads,
    const std::function<void(size_t, size_t, const std::string&)>& progress) {
  if (ck.format != io::CheckpointFormat::HfDir)
    fail(
        "[quantize] {}: --to nvfp4/fp8 rewrites HF checkpoint directories (safetensors); this "
        "is a GGUF file",
        ck.path);
  if (models::quant_config_parse(ck.config, ck.hf_quant_config, ck.path).method !=
      models::QuantMethod::None)
    fail("[quantize] {}: the checkpoint is already quantised", ck.path);
  if (ck.tensors.size() == 0) fail("[quantize] {}: no tensors", ck.path);

  ThreadPool pool(threads);
  HfQuantStats st;
  std::vector<std::string> names;
  for (const auto& [name, t] : ck.tensors.all()) names.push_back(name);
  std::sort(names.begin(), names.end());

  // Decide per tensor; the excluded linear modules are reported in exclude_modules.
  std::vector<std::string> quantise_names, excluded = {"lm_head"};
  for (const std::string& name : names) {
    const TensorView& t = *ck.tensors.find(name);
    st.bytes_in += int64_t(t.nbytes);
    if (!is_linear_weight(name, t)) continue;
    if (target == HfQuantTarget::Nvfp4 && t.shape[1] % 16) {
      spdlog::warn("[quantize] {}: {} inputs are not whole NVFP4 groups of 16; kept as {}", name,
                   t.shape[1], dtype_name(t.dtype));
      excluded.push_back(name.substr(0, name.size() - 7));
      continue;
    }
    quantise_names.push_back(name);
  }

  // The output tensors. Quantised modules produce 2-4 tensors each from one quantisation, done
  // when the first of them is written (names sort them next to each other) and dropped after
  // the last, so one matrix at a time is in memory.
  struct Pending {
    std::shared_ptr<Quantised> q;
    int left = 0;
  };
  auto cache = std::make_shared<std::map<std::string, Pending>>();
  std::vector<io::TensorToWrite> out;
  size_t done = 0;
  const size_t total = quantise_names.size();
  auto get = [&, cache](const std::string& wname, const TensorView* t, int parts) {
    auto it = cache->find(wname);
    if (it == cache->end()) {
      if (progress) progress(done, total, wname);
      ++done;
      it = cache
               ->emplace(wname,
                         Pending{std::make_shared<Quantised>(quantise(*t, target, pool)), parts})
               .first;
    }
    std::shared_ptr<Quantised> q = it->second.q;
    return std::pair<std::shared_ptr<Quantised>, Pending*>(q, &it->second);
  };
  // fill() is called in consecutive pieces; the piece that reaches the end releases its part.
  auto part = [&, cache, get](std::string wname, const TensorView* t, int parts, DType dt,
                              std::vector<int64_t> shape,
                              std::function<const uint8_t*(const Quantised&)> bytes) {
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    const size_t elem = size_t(dtype_block_bytes(dt));
    io::TensorToWrite w;
    w.dtype = dt;
    w.shape = shape;
    w.fill = [=](int64_t first, int64_t count, uint8_t* dst) mutable {
      auto [q, pend] = get(wname, t, parts);
      std::memcpy(dst, bytes(*q) + size_t(first) * elem, size_t(count) * elem);
      if (first + count == numel && --pend->left == 0) cache->erase(wname);
    };
    return w;
  };
  const float one = 1.0f;
  for (const std::string& name : names) {
    const TensorView& t = *ck.tensors.find(name);
    const bool quant = std::binary_search(quantise_names.begin(), quantise_names.end(), name);
    if (!quant) {
      io::TensorToWrite w;
      w.name = name;
      w.dtype = t.dtype;
      w.shape = t.shape;
      const TensorView* tp = &t;
      const size_t elem = size_t(dtype_block_bytes(t.dtype));
      w.fill = [tp, elem](int64_t first, int64_t count, uint8_t* dst) {
        std::memcpy(dst, tp->data + size_t(first) * elem, size_t(count) * elem);
      };
      out.push_back(std::move(w));
      ++st.kept;
      continue;
    }
    ++st.quantised;
    const std::string base = name.substr(0, name.size() - 7);
    const int64_t N = t.shape[0], K = t.shape[1];
    auto add = [&](std::string n, io::TensorToWrite w) {
      w.name = std::move(n);
      out.push_back(std::move(w));
    };
    auto scalar_one = [&](const std::string& n) {
      io::TensorToWrite w;
      w.name = n;
      w.dtype = DType::F32;
      w.shape = {};
      w.fill = [one](int64_t, int64_t, uint8_t* dst) { std::memcpy(dst, &one, 4); };
      out.push_back(std::move(w));
    };
    auto codes = [](const Quantised& q) { return q.q.data(); };
    auto f32s = [](const Quantised& q) { return reinterpret_cast<const uint8_t*>(q.s.data()); };
    switch (target) {
      case HfQuantTarget::Nvfp4:
        scalar_one(base + ".input_scale");
        add(name, part(name, &t, 3, DType::U8, {N, K / 2}, codes));
        add(base + ".weight_scale", part(name, &t, 3, DType::F8_E4M3, {N, K / 16},
                                         [](const Quantised& q) { return q.S.data(); }));
        add(base + ".weight_scale_2", part(name, &t, 3, DType::F32, {}, f32s));
        break;
      case HfQuantTarget::Fp8:
        scalar_one(base + ".input_scale");
        add(name, part(name, &t, 2, DType::F8_E4M3, {N, K}, codes));
        add(base + ".weight_scale", part(name, &t, 2, DType::F32, {}, f32s));
        break;
      case HfQuantTarget::Fp8Block:
        add(name, part(name, &t, 2, DType::F8_E4M3, {N, K}, codes));
        add(base + ".weight_scale_inv",
            part(name, &t, 2, DType::F32, {(N + kBlock - 1) / kBlock, (K + kBlock - 1) / kBlock},
                 f32s));
        break;
    }
  }
  // Written in name order, so a module's tensors follow each other: sort as the writer does.
  std::sort(out.begin(), out.end(),
            [](const io::TensorToWrite& a, const io::TensorToWrite& b) { return a.name < b.name; });

  fs::create_directories(out_dir);
  io::safetensors_write((fs::path(out_dir) / "model.safetensors").string(), std::move(out));
  st.bytes_out = int64_t(fs::file_size(fs::path(out_dir) / "model.safetensors"));

  // Configs: ModelOpt's own file and config.json's quantization_config (what vLLM reads).
  json config = ck.config;
  if (target == HfQuantTarget::Fp8Block) {
    config["quantization_config"] = {{"quant_method", "fp8"},
                                     {"fmt", "e4m3"},
                                     {"activation_scheme", "dynamic"},
                                     {"weight_block_size", {kBlock, kBlock}}};
  } else {
    const char* algo = target == HfQuantTarget::Nvfp4 ? "NVFP4" : "FP8";
    json q = {
        {"quant_algo", algo}, {"kv_cache_quant_algo", nullptr}, {"exclude_modules", excluded}};
    if (target == HfQuantTarget::Nvfp4) q["group_size"] = 16;
    write_json(fs::path(out_dir) / "hf_quant_config.json",
               {{"producer", {{"name", "modelopt"}, {"version", "basalt"}}}, {"quantization", q}});
    json qc = q;
    qc["quant_method"] = "modelopt";
    config["quantization_config"] = qc;
  }
  write_json(fs::path(out_dir) / "config.json", config);
  if (!ck.generation_config.empty())
    write_json(fs::path(out_dir) / "generation_config.json", ck.generation_config);
  if (!ck.tokenizer_config.empty())
    write_json(fs::path(out_dir) / "tokenizer_config.json", ck.tokenizer_config);
  if (ck.tokenizer_json) write_json(fs::path(out_dir) / "tokenizer.json", *ck.tokenizer_json);
  // Other files of a directory (chat_template.jinja, special_tokens_map.json, ...) as they are.
  static const char* kWritten[] = {"config.json",           "generation_config.json",
                                   "tokenizer_config.json", "tokenizer.json",
                                   "hf_quant_config.json",  "model.safetensors.index.json"};
  if (fs::is_directory(ck.path) && !fs::equivalent(ck.path, out_dir))
    for (const auto& e : fs::directory_iterator(ck.path)) {
      const std::string f = e.path().filename().string();
      if (!e.is_regular_file() || f.ends_with(".safetensors") ||
          std::find(std::begin(kWritten), std::end(kWritten), f) != std::end(kWritten))
        continue;
      fs::copy_file(e.path(), fs::path(out_dir) / f, fs::copy_options::overwrite_existing);
    }
  return st;
}

}  // namespace basalt
