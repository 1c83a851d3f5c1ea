#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/dtype.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "io_test_util.h"
#include "test_util.h"

namespace basalt::io {
namespace {

using test::Bytes;
using test::expect_error;
using test::SafetensorsWriter;
using test::TempDir;

template <typename T>
Bytes one(T v) {
  return test::bytes_of(std::vector<T>{v});
}

// One element of every safetensors dtype, with the value it must read back as.
struct DtypeCase {
  const char* name;
  DType dtype;
  Bytes bytes;
  double value;
};
std::vector<DtypeCase> dtype_cases() {
  return {
      {"F64", DType::F64, one<double>(-1.25e-300), -1.25e-300},
      {"F32", DType::F32, one<float>(3.5f), 3.5},
      {"F16", DType::F16, one<uint16_t>(0x3e00), 1.5},
      {"BF16", DType::BF16, one<uint16_t>(0xc0a0), -5.0},
      {"F8_E4M3", DType::F8_E4M3, one<uint8_t>(0x3c), 1.5},
      {"F8_E5M2", DType::F8_E5M2, one<uint8_t>(0xbe), -1.5},
      {"I8", DType::I8, one<int8_t>(-3), -3},
      {"I16", DType::I16, one<int16_t>(-300), -300},
      {"I32", DType::I32, one<int32_t>(-70000), -70000},
      {"I64", DType::I64, one<int64_t>(-5000000000), -5000000000.0},
      {"U8", DType::U8, one<uint8_t>(200), 200},
      {"U16", DType::U16, one<uint16_t>(60000), 60000},
      {"U32", DType::U32, one<uint32_t>(4000000000u), 4000000000.0},
      {"U64", DType::U64, one<uint64_t>(10000000000000ull), 1e13},
      {"BOOL", DType::BOOL, one<uint8_t>(1), 1},
  };
}

TEST(Safetensors, RoundTripsEveryDtype) {
  TempDir dir;
  SafetensorsWriter w;
  auto cases = dtype_cases();
  for (const auto& c : cases) {
    // a [2, 3] tensor whose element 4 is the probe value, the rest a byte pattern
    Bytes b(6 * c.bytes.size());
    for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(i * 7 + 1);
    if (c.dtype == DType::BOOL) std::fill(b.begin(), b.end(), 0);
    std::memcpy(b.data() + 4 * c.bytes.size(), c.bytes.data(), c.bytes.size());
    w.add(std::string("t_") + c.name, c.name, {2, 3}, b);
  }
  w.add("empty", "F32", {0, 4}, {});
  w.header["__metadata__"] = {{"format", "pt"}};
  std::string path = dir.str() + "/all.safetensors";
  test::write_file(path, w.build());

  TensorStore s = safetensors_load_file(path);
  ASSERT_EQ(s.size(), cases.size() + 1);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const TensorView& t = s.get(std::string("t_") + c.name);
    EXPECT_EQ(t.dtype, c.dtype);
    EXPECT_EQ(dtype_name(t.dtype), c.name);
    EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(t.nbytes, 6 * c.bytes.size());
    EXPECT_EQ(std::memcmp(t.data + 4 * c.bytes.size(), c.bytes.data(), c.bytes.size()), 0);
    EXPECT_EQ(dtype_read_f64(t.dtype, t.data, 4), c.value);
  }
  EXPECT_EQ(s.get("empty").numel(), 0);
  EXPECT_EQ(s.get("empty").nbytes, 0u);
}

TEST(Safetensors, ViewsPointIntoTheBlobAndKeepItAlive) {
  SafetensorsWriter w;
  w.add("x", "F32", {2}, test::bytes_of(std::vector<float>{1, 2}));
  Blob blob = blob_from_vector(w.build(), "mem.safetensors");
  const uint8_t* base = blob.data;
  TensorStore s = safetensors_parse(blob);
  blob = Blob{};  // the store must hold its own reference
  const TensorView& x = s.get("x");
  EXPECT_GE(x.data, base);
  EXPECT_EQ(dtype_read_f64(x.dtype, x.data, 1), 2.0);
}

// Writes a blob to `bad.safetensors` and expects an error naming the file and the problem.
void expect_bad(const Bytes& blob, std::initializer_list<std::string> parts) {
  TempDir dir;
  std::string path = dir.str() + "/bad.safetensors";
  test::write_file(path, blob);
  test::expect_error([&] { safetensors_load_file(path); }, {"[safetensors] " + path + ": "});
  test::expect_error([&] { safetensors_load_file(path); }, parts);
}

Bytes with_header(const std::string& h, size_t data_bytes = 32) {
  return test::safetensors_blob(h, Bytes(data_bytes, 0));
}

TEST(Safetensors, RejectsBadHeaderLength) {
  expect_bad(Bytes{1, 2, 3}, {"too short"});
  Bytes b = with_header("{}");
  b[0] = 0xe8, b[1] = 0x03;  // 1000 > file
  expect_bad(b, {"header length 1000 is larger than the file"});
  Bytes huge;
  test::put<uint64_t>(huge, 200'000'000);
  huge.resize(64, ' ');
  expect_bad(huge, {"header length 200000000 is absurd"});
}

TEST(Safetensors, RejectsBadJson) {
  expect_bad(with_header("{\"x\": "), {"header is not valid JSON: parse error at byte 6: "});
  expect_bad(with_header("[1, 2]"), {"not a JSON object"});
  expect_bad(with_header(R"({"x": 3})"), {"tensor 'x' entry is not an object"});
}

TEST(Safetensors, RejectsBadEntries) {
  auto entry = [](const std::string& fields) { return with_header("{\"x\": {" + fields + "}}"); };
  expect_bad(entry(R"("dtype": "F7", "shape": [2], "data_offsets": [0, 8])"),
             {"tensor 'x' has unknown dtype 'F7'"});
  expect_bad(entry(R"("shape": [2], "data_offsets": [0, 8])"), {"tensor 'x' has no \"dtype\""});
  expect_bad(entry(R"("dtype": "F32", "data_offsets": [0, 8])"), {"tensor 'x' has no \"shape\""});
  expect_bad(entry(R"("dtype": "F32", "shape": [2, -1], "data_offsets": [0, 8])"),
             {"tensor 'x' has a negative dimension -1"});
  expect_bad(entry(R"("dtype": "F32", "shape": [2.5], "data_offsets": [0, 8])"),
             {"tensor 'x' has a non-integer dimension"});
  expect_bad(entry(R"("dtype": "F32", "shape": 2, "data_offsets": [0, 8])"),
             {"tensor 'x' has a shape that is not an array"});
  expect_bad(entry(R"("dtype": "F32", "shape": [2], "data_offsets": [0])"),
             {"tensor 'x' data_offsets must be an array of 2"});
  expect_bad(entry(R"("dtype": "F32", "shape": [2], "data_offsets": ["0", 8])"),
             {"tensor 'x' data_offsets must be an array of 2"});
  expect_bad(entry(R"("dtype": "F32", "shape": [2], "data_offsets": [-8, 0])"),
             {"tensor 'x' data_offsets must be an array of 2"});
  expect_bad(entry(R"("dtype": "F32", "shape": [2], "data_offsets": [8, 0])"),
             {"tensor 'x' data_offsets [8, 0] end before begin"});
  expect_bad(entry(R"("dtype": "F32", "shape": [2], "data_offsets": [32, 40])"),
             {"tensor 'x' data_offsets [32, 40] run past the data section (32 bytes)"});
  expect_bad(entry(R"("dtype": "F32", "shape": [2, 4], "data_offsets": [0, 12])"),
             {"tensor 'x' has 12 bytes, shape [2, 4] of F32 needs 32"});
  expect_bad(entry(R"("dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 8])"),
             {"tensor 'x' has shape [4294967296, 4294967296] whose element count overflows"});
  expect_bad(with_header(R"({"__metadata__": 3})"), {"__metadata__ is not an object"});
}

