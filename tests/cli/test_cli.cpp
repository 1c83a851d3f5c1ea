// The basalt program as a user meets it: stdout holds only the output, errors are one clear
// line on stderr with a non-zero exit, never a crash.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/npy.h"
#include "test_util.h"

namespace basalt {
namespace {

struct Result {
  int code = -1;
  std::string out, err;
};

// Runs `basalt ARGS` (with the environment assignments `env` in front); stdout and stderr
// captured separately.
Result run(const std::string& args, const std::string& env = "") {
  test::TempDir tmp;
  const std::string err_path = tmp.str() + "/stderr";
  const std::string cmd = env + " " + test::basalt_bin() + " " + args + " 2>" + err_path;
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream e(err_path);
  r.err.assign(std::istreambuf_iterator<char>(e), {});
  return r;
}

std::string quote(const std::string& s) {
  return "'" + s + "'";
}

TEST(Cli, GenerateStories260KGreedyPrintsPublishedTextOnStdout) {
  BASALT_REQUIRE_FIXTURE(fx, "stories260K/stories260K.gguf");
  std::ifstream f(test::fixtures_dir() + "/stories260K/expected_greedy.json");
  const auto exp = nlohmann::json::parse(f);
  const std::string text = exp["greedy_text"].get<std::string>();
  Result r =
      run("generate -m " + quote(fx) + " -p 'Once upon a time' -n 256 --temp 0 --ignore-eos");
  ASSERT_EQ(r.code, 0) << r.err;
  // The first 200 characters of the published text (it starts with the prompt).
  EXPECT_EQ(r.out.substr(0, 200), text.substr(0, 200));
  EXPECT_NE(r.err.find("tokens/s"), std::string::npos);  // statistics go to stderr
  EXPECT_EQ(r.out.find("tokens/s"), std::string::npos);
}

TEST(Cli, GenerateFromSafetensorsDirEqualsGguf) {
  BASALT_REQUIRE_FIXTURE(fx, "stories260K/stories260K.gguf");
  // The HF directory has no tokenizer: its token ids must match the GGUF's (checked through
  // `logits`), which the golden test does; here, sampled generation is reproducible by seed.
  Result a = run("generate -m " + quote(fx) + " -p 'Once upon a time' -n 40 --seed 11 --temp 0.9");
  Result b = run("generate -m " + quote(fx) + " -p 'Once upon a time' -n 40 --seed 11 --temp 0.9");
  Result c = run("generate -m " + quote(fx) + " -p 'Once upon a time' -n 40 --seed 12 --temp 0.9");
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, c.out);
}

TEST(Cli, TokenizeVocabOnlyGgufIdsOnly) {
  BASALT_REQUIRE_FIXTURE(fx, "tokenizer-vectors/ggml-vocab-llama-spm.gguf");
  Result r = run("tokenize -m " + quote(fx) + " --text 'Hello world' --ids-only");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "[15043, 3186]\n");  // no BOS without --add-special
  r = run("tokenize -m " + quote(fx) + " --text 'Hello world' --ids-only --add-special");
  EXPECT_EQ(r.out, "[1, 15043, 3186]\n");
  r = run("detokenize -m " + quote(fx) + " --ids 15043,3186");
  EXPECT_EQ(r.out, "Hello world\n");
}

