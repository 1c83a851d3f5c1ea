#include <gtest/gtest.h>

#include <filesystem>

#include "io/checkpoint.h"
#include "io/embedded.h"
#include "io_test_util.h"
#include "test_util.h"

namespace basalt::io {
namespace {

using test::expect_error;
using test::TempDir;
using test::write_file;

std::string tiny_safetensors_dir(const TempDir& dir) {
  test::SafetensorsWriter w;
  w.add("w", "F32", {2}, test::bytes_of(std::vector<float>{1, 2}));
  write_file(dir.str() + "/model.safetensors", w.build());
  return dir.str();
}

TEST(Checkpoint, OpensHfDirectory) {
  TempDir dir;
  tiny_safetensors_dir(dir);
  write_file(dir.str() + "/config.json", std::string(R"({"model_type": "llama"})"));
  write_file(dir.str() + "/generation_config.json", std::string(R"({"temperature": 0.6})"));
  write_file(dir.str() + "/tokenizer.json", std::string(R"({"model": {"type": "BPE"}})"));
  Checkpoint ck = checkpoint_open(dir.str());
  EXPECT_EQ(ck.format, CheckpointFormat::HfDir);
  EXPECT_EQ(ck.path, dir.str());
  EXPECT_EQ(ck.config["model_type"], "llama");
  EXPECT_EQ(ck.generation_config["temperature"], 0.6);
  ASSERT_TRUE(ck.tokenizer_json.has_value());
  EXPECT_EQ((*ck.tokenizer_json)["model"]["type"], "BPE");
  EXPECT_TRUE(ck.tokenizer_config.is_object());
  EXPECT_TRUE(ck.tokenizer_config.empty());
  EXPECT_EQ(ck.gguf, nullptr);
  EXPECT_TRUE(ck.tensors.contains("w"));
}

TEST(Checkpoint, TokenizerOnlyDirectoryOpens) {
  TempDir dir;
  write_file(dir.str() + "/tokenizer_config.json", std::string(R"({"eos_token": "</s>"})"));
  Checkpoint ck = checkpoint_open(dir.str());
  EXPECT_TRUE(ck.config.is_object());
  EXPECT_TRUE(ck.config.empty());
  EXPECT_EQ(ck.tokenizer_config["eos_token"], "</s>");
  EXPECT_FALSE(ck.tokenizer_json.has_value());
  EXPECT_EQ(ck.tensors.size(), 0u);
}

TEST(Checkpoint, DirectoryErrors) {
  TempDir dir;
  expect_error([&] { checkpoint_open(dir.str()); },
               {"[checkpoint] " + dir.str() + ": not a model directory"});
  tiny_safetensors_dir(dir);
  expect_error([&] { checkpoint_open(dir.str()); },
               {"[checkpoint] " + dir.str() + ": config.json is missing"});
  write_file(dir.str() + "/config.json", std::string("{\"a\": 1,\n \"b\": }"));
  expect_error([&] { checkpoint_open(dir.str()); },
               {"[json] " + dir.str() + "/config.json: parse error at byte 15: "});
  write_file(dir.str() + "/config.json", std::string("[1]"));
  expect_error([&] { checkpoint_open(dir.str()); }, {"config.json: not a JSON object"});
  write_file(dir.str() + "/config.json", std::string("{}"));
  write_file(dir.str() + "/tokenizer.json", std::string("{"));
  expect_error([&] { checkpoint_open(dir.str()); }, {"/tokenizer.json: parse error at byte 1"});
  std::filesystem::remove(dir.path / "tokenizer.json");
  write_file(dir.str() + "/model.safetensors", std::string("junk"));
  expect_error([&] { checkpoint_open(dir.str()); },
               {"[safetensors] " + dir.str() + "/model.safetensors: ", "too short"});
}

TEST(Checkpoint, PathErrors) {
  TempDir dir;
  expect_error([&] { checkpoint_open(dir.str() + "/nope"); },
               {"[checkpoint] " + dir.str() + "/nope: no such file or directory"});
  write_file(dir.str() + "/x.bin", std::string("hello world"));
  expect_error([&] { checkpoint_open(dir.str() + "/x.bin"); },
               {"[checkpoint] " + dir.str() + "/x.bin: neither a model directory nor a GGUF file"});
  write_file(dir.str() + "/m.safetensors", std::string("hello world"));
  expect_error([&] { checkpoint_open(dir.str() + "/m.safetensors"); },
               {"pass the directory holding it"});
  write_file(dir.str() + "/bad.gguf", std::string("GGUF"));
  expect_error([&] { checkpoint_open(dir.str() + "/bad.gguf"); },
               {"[gguf] " + dir.str() + "/bad.gguf: truncated"});
}

TEST(Checkpoint, OpensGgufByMagicOrName) {
  TempDir dir;
  test::GgufWriter w;
  w.kv_str("general.architecture", "llama");
  w.tensor("t", {2}, 0, test::bytes_of(std::vector<float>{1, 2}));
  write_file(dir.str() + "/model.bin", w.build());  // no .gguf suffix: found by magic
  Checkpoint ck = checkpoint_open(dir.str() + "/model.bin");
  EXPECT_EQ(ck.format, CheckpointFormat::Gguf);
  ASSERT_NE(ck.gguf, nullptr);
  EXPECT_EQ(ck.gguf->get("general.architecture").as_string(), "llama");
  EXPECT_TRUE(ck.config.is_object());
  EXPECT_TRUE(ck.tensors.contains("t"));
  EXPECT_EQ(ck.tensors.get("t").data, ck.gguf->tensors.get("t").data);  // shared views
}

TEST(Checkpoint, RealStories) {
  BASALT_REQUIRE_FIXTURE(hf, "stories260K-hf");
  Checkpoint ck = checkpoint_open(hf);
  EXPECT_EQ(ck.config["hidden_size"], 64);
  EXPECT_EQ(ck.tensors.size(), 47u);
  BASALT_REQUIRE_FIXTURE(gg, "stories260K/stories260K.gguf");
  Checkpoint g = checkpoint_open(gg);
  EXPECT_EQ(g.format, CheckpointFormat::Gguf);
  EXPECT_EQ(g.tensors.size(), 48u);
  BASALT_REQUIRE_FIXTURE(vocab, "tokenizer-vectors/ggml-vocab-llama-spm.gguf");
  EXPECT_EQ(checkpoint_open(vocab).tensors.size(), 0u);
}

TEST(Checkpoint, EmbeddedDefaultModel) {
  const EmbeddedFile* files = basalt_embedded_files();
  ASSERT_NE(files, nullptr);
  if (!files[0].name) {
    expect_error([] { checkpoint_open(""); },
                 {"[checkpoint] this build has no embedded default model (models/default/ is "
                  "empty); pass -m PATH"});
    return;
  }
  Checkpoint ck = checkpoint_open("");
  EXPECT_EQ(ck.path, "<embedded>");
  EXPECT_GT(ck.tensors.size(), 0u);
}

TEST(Json, LoadFileReportsByteOffset) {
  TempDir dir;
  std::string p = dir.str() + "/a.json";
  write_file(p, std::string(R"({"k": [1, 2,]})"));
  expect_error([&] { json_load_file(p); }, {"[json] " + p + ": parse error at byte 12: "});
  expect_error([&] { json_load_file(dir.str() + "/missing.json"); },
               {"[io] " + dir.str() + "/missing.json: cannot open"});
  write_file(p, std::string(R"({"k": [1, 2]})"));
  EXPECT_EQ(json_load_file(p)["k"][1], 2);
}

}  // namespace
}  // namespace basalt::io
