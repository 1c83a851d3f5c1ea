#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/dtype.h"
#include "io/gguf.h"
#include "io_test_util.h"
#include "test_util.h"

namespace basalt::io {
namespace {

using test::Bytes;
using test::expect_error;
using test::GgufWriter;
using test::put;

enum : uint32_t { kF32 = 0, kF16 = 1, kQ4_1 = 3, kQ8_0 = 8, kBF16 = 30 };

// A small file with every metadata value type and one tensor of each supported type.
GgufWriter small_writer() {
  GgufWriter w;
  put<uint8_t>(w.key("t.u8", 0), 250);
  put<int8_t>(w.key("t.i8", 1), -100);
  put<uint16_t>(w.key("t.u16", 2), 65000);
  put<int16_t>(w.key("t.i16", 3), -30000);
  w.kv_u32("t.u32", 4000000000u);
  put<int32_t>(w.key("t.i32", 5), -2000000000);
  put<float>(w.key("t.f32", 6), 0.25f);
  put<uint8_t>(w.key("t.bool", 7), 1);
  w.kv_str("general.architecture", "llama");
  Bytes& a = w.key("t.arr_str", 9);
  put<uint32_t>(a, 8);
  put<uint64_t>(a, 3);
  for (const char* s : {"a", "", "\xe2\x96\x81hi"}) GgufWriter::str(a, s);
  Bytes& n = w.key("t.arr_nested", 9);  // [[1, 2], []] of int16
  put<uint32_t>(n, 9);
  put<uint64_t>(n, 2);
  put<uint32_t>(n, 3), put<uint64_t>(n, 2), put<int16_t>(n, 1), put<int16_t>(n, 2);
  put<uint32_t>(n, 3), put<uint64_t>(n, 0);
  put<uint64_t>(w.key("t.u64", 10), 18000000000000000000ull);
  put<int64_t>(w.key("t.i64", 11), -9000000000000000000ll);
  put<double>(w.key("t.f64", 12), -1e300);

  w.tensor("f32", {4, 3}, kF32,
           test::bytes_of(std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  w.tensor("f16", {2}, kF16, test::bytes_of(std::vector<uint16_t>{0x3c00, 0xc000}));  // 1, -2
  w.tensor("bf16", {3, 1}, kBF16, test::bytes_of(std::vector<uint16_t>{0x3f80, 0x4040, 0xbf00}));
  Bytes q;  // two rows of one Q8_0 block: d = 0.5 then d = -2, q[i] = i - 16
  for (uint16_t d : {uint16_t(0x3800), uint16_t(0xc000)}) {
    put<uint16_t>(q, d);
    for (int i = 0; i < 32; ++i) put<int8_t>(q, int8_t(i - 16));
  }
  w.tensor("q8", {32, 2}, kQ8_0, q);
  return w;
}

GgufFile parse(const Bytes& b, const std::string& name = "mem.gguf") {
  return gguf_parse(blob_from_vector(b, name));
}

TEST(Gguf, ParsesEveryValueTypeAndTensorType) {
  GgufFile g = parse(small_writer().build());
  EXPECT_EQ(g.version, 3u);
  EXPECT_EQ(g.alignment, 32u);
  EXPECT_EQ(g.get("t.u8").as_int(), 250);
  EXPECT_EQ(g.get("t.u8").type, 0u);
  EXPECT_EQ(g.get("t.i8").as_int(), -100);
  EXPECT_EQ(g.get("t.u16").as_int(), 65000);
  EXPECT_EQ(g.get("t.i16").as_int(), -30000);
  EXPECT_EQ(g.get("t.u32").as_int(), 4000000000);
  EXPECT_EQ(g.get("t.i32").as_int(), -2000000000);
  EXPECT_EQ(g.get("t.f32").as_float(), 0.25);
  EXPECT_TRUE(g.get("t.bool").as_bool());
  EXPECT_EQ(g.get("general.architecture").as_string(), "llama");
  const GgufArray& a = g.get("t.arr_str").as_array();
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[1].as_string(), "");
  EXPECT_EQ(a[2].as_string(), "\xe2\x96\x81hi");
  const GgufArray& n = g.get("t.arr_nested").as_array();
  ASSERT_EQ(n.size(), 2u);
  EXPECT_EQ(n[0].as_array()[1].as_int(), 2);
  EXPECT_TRUE(n[1].as_array().empty());
  EXPECT_EQ(std::get<uint64_t>(g.get("t.u64").v), 18000000000000000000ull);
  EXPECT_EQ(g.get("t.i64").as_int(), -9000000000000000000ll);
  EXPECT_EQ(g.get("t.f64").as_float(), -1e300);
  EXPECT_EQ(g.get("t.f64").type, 12u);

  const TensorView& f = g.tensors.get("f32");
  EXPECT_EQ(f.shape, (std::vector<int64_t>{3, 4}));  // ne {4, 3} reversed
  EXPECT_EQ(dtype_read_f64(f.dtype, f.data, 7), 7.0);
  const TensorView& h = g.tensors.get("f16");
  EXPECT_EQ(h.dtype, DType::F16);
  EXPECT_EQ(dtype_read_f64(h.dtype, h.data, 1), -2.0);
  const TensorView& b = g.tensors.get("bf16");
  EXPECT_EQ(b.shape, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(dtype_read_f64(b.dtype, b.data, 2), -0.5);
  const TensorView& q = g.tensors.get("q8");
  EXPECT_EQ(q.dtype, DType::Q8_0);
  EXPECT_EQ(q.shape, (std::vector<int64_t>{2, 32}));
  EXPECT_EQ(q.nbytes, 68u);
  EXPECT_EQ(dtype_read_f64(q.dtype, q.data, 20), 0.5 * 4);
  EXPECT_EQ(dtype_read_f64(q.dtype, q.data, 32 + 3), -2.0 * -13);
  for (const auto& [name, t] : g.tensors.all())
    EXPECT_EQ((t.data - g.tensors.all().begin()->second.data) % 32, 0) << name;
}

TEST(Gguf, AccessorsThrowOnTypeMismatch) {
  GgufFile g = parse(small_writer().build());
  expect_error([&] { g.get("t.u8").as_string(); },
               {"[gguf] metadata value has type unsigned integer, expected string"});
  expect_error([&] { g.get("general.architecture").as_int(); }, {"has type string"});
  expect_error([&] { g.get("t.f32").as_bool(); }, {"has type float, expected bool"});
  expect_error([&] { g.get("t.i8").as_array(); }, {"has type integer, expected array"});
  expect_error([&] { g.get("t.u64").as_int(); }, {"does not fit in int64"});
  expect_error([&] { g.get("nope"); }, {"[gguf] mem.gguf: missing key nope"});
  EXPECT_EQ(g.find("nope"), nullptr);
}

TEST(Gguf, HonoursAlignmentAndVersion2) {
  GgufWriter w = small_writer();
  w.version = 2;
  w.alignment = 64;
  w.kv_u32("general.alignment", 64);
  GgufFile g = parse(w.build());
  EXPECT_EQ(g.version, 2u);
  EXPECT_EQ(g.alignment, 64u);
  EXPECT_EQ(dtype_read_f64(DType::F32, g.tensors.get("f32").data, 11), 11.0);
  w.kv.clear(), w.n_kv = 0;
  w.kv_u32("general.alignment", 48);
  expect_error([&] { parse(w.build()); }, {"general.alignment 48 is not a power of two"});
}

// Every prefix of a valid file is an Error, never a crash or an out-of-bounds read.
TEST(Gguf, TruncationAtEveryByteIsAnError) {
  Bytes full = small_writer().build();
  for (size_t n = 0; n < full.size(); ++n) {
    Bytes part(full.begin(), full.begin() + n);
    try {
      parse(part, "cut.gguf");
      ADD_FAILURE() << "no error at length " << n;
    } catch (const Error& e) {
      ASSERT_NE(std::string(e.what()).find("[gguf] cut.gguf: "), std::string::npos) << e.what();
    }
  }
}

// Random byte flips: each parse either succeeds or throws basalt::Error (run under ASan too).
TEST(Gguf, CorruptedBytesNeverCrash) {
  Bytes full = small_writer().build();
  std::mt19937 rng(1);
  for (int i = 0; i < 3000; ++i) {
    Bytes b = full;
    for (int k = 0; k < 1 + i % 4; ++k) b[rng() % b.size()] = uint8_t(rng());
    try {
      parse(b);
    } catch (const Error&) {
    }
  }
}

TEST(Gguf, RealFileTruncatedIsAnError) {
  BASALT_REQUIRE_FIXTURE(path, "stories260K/stories260K.gguf");
  Blob full = blob_map_file(path);
  for (size_t n = 0; n < full.size; n += 1 + n / 4 + (n > 20000 ? 3001 : 0)) {
    EXPECT_THROW(gguf_parse(blob_static(full.data, n, "cut.gguf")), Error) << n;
  }
}

TEST(Gguf, RejectsBadHeaders) {
  expect_error(
      [] {
        parse(Bytes{'G', 'G', 'U', 'X', 3, 0, 0, 0});
      },
      {"[gguf] mem.gguf: not a GGUF file"});
  Bytes v1 = small_writer().build();
  v1[4] = 1;
  expect_error([&] { parse(v1); }, {"unsupported GGUF version 1"});
  Bytes many = small_writer().build();
  std::memcpy(many.data() + 8, "\xff\xff\xff\xff\xff\x00\x00\x00", 8);
  expect_error([&] { parse(many); }, {"tensor count 1099511627775 is absurd"});
  Bytes kvs = small_writer().build();
  std::memcpy(kvs.data() + 16, "\xff\xff\xff\xff\xff\x00\x00\x00", 8);
  expect_error([&] { parse(kvs); }, {"metadata count 1099511627775 is absurd"});
}

TEST(Gguf, RejectsBadMetadata) {
  GgufWriter w;
  put<uint8_t>(w.key("k.bad", 13), 0);
  expect_error([&] { parse(w.build()); }, {"key 'k.bad' has unknown value type 13"});
  GgufWriter a;
  Bytes& b = a.key("k.arr", 9);
  put<uint32_t>(b, 4), put<uint64_t>(b, 1000000);
  expect_error([&] { parse(a.build()); },
               {"key 'k.arr' array of 1000000 elements runs past the end"});
  GgufWriter s;
  put<uint64_t>(s.key("k.str", 8), 5000);
  expect_error([&] { parse(s.build()); }, {"truncated: k.str needs 5000 bytes"});
  GgufWriter d;
  d.kv_u32("k", 1), d.kv_u32("k", 2);
  expect_error([&] { parse(d.build()); }, {"duplicate metadata key 'k'"});
  GgufWriter deep;
  Bytes& x = deep.key("k.deep", 9);
  for (int i = 0; i < 20; ++i) put<uint32_t>(x, 9), put<uint64_t>(x, 1);
  expect_error([&] { parse(deep.build()); }, {"nested deeper than 8"});
}

TEST(Gguf, RejectsBadTensors) {
  auto with = [](auto edit) {
    GgufWriter w;
    w.tensor("blk.0.attn_q.weight", {32, 2}, kF32, Bytes(256, 0));
    edit(w);
    return w;
  };
  expect_error([&] { parse(with([](GgufWriter& w) { w.tensors[0].type = kQ4_1; }).build()); },
               {"[gguf] mem.gguf: tensor 'blk.0.attn_q.weight' has unsupported tensor type Q4_1"});
  expect_error([&] { parse(with([](GgufWriter& w) { w.tensors[0].type = 99; }).build()); },
               {"tensor 'blk.0.attn_q.weight' has unknown tensor type 99"});
  expect_error(
      [&] {
        parse(with([](GgufWriter& w) { w.tensors[0].ne = {2, 2, 2, 2, 4}; }).build());
      },
      {"tensor 'blk.0.attn_q.weight' has 5 dimensions (at most 4)"});
  expect_error(
      [&] {
        parse(with([](GgufWriter& w) {
                w.tensors[0] = {"q", {48, 1}, kQ8_0, Bytes(68, 0)};
              }).build());
      },
      {"tensor 'q' has rows of 48 elements, not a whole number of 32-element Q8_0 blocks"});
  expect_error([&] { parse(with([](GgufWriter& w) {
                             w.tensors[0].ne = {32, 3};
                           }).build()); },
               {"tensor 'blk.0.attn_q.weight' data", "runs past the end of the file"});
  expect_error(
      [&] {
        parse(with([](GgufWriter& w) {
                w.tensor("x", {1ull << 40, 1ull << 40}, kF32, {});
              }).build());
      },
      {"tensor 'x' has an absurd dimension"});
  Bytes mis = with([](GgufWriter&) {}).build();
  // the tensor's offset field is the 8 bytes before the aligned data section's padding
  size_t off_at = 24 + 8 + 19 + 4 + 16 + 4;
  mis[off_at] = 4;
  expect_error([&] { parse(mis); }, {"tensor 'blk.0.attn_q.weight' data offset 4 is misaligned"});
  expect_error(
      [&] {
        parse(with([](GgufWriter& w) {
                w.tensor("blk.0.attn_q.weight", {1}, kF32, Bytes(4));
              }).build());
      },
      {"tensor 'blk.0.attn_q.weight' appears twice"});
}

TEST(Gguf, TypeNames) {
  EXPECT_EQ(gguf_type_name(0), "F32");
  EXPECT_EQ(gguf_type_name(8), "Q8_0");
  EXPECT_EQ(gguf_type_name(14), "Q6_K");
  EXPECT_EQ(gguf_type_name(30), "BF16");
  EXPECT_EQ(gguf_type_name(39), "MXFP4");
  EXPECT_EQ(gguf_type_name(4), "");
  EXPECT_EQ(gguf_type_name(1000), "");
}

TEST(Gguf, RealStories260K) {
  BASALT_REQUIRE_FIXTURE(path, "stories260K/stories260K.gguf");
  GgufFile g = gguf_load_file(path);
  EXPECT_EQ(g.version, 3u);
  EXPECT_EQ(g.alignment, 32u);
  EXPECT_EQ(g.tensors.size(), 48u);
  for (const auto& [name, t] : g.tensors.all()) EXPECT_EQ(t.dtype, DType::F32) << name;
  EXPECT_EQ(g.get("general.architecture").as_string(), "llama");
  EXPECT_EQ(g.get("llama.context_length").as_int(), 2048);
  EXPECT_EQ(g.get("llama.embedding_length").as_int(), 64);
  EXPECT_EQ(g.get("llama.feed_forward_length").as_int(), 172);
  EXPECT_EQ(g.get("llama.block_count").as_int(), 5);
  EXPECT_EQ(g.get("llama.attention.head_count").as_int(), 8);
  EXPECT_EQ(g.get("llama.attention.head_count_kv").as_int(), 4);
  EXPECT_EQ(g.get("llama.rope.dimension_count").as_int(), 8);
  EXPECT_FLOAT_EQ(float(g.get("llama.attention.layer_norm_rms_epsilon").as_float()), 1e-5f);
  EXPECT_EQ(g.get("tokenizer.ggml.model").as_string(), "llama");
  const GgufArray& tokens = g.get("tokenizer.ggml.tokens").as_array();
  ASSERT_EQ(tokens.size(), 512u);
  EXPECT_EQ(g.get("tokenizer.ggml.scores").as_array().size(), 512u);
  EXPECT_EQ(g.get("tokenizer.ggml.token_type").as_array().size(), 512u);
  EXPECT_EQ(g.get("tokenizer.ggml.bos_token_id").as_int(), 1);
  EXPECT_EQ(g.get("tokenizer.ggml.eos_token_id").as_int(), 2);
  EXPECT_EQ(g.get("tokenizer.ggml.unknown_token_id").as_int(), 0);
  bool has_sp_marker = false;  // SentencePiece pieces use U+2581
  for (const auto& t : tokens) has_sp_marker |= t.as_string().find("\xe2\x96\x81") == 0;
  EXPECT_TRUE(has_sp_marker);

  EXPECT_EQ(g.tensors.get("token_embd.weight").shape, (std::vector<int64_t>{512, 64}));  // (V, E)
  EXPECT_EQ(g.tensors.get("blk.0.attn_k.weight").shape, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(g.tensors.get("blk.4.ffn_down.weight").shape, (std::vector<int64_t>{64, 172}));
  const TensorView& emb = g.tensors.get("token_embd.weight");
  const TensorView& out = g.tensors.get("output.weight");
  ASSERT_EQ(emb.nbytes, out.nbytes);
  EXPECT_EQ(std::memcmp(emb.data, out.data, emb.nbytes), 0);
}

TEST(Gguf, RealVocabOnly) {
  BASALT_REQUIRE_FIXTURE(path, "tokenizer-vectors/ggml-vocab-llama-spm.gguf");
  GgufFile g = gguf_load_file(path);
  EXPECT_EQ(g.tensors.size(), 0u);
  EXPECT_EQ(g.get("tokenizer.ggml.model").as_string(), "llama");
  EXPECT_EQ(g.get("tokenizer.ggml.tokens").as_array().size(), 32000u);
  EXPECT_EQ(g.get("tokenizer.ggml.scores").as_array().size(), 32000u);
}

}  // namespace
}  // namespace basalt::io