TEST(Safetensors, LoadsShardedDirectory) {
  TempDir dir;
  SafetensorsWriter a, b;
  a.add("a.weight", "F32", {2}, test::bytes_of(std::vector<float>{1, 2}));
  a.add("a.extra", "BF16", {1}, test::bytes_of(std::vector<uint16_t>{0x3f80}));
  b.add("b.weight", "F16", {1}, test::bytes_of(std::vector<uint16_t>{0x4000}));
  test::write_file(dir.str() + "/model-00001-of-00002.safetensors", a.build());
  test::write_file(dir.str() + "/model-00002-of-00002.safetensors", b.build());
  nlohmann::json index = {{"metadata", {{"total_size", 14}}},
                          {"weight_map",
                           {{"a.weight", "model-00001-of-00002.safetensors"},
                            {"a.extra", "model-00001-of-00002.safetensors"},
                            {"b.weight", "model-00002-of-00002.safetensors"}}}};
  std::string ipath = dir.str() + "/model.safetensors.index.json";
  test::write_file(ipath, index.dump());
  TensorStore s = safetensors_load_dir(dir.str());
  EXPECT_EQ(s.names(), (std::vector<std::string>{"a.extra", "a.weight", "b.weight"}));
  EXPECT_EQ(dtype_read_f64(DType::F16, s.get("b.weight").data, 0), 2.0);

  index["weight_map"]["c.weight"] = "model-00002-of-00002.safetensors";
  test::write_file(ipath, index.dump());
  expect_error([&] { safetensors_load_dir(dir.str()); },
               {ipath,
                "tensor 'c.weight' is mapped to shard 'model-00002-of-00002.safetensors' "
                "but is not in it"});
  index["weight_map"]["c.weight"] = "model-00003-of-00002.safetensors";
  test::write_file(ipath, index.dump());
  expect_error([&] { safetensors_load_dir(dir.str()); },
               {ipath,
                "shard 'model-00003-of-00002.safetensors' (holding 'c.weight') does not "
                "exist"});
  index["weight_map"]["c.weight"] = "../x.safetensors";
  test::write_file(ipath, index.dump());
  expect_error([&] { safetensors_load_dir(dir.str()); }, {ipath, "not a plain file name"});
  test::write_file(ipath, std::string("{\"weight_map\": {"));
  expect_error([&] { safetensors_load_dir(dir.str()); },
               {"[json] " + ipath, "parse error at byte 16: "});
  test::write_file(ipath, std::string("{}"));
  expect_error([&] { safetensors_load_dir(dir.str()); }, {ipath, "no \"weight_map\""});
}