TEST(Cli, LogitsWritesNpyOfEveryPositionBitwiseAcrossChunks) {
  const std::string g = test::source_dir() + "/tests/golden/qwen3_tied";
  test::TempDir tmp;
  Result r = run("logits -m " + quote(g) + " --tokens 1,2,3,4,5,6,7 --out " + tmp.str() + "/a.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  r = run("logits -m " + quote(g) + " --tokens 1,2,3,4,5,6,7 --prefill-chunk 3 --out " + tmp.str() +
          "/b.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  const io::NpyArray a = io::npy_read(tmp.str() + "/a.npy"), b = io::npy_read(tmp.str() + "/b.npy");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{7, 320}));
  EXPECT_EQ(a.data, b.data);
  EXPECT_TRUE(r.out.empty());
  // A bf16 KV cache on the CPU: bitwise across chunks too, close to the f32 cache, not equal.
  for (const char* chunk : {"0", "2"}) {
    r = run("logits -m " + quote(g) +
            " --tokens 1,2,3,4,5,6,7 --kv-cache-dtype bf16 --device cpu " + "--prefill-chunk " +
            chunk + " --out " + tmp.str() + "/bf16_" + chunk + ".npy");
    ASSERT_EQ(r.code, 0) << r.err;
  }
  const io::NpyArray c = io::npy_read(tmp.str() + "/bf16_0.npy");
  EXPECT_EQ(c.data, io::npy_read(tmp.str() + "/bf16_2.npy").data);
  EXPECT_NE(c.data, a.data);
  ASSERT_EQ(c.data.size(), a.data.size());
  for (size_t i = 0; i < a.data.size(); ++i) EXPECT_NEAR(a.data[i], c.data[i], 0.05f) << i;
  Result bad = run("logits -m " + quote(g) + " --tokens 1,2 --kv-cache-dtype f16 --out " +
                   tmp.str() + "/c.npy");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("--kv-cache-dtype f16"), std::string::npos) << bad.err;
}

// perplexity: the number it prints is exp(mean NLL) of the second half of each window, as
// recomputed here from `basalt logits` of the same window; against itself KL is 0 and top-1
// agreement 100 %; a quantised copy loses a little.
TEST(Cli, PerplexityAndKlAgainstAReference) {
  test::TempDir tmp;
  const std::string text =
      "In the beginning God created the heaven and the earth. And the earth was without form, "
      "and void; and darkness was upon the face of the deep.";
  std::ofstream(tmp.str() + "/t.txt") << text;
  Result r = run("perplexity -f " + tmp.str() + "/t.txt -c 16 --chunks 1 --ref embedded --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tokens"], 7);
  EXPECT_EQ(j["kl_mean"], 0.0);
  EXPECT_EQ(j["top1_agree"], 1.0);

  r = run("tokenize --ids-only --text " + quote(text));
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<int32_t> ids = nlohmann::json::parse(r.out).get<std::vector<int32_t>>();
  ASSERT_GE(ids.size(), 16u);
  ids.resize(16);
  const nlohmann::json cfg =
      nlohmann::json::parse(std::ifstream(test::source_dir() + "/models/default/config.json"));
  if (cfg.contains("bos_token_id") && cfg["bos_token_id"].is_number()) ids[0] = cfg["bos_token_id"];
  std::string csv;
  for (int32_t id : ids) csv += (csv.empty() ? "" : ",") + std::to_string(id);
  r = run("logits --tokens " + csv + " --out " + tmp.str() + "/l.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  const io::NpyArray l = io::npy_read(tmp.str() + "/l.npy");
  const int64_t V = l.shape[1];
  double nll = 0;
  for (int i = 8; i < 15; ++i) {
    const float* row = l.data.data() + i * V;
    double m = row[0], s = 0;
    for (int64_t v = 0; v < V; ++v) m = std::max(m, double(row[v]));
    for (int64_t v = 0; v < V; ++v) s += std::exp(double(row[v]) - m);
    nll += m + std::log(s) - row[ids[size_t(i + 1)]];
  }
  EXPECT_NEAR(j["ppl"].get<double>(), std::exp(nll / 7), 1e-4 * std::exp(nll / 7));

  r = run("quantize --to nvfp4 --out " + tmp.str() + "/q");
  ASSERT_EQ(r.code, 0) << r.err;
  r = run("perplexity -m " + tmp.str() + "/q -f " + tmp.str() +
          "/t.txt -c 16 --ref embedded --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto q = nlohmann::json::parse(r.out);
  EXPECT_GT(q["kl_mean"].get<double>(), 0.0);
  EXPECT_LT(q["kl_mean"].get<double>(), 0.5);

  r = run("perplexity -f " + tmp.str() + "/none.txt");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("none.txt: cannot read"), std::string::npos) << r.err;
}

