// basalt quantize: rewrite a checkpoint basalt loads (HF directory or GGUF) as a GGUF file with
// its matrices in another type (models/gguf_export.h), e.g. for llama.cpp's llama-bench; or an HF
// directory as an NVFP4 / FP8 checkpoint in ModelOpt's or Qwen3-FP8's layout
// (models/hf_quant_export.h).
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "io/checkpoint.h"
#include "models/arch.h"
#include "models/gguf_export.h"
#include "models/hf_quant_export.h"
#include "models/model.h"
#include "tokenizer/gguf_vocab.h"

namespace basalt::cli {
namespace {

struct QuantizeArgs {
  std::string model, to, out, name;
  int threads = 0;
};

// --to values: GGUF types (a .gguf file) and the scaled formats (an HF directory).
constexpr const char* kTargets =
    "f32, f16, bf16, q8_0, q4_k, q5_k, q6_k (every matrix that type), q4_k_m, q5_k_m (llama.cpp's "
    "mixed presets) (GGUF file); nvfp4, fp8, fp8-block (HF directory)";

int run_hf_quantize(const QuantizeArgs& a, HfQuantTarget target) {
  if (a.out.empty()) fail("[quantize] --out DIR is required");
  if (a.out.ends_with(".gguf"))
    fail("[quantize] --to {} writes an HF checkpoint directory, not a GGUF file (--out {})", a.to,
         a.out);
  const auto t0 = std::chrono::steady_clock::now();
  const io::Checkpoint ck = io::checkpoint_open(a.model);
  (void)model_from_checkpoint(ck);  // a checkpoint basalt cannot run fails now, not after minutes
  const HfQuantStats st =
      hf_quant_write(ck, target, a.out, a.threads, [](size_t i, size_t n, const std::string& name) {
        spdlog::info("[{}/{}] {}", i + 1, n, name);
      });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(
      stderr,
      "wrote %s (%s: %lld matrices quantised, %lld tensors kept; %.1f MB -> %.1f MB, %.1f s)\n",
      a.out.c_str(), a.to.c_str(), (long long)st.quantised, (long long)st.kept,
      double(st.bytes_in) / 1e6, double(st.bytes_out) / 1e6, secs);
  return 0;
}

io::GgufMetadata hf_metadata(const io::Checkpoint& ck, ModelConfig& c, DType dt,
                             const std::string& name) {
  c = gguf_config_from_hf(ck.config, ck.path + "/config.json");
  // generation_config.json's eos list wins over config.json's, as when basalt loads the dir.
  if (auto gen = models::cfg_token_ids(ck.generation_config, "eos_token_id"); !gen.empty())
    c.eos_ids = gen;
  io::GgufMetadata meta = gguf_model_metadata(c, name, dt);
  io::GgufMetadata vocab;
  if (ck.tokenizer_json) {
    vocab = tok::gguf_vocab_from_json(*ck.tokenizer_json, ck.tokenizer_config, c.vocab, c.eos_ids);
  } else {
    spdlog::warn("{}: no tokenizer.json; writing a synthetic byte-level vocabulary", ck.path);
    vocab = gguf_synthetic_vocab(c);
  }
  for (auto& kv : vocab) meta.push_back(std::move(kv));
  return meta;
}

io::GgufMetadata gguf_metadata(const io::Checkpoint& ck) {
  (void)model_from_checkpoint(ck);  // fails now, not after minutes of encoding
  io::GgufMetadata meta;
  for (int pass = 0; pass < 2; ++pass)  // general.* first, as llama.cpp's tools write them
    for (const auto& [k, v] : ck.gguf->metadata)
      if ((k.rfind("general.", 0) == 0) == (pass == 0) && k != "general.alignment")
        meta.emplace_back(k, v);
  return meta;
}

int run_quantize(const QuantizeArgs& a) {
  if (HfQuantTarget t; hf_quant_target_parse(a.to, &t)) return run_hf_quantize(a, t);
  GgufScheme scheme;
  if (!gguf_scheme_parse(a.to, &scheme))
    fail("[quantize] --to must be one of {}, got '{}'", kTargets, a.to);
  const DType dt = scheme.base;
  if (a.out.empty()) fail("[quantize] --out FILE.gguf is required");
  const auto t0 = std::chrono::steady_clock::now();
  const io::Checkpoint ck = io::checkpoint_open(a.model);
  if (ck.tensors.size() == 0)
    fail("[quantize] {}: no tensors (a tokenizer-only or vocab-only checkpoint)",
         model_label(a.model));
  ModelConfig c;
  std::string name = a.name;
  if (name.empty())
    name = a.model.empty() ? "basalt-default" : std::filesystem::path(ck.path).filename().string();
  io::GgufMetadata meta =
      ck.format == io::CheckpointFormat::Gguf ? gguf_metadata(ck) : hf_metadata(ck, c, dt, name);
  if (!a.name.empty()) {
    std::erase_if(meta, [](const auto& kv) { return kv.first == "general.name"; });
    meta.emplace_back("general.name", io::gguf_str(a.name));
  }
  const std::vector<GgufSource> sources = gguf_sources_from_checkpoint(ck, c);
  gguf_write_model(a.out, std::move(meta), sources, scheme, a.threads,
                   [](size_t i, size_t n, const GgufSource& s, DType t) {
                     spdlog::info("[{}/{}] {} {} {}", i + 1, n, s.name, shape_str(s.shape),
                                  dtype_name(t));
                   });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "wrote %s (%s, %zu tensors, %.1f MB, %.1f s)\n", a.out.c_str(), a.to.c_str(),
               sources.size(), double(std::filesystem::file_size(a.out)) / 1e6, secs);
  return 0;
}

}  // namespace

Runner add_quantize(CLI::App& app) {
  auto a = std::make_shared<QuantizeArgs>();
  CLI::App* sc = app.add_subcommand(
      "quantize", "Rewrite a checkpoint as GGUF (f16/q8_0/q4_k/q5_k/q6_k/q4_k_m/q5_k_m) or as an NVFP4/FP8 HF "
      "directory");
  sc->add_option("-m,--model", a->model, "HF model directory or .gguf (default: embedded)");
  sc->add_option("--to", a->to, std::string("Matrix type: ") + kTargets)->required();
  sc->add_option("--out", a->out, "Output .gguf file (GGUF types) or directory (nvfp4/fp8)")
      ->required();
  sc->add_option("--name", a->name, "general.name (default: the input's)");
  sc->add_option("--threads", a->threads, "Encoding threads (default: all cores)");
  return [a] { return run_quantize(*a); };
}

}  // namespace basalt::cli
