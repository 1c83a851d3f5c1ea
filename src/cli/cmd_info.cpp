// basalt info: what a checkpoint holds.
#include <cstdio>

#include "backends/cpu/kernels_hwy.h"
#include "cli/commands.h"
#include "models/model.h"
#include "tokenizer/tokenizer.h"

namespace basalt::cli {
namespace {

struct InfoArgs {
  std::string model;
};

int run_info(const InfoArgs& a) {
  io::Checkpoint ck = io::checkpoint_open(a.model);
  std::printf("path:            %s\n", model_label(a.model).c_str());
  std::printf("format:          %s\n",
              ck.format == io::CheckpointFormat::Gguf ? "GGUF" : "Hugging Face directory");
  std::string tok_type = "none";
  int32_t tok_vocab = 0;
  try {
    auto tok = tok::tokenizer_from_checkpoint(ck);
    tok_type = tok->type_name();
    tok_vocab = tok->vocab_size();
  } catch (const std::exception& e) {
    tok_type = std::string("none (") + e.what() + ")";
  }
  if (ck.tensors.size() > 0) {
    auto model = model_from_checkpoint(std::move(ck));
    const ModelConfig& c = model->config();
    std::printf("architecture:    %s (%s)\n", c.hf_class.c_str(), c.arch.c_str());
    std::printf("parameters:      %lld\n", (long long)model->param_count());
    std::printf("dtypes:          %s\n", model->weight_dtypes().c_str());
    std::printf("layers:          %lld\n", (long long)c.n_layers);
    std::printf("hidden size:     %lld (MLP %lld)\n", (long long)c.hidden,
                (long long)c.intermediate);
    std::printf("heads:           %lld query, %lld key/value, head dim %lld\n",
                (long long)c.n_heads, (long long)c.n_kv_heads, (long long)c.head_dim);
    std::printf("vocabulary:      %lld\n", (long long)c.vocab);
    std::printf("context length:  %lld\n", (long long)c.max_context);
    std::printf("rope:            theta %g, %lld dims, %s, scaling %s\n", c.rope.theta,
                (long long)c.rope.dim,
                c.rope.style == RopeStyle::NeoX ? "rotate_half" : "interleaved",
                c.rope.scaling.c_str());
    std::printf("tied embeddings: %s\n", c.tied_embeddings ? "yes" : "no");
  } else {
    std::printf("tensors:         none (tokenizer only)\n");
  }
  std::printf("tokenizer:       %s", tok_type.c_str());
  if (tok_vocab) std::printf(", %d tokens", tok_vocab);
  std::printf("\ncpu kernels:     %s\n", cpu::simd_target_name());
  return 0;
}

}  // namespace

Runner add_info(CLI::App& app) {
  auto a = std::make_shared<InfoArgs>();
  CLI::App* sc = app.add_subcommand("info", "Describe a checkpoint");
  sc->add_option("-m,--model", a->model, "HF model directory or .gguf (default: embedded)");
  return [a] { return run_info(*a); };
}

}  // namespace basalt::cli