TEST(Safetensors, DirWithoutModelFileIsAnError) {
  TempDir dir;
  expect_error(
      [&] { safetensors_load_dir(dir.str()); },
      {"[safetensors] " + dir.str(), "neither model.safetensors nor model.safetensors.index.json"});
}

TEST(Safetensors, RealStories260KMatchesGguf) {
  BASALT_REQUIRE_FIXTURE(st_path, "stories260K-hf/model.safetensors");
  BASALT_REQUIRE_FIXTURE(gg_path, "stories260K/stories260K.gguf");
  TensorStore s = safetensors_load_file(st_path);
  EXPECT_EQ(s.size(), 47u);  // embed + 5 layers x 9 + final norm; lm_head tied
  const TensorView& emb = s.get("model.embed_tokens.weight");  // (V, E)
  EXPECT_EQ(emb.dtype, DType::F32);
  EXPECT_EQ(emb.shape, (std::vector<int64_t>{512, 64}));
  EXPECT_EQ(s.get("model.layers.0.self_attn.k_proj.weight").shape,
            (std::vector<int64_t>{32, 64}));  // (Hkv*D, E)
  EXPECT_EQ(s.get("model.layers.4.mlp.down_proj.weight").shape,
            (std::vector<int64_t>{64, 172}));  // (E, F)
  EXPECT_EQ(s.get("model.norm.weight").shape, (std::vector<int64_t>{64}));

  GgufFile g = gguf_load_file(gg_path);
  const TensorView& gemb = g.tensors.get("token_embd.weight");
  ASSERT_EQ(gemb.shape, emb.shape);
  ASSERT_EQ(gemb.nbytes, emb.nbytes);
  EXPECT_EQ(std::memcmp(gemb.data, emb.data, emb.nbytes), 0);
  const TensorView& gn = g.tensors.get("blk.3.ffn_norm.weight");
  const TensorView& sn = s.get("model.layers.3.post_attention_layernorm.weight");
  ASSERT_EQ(gn.nbytes, sn.nbytes);
  EXPECT_EQ(std::memcmp(gn.data, sn.data, sn.nbytes), 0);
}

}  // namespace
}  // namespace basalt::io
