// The GGUF writer (io/gguf_write.h) against basalt's reader: every metadata kind and tensor
// type round-trips, data is aligned, fills come in whole rows, bad input is refused up front.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "io/gguf.h"
#include "io/gguf_write.h"
#include "test_util.h"

namespace basalt::io {
namespace {

GgufValue typed(uint32_t type, decltype(GgufValue::v) v) {
  GgufValue g;
  g.v = std::move(v);
  g.type = type;
  return g;
}

// A tensor whose byte k is (k * 7 + salt) mod 251, produced in whatever pieces the writer asks.
TensorToWrite pattern(const std::string& name, DType dt, std::vector<int64_t> shape, int salt,
                      std::vector<std::pair<int64_t, int64_t>>* calls = nullptr) {
  return {name, dt, std::move(shape), [dt, salt, calls](int64_t first, int64_t n, uint8_t* out) {
            if (calls) calls->emplace_back(first, n);
            const size_t at = dtype_bytes(dt, first), len = dtype_bytes(dt, n);
            for (size_t k = 0; k < len; ++k) out[k] = uint8_t(((at + k) * 7 + salt) % 251);
          }};
}

void expect_pattern(const TensorView& t, int salt) {
  for (size_t k = 0; k < t.nbytes; ++k)
    ASSERT_EQ(t.data[k], uint8_t((k * 7 + salt) % 251)) << t.name << " byte " << k;
}

TEST(GgufWrite, EveryMetadataKindAndTensorTypeRoundTrips) {
  test::TempDir tmp;
  const std::string path = tmp.str() + "/all.gguf";
  GgufArray nested;
  nested.push_back(gguf_i32s({1, 2}));
  nested.push_back(gguf_i32s({}));
  const GgufMetadata meta = {
      {"general.architecture", gguf_str("llama")},
      {"t.u8", typed(0, uint64_t(250))},
      {"t.i8", typed(1, int64_t(-100))},
      {"t.u16", typed(2, uint64_t(65000))},
      {"t.i16", typed(3, int64_t(-30000))},
      {"t.u32", gguf_u32(4000000000u)},
      {"t.i32", gguf_i32(-2000000000)},
      {"t.f32", gguf_f32(0.25f)},
      {"t.bool", gguf_bool(true)},
      {"t.str", gguf_str("\xe2\x96\x81hi")},
      {"t.u64", gguf_u64(18000000000000000000ull)},
      {"t.i64", typed(11, int64_t(-9000000000000000000ll))},
      {"t.f64", typed(12, -1e300)},
      {"t.strs", gguf_strs({"a", "", "b c"})},
      {"t.i32s", gguf_i32s({-1, 0, 7})},
      {"t.f32s", gguf_f32s({1.5f, -0.125f})},
      {"t.nested", typed(9, std::move(nested))},
      {"t.empty", gguf_strs({})},
  };
  std::vector<std::pair<int64_t, int64_t>> calls;
  const std::vector<TensorToWrite> ts = {
      pattern("f32", DType::F32, {3, 5}, 1),
      pattern("f16", DType::F16, {7}, 2),
      pattern("bf16", DType::BF16, {2, 3, 4}, 3),
      pattern("q8_0", DType::Q8_0, {3, 64}, 4),
      pattern("q4_0", DType::Q4_0, {2, 32}, 5),
      pattern("q4_k", DType::Q4_K, {2, 256}, 6),
      pattern("q5_k", DType::Q5_K, {1, 1, 1, 256}, 7),
      pattern("q6_k", DType::Q6_K, {3, 512}, 8),
      // 4.2M elements: more than one fill call (~4M elements each), whole rows each time.
      pattern("big", DType::F16, {4200, 1000}, 9, &calls),
  };
  gguf_write(path, meta, ts);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  const GgufFile g = gguf_load_file(path);
  EXPECT_EQ(g.version, 3u);
  EXPECT_EQ(g.alignment, 32u);
  ASSERT_EQ(g.metadata.size(), meta.size());
  for (const auto& [k, v] : meta) EXPECT_EQ(g.get(k).type, v.type) << k;
  EXPECT_EQ(g.get("general.architecture").as_string(), "llama");
  EXPECT_EQ(g.get("t.u8").as_int(), 250);
  EXPECT_EQ(g.get("t.i8").as_int(), -100);
  EXPECT_EQ(g.get("t.u16").as_int(), 65000);
  EXPECT_EQ(g.get("t.i16").as_int(), -30000);
  EXPECT_EQ(g.get("t.u32").as_int(), 4000000000);
  EXPECT_EQ(g.get("t.i32").as_int(), -2000000000);
  EXPECT_EQ(g.get("t.f32").as_float(), 0.25);
  EXPECT_TRUE(g.get("t.bool").as_bool());
  EXPECT_EQ(g.get("t.str").as_string(), "\xe2\x96\x81hi");
  EXPECT_EQ(std::get<uint64_t>(g.get("t.u64").v), 18000000000000000000ull);
  EXPECT_EQ(g.get("t.i64").as_int(), -9000000000000000000ll);
  EXPECT_EQ(g.get("t.f64").as_float(), -1e300);
  const GgufArray& strs = g.get("t.strs").as_array();
  ASSERT_EQ(strs.size(), 3u);
  EXPECT_EQ(strs[0].as_string(), "a");
  EXPECT_EQ(strs[1].as_string(), "");
  EXPECT_EQ(strs[2].as_string(), "b c");
  const GgufArray& i32s = g.get("t.i32s").as_array();
  ASSERT_EQ(i32s.size(), 3u);
  EXPECT_EQ(i32s[0].as_int(), -1);
  EXPECT_EQ(i32s[2].type, 5u);
  const GgufArray& f32s = g.get("t.f32s").as_array();
  ASSERT_EQ(f32s.size(), 2u);
  EXPECT_EQ(f32s[1].as_float(), -0.125);
  EXPECT_EQ(f32s[1].type, 6u);
  const GgufArray& nest = g.get("t.nested").as_array();
  ASSERT_EQ(nest.size(), 2u);
  EXPECT_EQ(nest[0].as_array()[1].as_int(), 2);
  EXPECT_TRUE(nest[1].as_array().empty());
  EXPECT_TRUE(g.get("t.empty").as_array().empty());

  ASSERT_EQ(g.tensors.size(), ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    const TensorView& t = g.tensors.get(ts[i].name);
    EXPECT_EQ(t.dtype, ts[i].dtype) << t.name;
    EXPECT_EQ(t.shape, ts[i].shape) << t.name;
    EXPECT_EQ((t.data - g.tensors.get("f32").data) % 32, 0) << t.name;  // aligned
    expect_pattern(t, int(i) + 1);
  }
  ASSERT_EQ(calls.size(), 2u);  // 4194 rows (4,194,000 elements), then the 6 left
  EXPECT_EQ(calls[0], std::make_pair(int64_t(0), int64_t(4194000)));
  EXPECT_EQ(calls[1], std::make_pair(int64_t(4194000), int64_t(6000)));
}

TEST(GgufWrite, HonoursGeneralAlignment) {
  test::TempDir tmp;
  const std::string path = tmp.str() + "/a.gguf";
  gguf_write(path, {{"general.alignment", gguf_u32(256)}},
             {pattern("a", DType::F32, {3}, 1), pattern("b", DType::Q8_0, {1, 32}, 2)});
  const GgufFile g = gguf_load_file(path);
  EXPECT_EQ(g.alignment, 256u);
  const uint8_t* a = g.tensors.get("a").data;
  const uint8_t* b = g.tensors.get("b").data;
  EXPECT_EQ(b - a, 256);
  expect_pattern(g.tensors.get("b"), 2);
  EXPECT_EQ(std::filesystem::file_size(path) % 256, 0u);  // the last tensor is padded too
}

TEST(GgufWrite, RefusesBadInputBeforeWriting) {
  test::TempDir tmp;
  const std::string path = tmp.str() + "/bad.gguf";
  auto write = [&](GgufMetadata m, std::vector<TensorToWrite> ts) {
    return [&path, m = std::move(m), ts = std::move(ts)] { gguf_write(path, m, ts); };
  };
  test::expect_error(write({{"k", gguf_u32(1)}, {"k", gguf_u32(2)}}, {}),
                     "bad.gguf: duplicate metadata key 'k'");
  test::expect_error(write({{"k", typed(0, uint64_t(300))}}, {}),
                     "key 'k' value 300 does not fit its type 0");
  test::expect_error(write({{"k", typed(8, uint64_t(3))}}, {}),
                     "key 'k' has value type 8 but does not hold a string");
  GgufArray mixed;
  mixed.push_back(gguf_i32(1));
  mixed.push_back(gguf_u32(2));
  test::expect_error(write({{"k", typed(9, mixed)}}, {}),
                     "key 'k' is an array of mixed types 5 and 4");
  test::expect_error(write({{"general.alignment", gguf_u32(48)}}, {}),
                     "general.alignment must be a power of two");
  test::expect_error(write({}, {pattern("u8", DType::U8, {4}, 0)}),
                     "tensor 'u8' has dtype U8, which GGUF files cannot hold here");
  test::expect_error(
      write({}, {pattern("t", DType::F32, {4}, 0), pattern("t", DType::F32, {4}, 0)}),
      "tensor 't' appears twice");
  test::expect_error(write({}, {pattern("q", DType::Q4_K, {2, 128}, 0)}),
                     "tensor 'q' has rows of 128 elements, not whole 256-element Q4_K blocks");
  test::expect_error(write({}, {pattern("s", DType::F32, {1, 1, 1, 1, 1}, 0)}),
                     "tensor 's' has 5 dimensions (1 to 4)");
  EXPECT_FALSE(std::filesystem::exists(path));
  // A fill that throws leaves neither the file nor its temporary behind.
  TensorToWrite boom{
      "boom", DType::F32, {4}, [](int64_t, int64_t, uint8_t*) { fail("[test] fill failed"); }};
  test::expect_error(write({}, {boom}), "fill failed");
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

}  // namespace
}  // namespace basalt::io