// `basalt tune` on the CPU writes a recipe for this device that generate picks up (same text:
// the CPU's variants change tiling, not bits), `info --recipes` shows it, and broken recipes are
// reported without stopping anything.
TEST(Cli, TuneWritesARecipeThatEntryPointsRun) {
  test::TempDir dir;
  const std::string env = "BASALT_RECIPE_DIR=" + quote(dir.str());
  Result t = run("tune --device cpu --budget-s 60 -q", env);
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("shapes tuned away from the default"), std::string::npos) << t.out;
  std::vector<std::filesystem::path> files;
  for (const auto& f : std::filesystem::directory_iterator(dir.path)) files.push_back(f.path());
  ASSERT_EQ(files.size(), 1u);
  const auto j = nlohmann::json::parse(std::ifstream(files[0]));
  EXPECT_EQ(j["format"], "basalt-recipe-1");
  EXPECT_EQ(j["device"]["backend"], "cpu");
  ASSERT_GT(j["entries"].size(), 10u);
  for (const auto& e : j["entries"]) {
    EXPECT_EQ(e["op"], "matmul");
    EXPECT_GT(e["default_us"].get<double>(), 0.0);
    EXPECT_LE(e["time_us"].get<double>(), e["default_us"].get<double>());  // never slower
  }
  const std::string gen = "generate -p 'Once upon a time' -n 24 --temp 0 --device cpu";
  Result tuned = run("-v " + gen, env);
  Result plain = run(gen + " --no-autotune", env);
  ASSERT_EQ(tuned.code, 0) << tuned.err;
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_EQ(tuned.out, plain.out);
  EXPECT_NE(tuned.err.find("recipe: " + files[0].string()), std::string::npos) << tuned.err;
  Result info = run("info --recipes --device cpu", env);
  ASSERT_EQ(info.code, 0) << info.err;
  EXPECT_NE(info.out.find("recipe:          " + files[0].string()), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("op matmul"), std::string::npos) << info.out;

  // A corrupt recipe beside it: reported, the good one still runs.
  std::ofstream(dir.str() + "/0_corrupt.json") << "{\"format\": \"basalt-recipe-1\"";
  Result warned = run(gen, env);
  ASSERT_EQ(warned.code, 0) << warned.err;
  EXPECT_EQ(warned.out, plain.out);
  EXPECT_NE(warned.err.find("ignored corrupt recipe"), std::string::npos) << warned.err;
  // Forced, it is an error; a recipe and --no-autotune together are refused.
  Result forced = run(gen + " --recipe " + quote(dir.str() + "/0_corrupt.json"), env);
  EXPECT_NE(forced.code, 0);
  EXPECT_NE(forced.err.find("not JSON"), std::string::npos) << forced.err;
  Result both = run(gen + " --no-autotune --recipe " + quote(files[0].string()), env);
  EXPECT_NE(both.code, 0);
}

// --only-missing and --verify on a small recipe (passes of 1-2 rows and one 8-row chunk: quick
// under qemu too): nothing to tune on a complete recipe; three entries dropped are tuned again
// and merged back; --verify re-measures the non-default choices.
TEST(Cli, TuneOnlyMissingAndVerify) {
  test::TempDir dir;
  const std::string env = "BASALT_RECIPE_DIR=" + quote(dir.str());
  const std::string file = dir.str() + "/small.json";
  const std::string tune =
      "tune --device cpu -q --decode-max 2 --prefill 8 --budget-s 600 --out " + quote(file);
  Result first = run(tune, env);
  ASSERT_EQ(first.code, 0) << first.err;
  const auto j = nlohmann::json::parse(std::ifstream(file));
  const size_t n = j["entries"].size();
  ASSERT_GT(n, 3u);
  Result again = run(tune + " --only-missing", env);
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_NE(again.err.find("lists " + std::to_string(n) + " of the model's " + std::to_string(n) +
                           " op shapes"),
            std::string::npos)
      << again.err;
  EXPECT_NE(again.err.find("0/0 shapes"), std::string::npos) << again.err;
  nlohmann::json cut = j;
  cut["entries"].erase(cut["entries"].begin(), cut["entries"].begin() + 3);
  std::ofstream(file) << cut.dump(1);
  Result missing = run(tune + " --only-missing", env);
  ASSERT_EQ(missing.code, 0) << missing.err;
  EXPECT_NE(missing.err.find("3/3 shapes"), std::string::npos) << missing.err;
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(file))["entries"].size(), n);
  Result no_merge = run(tune + " --only-missing --no-merge", env);
  EXPECT_NE(no_merge.code, 0);

  Result verified = run("tune --device cpu -q --verify --budget-s 600 --out " + quote(file), env);
  ASSERT_EQ(verified.code, 0) << verified.err;
  EXPECT_NE(verified.out.find("of the recipe's " + std::to_string(n) + " entries choose another"),
            std::string::npos)
      << verified.out;
  Result pruned =
      run("tune --device cpu -q --verify --prune --budget-s 600 --out " + quote(file), env);
  ASSERT_EQ(pruned.code, 0) << pruned.err;
  EXPECT_NE(pruned.err.find("--prune: "), std::string::npos) << pruned.err;
  Result lone = run("tune --device cpu -q --prune --out " + quote(file), env);
  EXPECT_NE(lone.code, 0);
  EXPECT_NE(lone.err.find("--prune goes with --verify"), std::string::npos) << lone.err;
  Result none = run("tune --device cpu -q --verify --out " + quote(dir.str() + "/none.json"), env);
  EXPECT_NE(none.code, 0);
  EXPECT_NE(none.err.find("no recipe at"), std::string::npos) << none.err;
}

