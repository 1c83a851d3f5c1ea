// Models written as GGUF (models/gguf_export.h): `synth --format gguf` and `basalt quantize`
// produce files basalt loads and runs, equal to the source model within stated bounds, and
// byte-identical to the gguf-py files of tests/golden/gguf where the encoding is defined
// (F32, F16, Q8_0).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_backend.h"
#include "engine/generator.h"
#include "io/gguf.h"
#include "io/npy.h"
#include "models/gguf_export.h"
#include "models/model.h"
#include "models/synth.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace basalt {
namespace {

using nlohmann::json;

struct CliRun {
  int code = -1;
  std::string err;
};

// Runs `basalt ARGS`, capturing stderr.
CliRun basalt_run(const std::string& args) {
  test::TempDir tmp;
  const std::string err_path = tmp.str() + "/stderr";
  const int status =
      std::system((test::basalt_bin() + " " + args + " >/dev/null 2>" + err_path).c_str());
  CliRun r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream e(err_path);
  r.err.assign(std::istreambuf_iterator<char>(e), {});
  return r;
}

std::string golden(const std::string& rel) {
  return test::source_dir() + "/tests/golden/" + rel;
}

json read_json(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

// With f32 activations: these tests check the written weights against transformers, so the
// matmuls must not add the 8-bit activation rounding (tests/golden covers that path).
std::vector<float> logits_of(Model& m, const std::vector<int32_t>& ids) {
  auto be = cpu::make_cpu_backend(1, false);
  return Generator(m, *be).logits(ids, 0);
}

// max |a − b| / max |b|
double rel_max_err(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double err = 0, ref = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    err = std::max(err, double(std::fabs(a[i] - b[i]))),
    ref = std::max(ref, double(std::fabs(b[i])));
  return err / ref;
}

std::vector<int32_t> greedy(Model& m, const std::vector<int32_t>& prompt, size_t n) {
  auto be = cpu::make_cpu_backend(1);
  Generator gen(m, *be);
  GenerateOptions opt;
  opt.max_new_tokens = int64_t(n);
  opt.ignore_eos = true;
  std::vector<int32_t> out;
  gen.generate(prompt, opt, [&](int32_t t) {
    out.push_back(t);
    return true;
  });
  return out;
}

// Every tensor of `got` has the same type, shape and bytes as in `want`, and no tensor is
// missing or extra.
void expect_same_tensors(const std::string& got, const std::string& want) {
  const io::GgufFile a = io::gguf_load_file(got), b = io::gguf_load_file(want);
  EXPECT_EQ(a.tensors.names(), b.tensors.names());
  for (const auto& [name, tb] : b.tensors.all()) {
    const TensorView* ta = a.tensors.find(name);
    ASSERT_TRUE(ta) << name;
    EXPECT_EQ(ta->dtype, tb.dtype) << name;
    EXPECT_EQ(ta->shape, tb.shape) << name;
    ASSERT_EQ(ta->nbytes, tb.nbytes) << name;
    EXPECT_EQ(std::memcmp(ta->data, tb.data, tb.nbytes), 0) << name;
  }
}

TEST(GgufExport, StorageTypes) {
  EXPECT_EQ(gguf_storage_type(DType::Q4_K, {8, 512}), DType::Q4_K);
  EXPECT_EQ(gguf_storage_type(DType::Q4_K, {8, 96}), DType::Q8_0);  // rows not whole blocks
  EXPECT_EQ(gguf_storage_type(DType::Q4_K, {8, 100}), DType::F16);
  EXPECT_EQ(gguf_storage_type(DType::Q8_0, {8, 100}), DType::F16);
  EXPECT_EQ(gguf_storage_type(DType::Q8_0, {512}), DType::F32);  // 1-D: always F32
  EXPECT_EQ(gguf_storage_type(DType::BF16, {3, 7}), DType::BF16);
  DType t;
  EXPECT_TRUE(gguf_dtype_parse("q4_k", &t));
  EXPECT_EQ(t, DType::Q4_K);
  EXPECT_TRUE(gguf_dtype_parse("q6_k", &t));
  EXPECT_EQ(t, DType::Q6_K);
  EXPECT_FALSE(gguf_dtype_parse("q4_0", &t));
}

// The same weights as the safetensors synth: qwen3 (no permutation, tied) gives bitwise equal
// logits; llama's q/k are permuted for interleaved RoPE, which rounds differently (measured
// max error 1.5e-7 of the largest logit).
TEST(GgufExport, SynthGgufEqualsSynthSafetensors) {
  const std::vector<int32_t> ids = {1, 2, 3, 250, 17, 99, 4};
  for (const char* name : {"tiny-llama", "tiny-qwen3"}) {
    test::TempDir tmp;
    const std::string file = tmp.str() + "/m.gguf";
    synth_write(synth_preset(name), DType::F32, tmp.str() + "/hf", 7);
    synth_write_gguf(synth_preset(name), DType::F32, file, 7, 2);
    const auto hf = model_load(tmp.str() + "/hf"), gg = model_load(file);
    EXPECT_EQ(gg->config().arch, hf->config().arch);
    const io::GgufFile& g = *gg->checkpoint().gguf;
    EXPECT_EQ(g.get("general.file_type").as_int(), 0);
    EXPECT_EQ(g.get("tokenizer.ggml.tokens").as_array().size(), 256u);
    EXPECT_EQ(g.get("tokenizer.ggml.tokens").as_array()[0x20].as_string(), "\xc4\xa0");  // Ġ
    EXPECT_EQ(g.tensors.contains("output.weight"), std::string(name) == "tiny-llama");
    const auto a = logits_of(*gg, ids), b = logits_of(*hf, ids);
    if (std::string(name) == "tiny-qwen3")
      EXPECT_EQ(a, b);
    else
      EXPECT_LE(rel_max_err(a, b), 1e-5);
    auto tok = tok::tokenizer_from_checkpoint(gg->checkpoint());  // the synthetic vocabulary
    EXPECT_EQ(tok->decode(tok->encode("the cat", false, false)), "the cat");
  }
}

// A tiny preset widened to whole 256-blocks (hidden 256, head_dim 64, vocab 300).
SynthPreset blocks_preset(const std::string& base, int64_t intermediate, int64_t layers) {
  SynthPreset p{"test-" + base, "", synth_preset(base).config};
  p.config["hidden_size"] = 256;
  p.config["intermediate_size"] = intermediate;
  p.config["num_hidden_layers"] = layers;
  p.config["head_dim"] = 64;
  p.config["vocab_size"] = 300;
  return p;
}

// Q8_0, Q4_K, Q5_K and Q6_K synth files (shapes of whole 256-blocks, one of 96 columns for the
// fallback): the types asked, and logits near the F32 file's. Measured max errors relative to
// the largest logit: Q8_0 0.008, Q4_K 0.13, Q5_K 0.058, Q6_K 0.027 (random uniform weights, one
// layer); bounds 0.02, 0.2, 0.1, 0.05.
TEST(GgufExport, SynthQuantizedTypesAndErrors) {
  const SynthPreset p = blocks_preset("tiny-llama", 96, 1);
  test::TempDir tmp;
  std::map<DType, std::vector<float>> logits;
  const std::vector<int32_t> ids = {5, 7, 260, 99, 1};
  for (DType t : {DType::F32, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    const std::string file = tmp.str() + "/" + std::string(dtype_name(t)) + ".gguf";
    synth_write_gguf(p, t, file, 3, 2);
    const auto m = model_load(file);
    const io::TensorStore& ts = m->checkpoint().tensors;
    EXPECT_EQ(ts.get("blk.0.attn_q.weight").dtype, t);
    EXPECT_EQ(ts.get("token_embd.weight").dtype, t);
    EXPECT_EQ(ts.get("blk.0.attn_norm.weight").dtype, DType::F32);
    EXPECT_EQ(ts.get("blk.0.ffn_down.weight").dtype, dtype_block_elems(t) == 256 ? DType::Q8_0 : t);
    logits[t] = logits_of(*m, ids);
  }
  EXPECT_LE(rel_max_err(logits[DType::Q8_0], logits[DType::F32]), 0.02);
  EXPECT_LE(rel_max_err(logits[DType::Q4_K], logits[DType::F32]), 0.2);
  EXPECT_LE(rel_max_err(logits[DType::Q5_K], logits[DType::F32]), 0.1);
  EXPECT_LE(rel_max_err(logits[DType::Q6_K], logits[DType::F32]), 0.05);
  // The thread count does not change the bytes.
  synth_write_gguf(p, DType::Q4_K, tmp.str() + "/one.gguf", 3, 1);
  expect_same_tensors(tmp.str() + "/one.gguf", tmp.str() + "/Q4_K.gguf");
}

// llama.cpp's Q4_K_M / Q5_K_M rules, written out by hand for a 28-layer model (qwen3-0.6b's
// depth): n/8 = 3 and 7n/8 = 24, so layers 0-2 and 24-27, and between them 5, 8, ..., 23
// (layer - 3 ≡ 2 mod 3).
TEST(GgufExport, MixedPresetTypes) {
  std::vector<int64_t> more;
  for (int64_t l = 0; l < 28; ++l)
    if (gguf_more_bits_layer(l, 28)) more.push_back(l);
  EXPECT_EQ(more, (std::vector<int64_t>{0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26, 27}));
  // 2 layers: n/8 = 0 and 7n/8 = 1, so layer 1 only ((0 - 0) % 3 != 2).
  EXPECT_FALSE(gguf_more_bits_layer(0, 2));
  EXPECT_TRUE(gguf_more_bits_layer(1, 2));
  GgufScheme s;
  ASSERT_TRUE(gguf_scheme_parse("q4_k_m", &s));
  EXPECT_TRUE(s.mixed);
  EXPECT_EQ(s.base, DType::Q4_K);
  EXPECT_EQ(gguf_file_type(s), 15u);
  ASSERT_TRUE(gguf_scheme_parse("q5_k_m", &s));
  EXPECT_EQ(s.base, DType::Q5_K);
  EXPECT_EQ(gguf_file_type(s), 17u);
  ASSERT_TRUE(gguf_scheme_parse("q4_k", &s));
  EXPECT_FALSE(s.mixed);
  EXPECT_EQ(gguf_file_type(s), 14u);
  EXPECT_FALSE(gguf_scheme_parse("q4_k_s", &s));
  EXPECT_EQ(gguf_layer_of("blk.12.attn_v.weight"), 12);
  EXPECT_EQ(gguf_layer_of("blk.0.ffn_down.weight"), 0);
  EXPECT_EQ(gguf_layer_of("token_embd.weight"), -1);
  EXPECT_EQ(gguf_layer_of("output.weight"), -1);
  const GgufScheme km(DType::Q4_K, true);
  const std::vector<int64_t> m = {1024, 1024};
  auto type = [&](const char* name, bool tied, std::vector<int64_t> shape = {1024, 1024}) {
    return gguf_tensor_type(km, name, shape, 28, tied);
  };
  EXPECT_EQ(type("output.weight", false), DType::Q6_K);
  EXPECT_EQ(type("token_embd.weight", false), DType::Q4_K);
  EXPECT_EQ(type("token_embd.weight", true), DType::Q6_K);  // tied: the output matrix
  EXPECT_EQ(type("blk.5.attn_v.weight", false), DType::Q6_K);
  EXPECT_EQ(type("blk.4.attn_v.weight", false), DType::Q4_K);
  EXPECT_EQ(type("blk.27.ffn_down.weight", false), DType::Q6_K);
  EXPECT_EQ(type("blk.13.ffn_down.weight", false), DType::Q4_K);
  EXPECT_EQ(type("blk.5.attn_q.weight", false), DType::Q4_K);   // only v and down get more bits
  EXPECT_EQ(type("blk.5.ffn_up.weight", false), DType::Q4_K);
  EXPECT_EQ(type("blk.5.attn_norm.weight", false, {1024}), DType::F32);
  EXPECT_EQ(type("blk.5.ffn_down.weight", false, {1024, 96}), DType::Q8_0);  // not whole blocks
  EXPECT_EQ(gguf_tensor_type(GgufScheme(DType::Q4_K), "output.weight", m, 28, false),
            DType::Q4_K);  // pure: every matrix the base
}

// A Q4_K_M synth file of 8 layers (more bits: n/8 = 1, 7n/8 = 7, so layers 0, 3, 6, 7): the
// types llama.cpp's preset gives, general.file_type 15, loads and runs, tied and untied, with
// logits nearer the F32 file's than pure Q4_K's (max error relative to the largest logit,
// measured: llama 0.152 against 0.194, qwen3 0.146 against 0.238; random weights).
TEST(GgufExport, SynthQ4KMFile) {
  for (const char* base : {"tiny-llama", "tiny-qwen3"}) {
    const SynthPreset p = blocks_preset(base, 512, 8);
    test::TempDir tmp;
    synth_write_gguf(p, DType::F32, tmp.str() + "/f32.gguf", 3, 2);
    synth_write_gguf(p, GgufScheme(DType::Q4_K, true), tmp.str() + "/km.gguf", 3, 2);
    const auto m = model_load(tmp.str() + "/km.gguf");
    const io::TensorStore& ts = m->checkpoint().tensors;
    const bool tied = !ts.contains("output.weight");
    EXPECT_EQ(tied, std::string(base) == "tiny-qwen3");
    EXPECT_EQ(m->checkpoint().gguf->get("general.file_type").as_int(), 15);
    EXPECT_EQ(ts.get("token_embd.weight").dtype, tied ? DType::Q6_K : DType::Q4_K);
    if (!tied) {
      EXPECT_EQ(ts.get("output.weight").dtype, DType::Q6_K);
    }
    for (int l = 0; l < 8; ++l) {
      const bool more = l == 0 || l == 3 || l == 6 || l == 7;
      const std::string b = "blk." + std::to_string(l) + ".";
      EXPECT_EQ(ts.get(b + "attn_v.weight").dtype, more ? DType::Q6_K : DType::Q4_K) << l;
      EXPECT_EQ(ts.get(b + "ffn_down.weight").dtype, more ? DType::Q6_K : DType::Q4_K) << l;
      EXPECT_EQ(ts.get(b + "attn_k.weight").dtype, DType::Q4_K) << l;
      EXPECT_EQ(ts.get(b + "ffn_gate.weight").dtype, DType::Q4_K) << l;
    }
    const std::vector<int32_t> ids = {5, 7, 260, 99, 1};
    const auto f32 = model_load(tmp.str() + "/f32.gguf");
    synth_write_gguf(p, DType::Q4_K, tmp.str() + "/q4k.gguf", 3, 2);
    const auto ref = logits_of(*f32, ids);
    const double err_km = rel_max_err(logits_of(*m, ids), ref);
    const double err_pure = rel_max_err(logits_of(*model_load(tmp.str() + "/q4k.gguf"), ids), ref);
    EXPECT_LE(err_km, 0.25) << base;
    EXPECT_LT(err_km, err_pure) << base;  // the extra bits buy accuracy
  }
}

// quantize of the HF golden checkpoints: the tensors gguf-py wrote for tests/golden/gguf (same
// names, types and bytes, including llama's permuted q/k), so also the same logits.
TEST(GgufExport, QuantizeHfGoldenEqualsGgufPyFiles) {
  test::TempDir tmp;
  for (const auto& [dir, to, ref] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"qwen3_tied", "f16", "qwen3_tied.f16"},
           {"qwen3_tied", "q8_0", "qwen3_tied.q8_0"},
           {"llama_gqa_untied", "f32", "llama_gqa_untied.f32"}}) {
    const std::string out = tmp.str() + "/" + ref + ".gguf";
    const CliRun r = basalt_run("quantize -m " + golden(dir) + " --to " + to + " --out " + out);
    ASSERT_EQ(r.code, 0) << r.err;
    expect_same_tensors(out, golden("gguf/" + ref + ".gguf"));
    const json want = read_json(golden("gguf/" + ref + ".reference.json"));
    const auto m = model_load(out);
    const auto ids = want["input_ids"].get<std::vector<int32_t>>();
    const auto got = logits_of(*m, ids);
    EXPECT_LE(rel_max_err(got, io::npy_read(golden("gguf/" + ref + ".logits.npy")).data), 1e-4)
        << ref;
    EXPECT_EQ(
        greedy(*m, want["greedy_prompt"].get<std::vector<int32_t>>(), want["greedy_ids"].size()),
        want["greedy_ids"].get<std::vector<int32_t>>())
        << ref;
    // Against the HF model's own logits (f32): f16 storage measured 1.3e-3 of the largest
    // logit, Q8_0 3.1e-2 (transformers on the dequantized weights differs the same: the
    // weights' rounding, not basalt's); bounds 1e-2 and 5e-2.
    const double err = rel_max_err(got, io::npy_read(golden(dir + "/logits.npy")).data);
    EXPECT_LE(err, to == "q8_0" ? 5e-2 : 1e-2) << ref;
  }
}

// llama3 rope scaling becomes rope_freqs.weight (convert_hf_to_gguf.py's factors); the GGUF
// model matches transformers like the HF directory does (golden bound 1e-4 of the largest
// logit; measured 4.8e-7).
TEST(GgufExport, QuantizeLlama3RopeScalingWritesRopeFreqs) {
  test::TempDir tmp;
  const std::string out = tmp.str() + "/r.gguf";
  const CliRun r =
      basalt_run("quantize -m " + golden("llama3_rope_scaling") + " --to f32 --out " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto m = model_load(out);
  const TensorView& f = m->checkpoint().tensors.get("rope_freqs.weight");
  EXPECT_EQ(f.shape, std::vector<int64_t>{m->config().head_dim / 2});
  const json want = read_json(golden("llama3_rope_scaling/reference.json"));
  const auto got = logits_of(*m, want["input_ids"].get<std::vector<int32_t>>());
  EXPECT_LE(rel_max_err(got, io::npy_read(golden("llama3_rope_scaling/logits.npy")).data), 1e-4);
}

// The default model has a real tokenizer.json (Qwen2-style byte-level BPE): its GGUF form
// tokenizes the same, carries the chat template and special ids, and in BF16 (its own dtype)
// gives bitwise the logits of the HF directory.
TEST(GgufExport, QuantizeWithTokenizerJson) {
  test::TempDir tmp;
  const std::string dir = test::source_dir() + "/models/default", out = tmp.str() + "/d.gguf";
  const CliRun r = basalt_run("quantize -m " + dir + " --to bf16 --out " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto gg = model_load(out), hf = model_load(dir);
  const io::GgufFile& g = *gg->checkpoint().gguf;
  EXPECT_EQ(g.get("tokenizer.ggml.pre").as_string(), "qwen2");
  EXPECT_EQ(g.get("tokenizer.ggml.eos_token_id").as_int(), 4093);
  EXPECT_FALSE(g.get("tokenizer.ggml.add_bos_token").as_bool());
  EXPECT_NE(g.get("tokenizer.chat_template").as_string().find("<|im_start|>"), std::string::npos);
  EXPECT_EQ(g.get("general.file_type").as_int(), 32);
  const json want = read_json(golden("default_model/reference.json"));
  auto tok = tok::tokenizer_from_checkpoint(gg->checkpoint());
  const auto ids = want["input_ids"].get<std::vector<int32_t>>();
  EXPECT_EQ(tok->encode(want["text"].get<std::string>(), false, true), ids);
  EXPECT_EQ(logits_of(*gg, ids), logits_of(*hf, ids));
  EXPECT_EQ(gg->config().eos_ids, hf->config().eos_ids);
}

// GGUF in, GGUF out: metadata (vocabulary included) carried over, matrices re-encoded. Q8_0
// from the F16 file vs gguf-py's Q8_0 from F32: measured 9.8e-3 of the largest logit (Q8_0
// itself is 3.1e-2 from F32 here); bound 5e-2.
TEST(GgufExport, QuantizeGgufToGguf) {
  test::TempDir tmp;
  const std::string out = tmp.str() + "/q.gguf", src = golden("gguf/qwen3_tied.f16.gguf");
  const CliRun r = basalt_run("quantize -m " + src + " --to q8_0 --out " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  const io::GgufFile a = io::gguf_load_file(out), b = io::gguf_load_file(src);
  EXPECT_EQ(a.get("general.file_type").as_int(), 7);
  const auto& ta = a.get("tokenizer.ggml.tokens").as_array();
  const auto& tb = b.get("tokenizer.ggml.tokens").as_array();
  ASSERT_EQ(ta.size(), tb.size());
  for (size_t i = 0; i < ta.size(); ++i) ASSERT_EQ(ta[i].as_string(), tb[i].as_string());
  EXPECT_EQ(a.tensors.get("blk.1.ffn_up.weight").dtype, DType::Q8_0);
  const json want = read_json(golden("gguf/qwen3_tied.q8_0.reference.json"));
  const auto got = logits_of(*model_load(out), want["input_ids"].get<std::vector<int32_t>>());
  EXPECT_LE(rel_max_err(got, io::npy_read(golden("gguf/qwen3_tied.q8_0.logits.npy")).data), 5e-2);
}

TEST(GgufExport, QuantizeErrors) {
  test::TempDir tmp;
  const std::string in = " -m " + golden("qwen3_tied") + " --out " + tmp.str() + "/x.gguf";
  CliRun r = basalt_run("quantize --to nvfp4" + in);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--to nvfp4 writes an HF checkpoint directory, not a GGUF file"),
            std::string::npos)
      << r.err;
  r = basalt_run("quantize --to q4_0" + in);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--to must be one of f32, f16, bf16, q8_0, q4_k, q5_k, q6_k (every matrix "
                       "that type), q4_k_m, q5_k_m (llama.cpp's mixed presets) (GGUF file); "
                       "nvfp4, fp8, fp8-block (HF directory), got 'q4_0'"),
            std::string::npos)
      << r.err;
  r = basalt_run("synth --preset tiny-llama --dtype q4_k --out " + tmp.str() + "/d");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("q4_k_m, q5_k_m: --format gguf)"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(tmp.str() + "/x.gguf"));

  // The HF targets write a directory that loads.
  r = basalt_run("quantize --to nvfp4 -m " + golden("qwen3_tied") + " --out " + tmp.str() + "/q");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(model_load(tmp.str() + "/q")->weights().layers[0].w_up.dtype, DType::NVFP4);
}

}  // namespace
}  // namespace basalt