// Speculative decoding changes the speed, not the text (greedy, or sampled with a seed).
TEST(Cli, GenerateWithNgramSpeculationPrintsThePlainText) {
  const std::string gen = "generate -p 'Once upon a time' -n 120 --temp 0 --device cpu";
  Result plain = run(gen);
  Result spec = run(gen + " --spec ngram --spec-tokens 6");
  ASSERT_EQ(plain.code, 0) << plain.err;
  ASSERT_EQ(spec.code, 0) << spec.err;
  EXPECT_EQ(spec.out, plain.out);
  EXPECT_NE(spec.err.find("speculative (ngram, up to 6 a pass)"), std::string::npos) << spec.err;
  Result b = run("bench --device cpu -p 32 -n 48 -r 1 --json --spec ngram");
  ASSERT_EQ(b.code, 0) << b.err;
  const auto j = nlohmann::json::parse(b.out.substr(b.out.find('{')));
  EXPECT_EQ(j["spec"], "ngram");
  EXPECT_GT(j["spec_verifications"].get<int64_t>(), 0);
  EXPECT_LE(j["spec_accepted"].get<int64_t>(), j["spec_drafted"].get<int64_t>());
  EXPECT_GT(j["decode_tok_s"].get<double>(), 0.0);
  Result bad = run(gen + " --spec medusa");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("unknown drafter"), std::string::npos) << bad.err;
  const std::string sample =
      "generate -p 'Once upon a time' -n 60 --temp 0.7 --seed 5 --device cpu";
  Result sampled = run(sample), sampled_spec = run(sample + " --spec ngram");
  ASSERT_EQ(sampled_spec.code, 0) << sampled_spec.err;
  EXPECT_EQ(sampled_spec.out, sampled.out);
  // The trained draft model with the adaptive length; the MTP head where a checkpoint has one.
  Result draft = run(gen + " --spec draft:" + quote(test::source_dir() + "/models/draft") +
                     " --spec-adaptive --spec-tokens 8");
  ASSERT_EQ(draft.code, 0) << draft.err;
  EXPECT_EQ(draft.out, plain.out);
  EXPECT_NE(draft.err.find("adaptive: k "), std::string::npos) << draft.err;
  // The DSpark drafter trained for the default model.
  Result dspark = run(gen + " --spec dspark:" + quote(test::source_dir() + "/models/dspark"));
  ASSERT_EQ(dspark.code, 0) << dspark.err;
  EXPECT_EQ(dspark.out, plain.out);
  EXPECT_NE(dspark.err.find("speculative (dspark, up to 4 a pass)"), std::string::npos)
      << dspark.err;
  Result no_head = run(gen + " --spec mtp");
  EXPECT_NE(no_head.code, 0);
  EXPECT_NE(no_head.err.find("no MTP head"), std::string::npos) << no_head.err;
  Result mtp = run("bench --device cpu -p 16 -n 40 -r 1 --json --spec mtp -m " +
                   quote(test::source_dir() + "/tests/golden/qwen3_5_mtp"));
  ASSERT_EQ(mtp.code, 0) << mtp.err;
  const auto jm = nlohmann::json::parse(mtp.out.substr(mtp.out.find('{')));
  EXPECT_EQ(jm["spec"], "mtp");
  EXPECT_GT(jm["spec_drafted"].get<int64_t>(), 0);
  // A DSpark drafter (the random test one for qwen3_untied_f16), with a confidence threshold.
  const std::string golden = test::source_dir() + "/tests/golden/";
  Result ds = run(
      "bench --device cpu -p 16 -n 40 -r 1 --json --spec dspark:" + quote(golden + "dspark_qwen3") +
      " --spec-min-confidence 0.2 -m " + quote(golden + "qwen3_untied_f16"));
  ASSERT_EQ(ds.code, 0) << ds.err;
  const auto jd = nlohmann::json::parse(ds.out.substr(ds.out.find('{')));
  EXPECT_GT(jd["spec_drafted"].get<int64_t>(), 0);
  EXPECT_NE(ds.err.find("speculative (dspark:"), std::string::npos) << ds.err;
  // The cost of verification passes (k drafts + 1 rows), and what full acceptance would give.
  Result vr = run("bench --device cpu -p 16 -n 8 -r 1 --json --verify-rows 3,5");
  ASSERT_EQ(vr.code, 0) << vr.err;
  const auto jv = nlohmann::json::parse(vr.out.substr(vr.out.find('{')));
  for (const char* T : {"1", "3", "5"}) {
    EXPECT_GT(jv["verify_pass_ms"][T].get<double>(), 0.0) << T;
    EXPECT_GT(jv["verify_full_acceptance_speedup"][T].get<double>(), 0.0) << T;
  }
  EXPECT_EQ(jv["verify_full_acceptance_speedup"]["1"].get<double>(), 1.0);
  EXPECT_NE(run("bench --device cpu -p 8 -n 8 -r 1 --verify-rows 3 --spec ngram").code, 0);
  // Decode steps of several sequences together (a serving batch).
  Result bt = run("bench --device cpu -p 16 -n 8 -r 1 --json --batch 3");
  ASSERT_EQ(bt.code, 0) << bt.err;
  const auto jb = nlohmann::json::parse(bt.out.substr(bt.out.find('{')));
  EXPECT_EQ(jb["batch"].get<int64_t>(), 3);
  EXPECT_GT(jb["decode_step_ms"].get<double>(), 0.0);
  EXPECT_NEAR(jb["decode_tok_s"].get<double>(), 3 * 1e3 / jb["decode_step_ms"].get<double>(),
              1e-6 * jb["decode_tok_s"].get<double>());
  // The weights are read once a step, so a token of three sequences costs fewer bytes than one
  // sequence's at the same context.
  Result b1 = run("bench --device cpu -p 16 -n 8 -r 1 --json");
  ASSERT_EQ(b1.code, 0) << b1.err;
  const auto j1 = nlohmann::json::parse(b1.out.substr(b1.out.find('{')));
  EXPECT_EQ(j1["batch"].get<int64_t>(), 1);
  EXPECT_LT(jb["bytes_per_token"].get<double>(), j1["bytes_per_token"].get<double>());
  // Every run's figures beside the medians (the first run pays one-time costs).
  Result b3 = run("bench --device cpu -p 16 -n 8 -r 3 --json");
  ASSERT_EQ(b3.code, 0) << b3.err;
  const auto j3 = nlohmann::json::parse(b3.out.substr(b3.out.find('{')));
  auto ttfts = j3["ttft_ms_each"].get<std::vector<double>>();
  ASSERT_EQ(ttfts.size(), 3u);
  auto rates = j3["decode_tok_s_each"].get<std::vector<double>>();
  ASSERT_EQ(rates.size(), 3u);
  std::sort(ttfts.begin(), ttfts.end());
  std::sort(rates.begin(), rates.end());
  EXPECT_DOUBLE_EQ(ttfts[1], j3["ttft_ms"].get<double>());
  EXPECT_DOUBLE_EQ(rates[1], j3["decode_tok_s"].get<double>());
  EXPECT_NE(run("bench --device cpu -p 8 -n 8 -r 1 --batch 2 --spec ngram").code, 0);
  Result not_a_model =
      run("bench --device cpu -p 8 -n 8 -r 1 -m " + quote(golden + "dspark_qwen3"));
  EXPECT_NE(not_a_model.code, 0);
  EXPECT_NE(not_a_model.err.find("--spec dspark:PATH"), std::string::npos) << not_a_model.err;
}

TEST(Cli, InfoDescribesModel) {
  Result r = run("info -m " + quote(test::source_dir() + "/tests/golden/qwen3_untied_f16"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Qwen3ForCausalLM"), std::string::npos);
  EXPECT_NE(r.out.find("F16"), std::string::npos);
  EXPECT_NE(r.out.find("context length:"), std::string::npos);
}

// synth --layers keeps the first N layers of a preset (hybrids keep their layer pattern).
TEST(Cli, SynthLayersKeepsTheFirstLayers) {
  test::TempDir tmp;
  const std::string d = tmp.str() + "/m";
  Result r = run("synth --preset tiny-qwen3.5-moe --layers 3 --out " + quote(d));
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream f(d + "/config.json");
  const auto c = nlohmann::json::parse(f);
  EXPECT_EQ(c["num_hidden_layers"], 3);
  EXPECT_EQ(c["layer_types"],
            nlohmann::json({"linear_attention", "linear_attention", "linear_attention"}));
  r = run("info -m " + quote(d));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Qwen3_5MoeForCausalLM"), std::string::npos) << r.out;
  r = run("synth --preset tiny-qwen3.5-moe --layers 5 --out " + quote(d));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--layers must be between 1 and 4"), std::string::npos) << r.err;
}

// Each bad input: exit code 1 (not a signal), one "error: [component] ..." line naming the
// file and the problem.
void expect_clean_error(const Result& r, const std::string& needle) {
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.err.rfind("error: [", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
}

TEST(Cli, BadInputsGetCleanErrors) {
  test::TempDir tmp;
  const std::string d = tmp.str();
  expect_clean_error(run("info -m " + d + "/nope"), "no such file or directory");
  // Truncated safetensors: a header length larger than the file.
  std::filesystem::create_directories(d + "/m");
  std::filesystem::copy(test::source_dir() + "/tests/golden/qwen3_tied/config.json", d + "/m");
  {
    std::ofstream f(d + "/m/model.safetensors", std::ios::binary);
    const uint64_t n = 1000000;
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << "{}";
  }
  expect_clean_error(run("generate -m " + d + "/m -p hi"), "model.safetensors");
  // A GGUF cut in half.
  {
    std::ifstream in(test::source_dir() + "/tests/golden/gguf/qwen3_tied.f16.gguf",
                     std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream(d + "/cut.gguf", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  expect_clean_error(run("logits -m " + d + "/cut.gguf --tokens 1,2 --out " + d + "/x.npy"),
                     "cut.gguf");
  // Malformed config.json.
  std::filesystem::create_directories(d + "/badcfg");
  std::ofstream(d + "/badcfg/config.json") << "{\"hidden_size\": 64,,}";
  expect_clean_error(run("info -m " + d + "/badcfg"), "config.json");
  // tokenizer.json with an unknown model type.
  std::ofstream(d + "/tok.json") << R"({"model": {"type": "Unigram", "vocab": []}})";
  expect_clean_error(run("tokenize -m " + d + "/tok.json --text hi"), "Unigram");
  // Bad token ids.
  expect_clean_error(run("logits -m " + quote(test::source_dir() + "/tests/golden/qwen3_tied") +
                         " --tokens 1,x --out " + d + "/y.npy"),
                     "token ids must be integers");
  expect_clean_error(run("logits -m " + quote(test::source_dir() + "/tests/golden/qwen3_tied") +
                         " --tokens 1,99999 --out " + d + "/y.npy"),
                     "out of range");
}

TEST(Cli, InvalidUtf8PromptIsAnError) {
  BASALT_REQUIRE_FIXTURE(fx, "qwen3-tokenizer/tokenizer.json");
  expect_clean_error(run("tokenize -m " + quote(fx) + " --text \"$(printf 'ab\\377\\376cd')\""),
                     "UTF-8");
}

}  // namespace
}  // namespace basalt
