// basalt bench: prefill and decode speed on synthetic token ids (no tokenizer needed), as a
// fraction of this machine's rooflines measured in the same run: the copy bandwidth (decode
// streams the weights) and the matrix rate of the backend's own f32 matmul kernel at a
// cache-friendly shape (prefill). The CUDA backend measures copy and cuBLAS GEMM instead.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "backends/cpu/cpu_backend.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/generator.h"
#ifdef BASALT_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace basalt::cli {
namespace {

struct BenchArgs {
  DeviceFlags dev;  // --device, --kv-cache-dtype, --fast-prefill, --no-autotune, --recipe
  std::string model;
  std::vector<int64_t> prompts = {128};
  int64_t n = 32;
  int repeats = 3;
  int threads = 0;
  int64_t prefill_chunk = 0;
  bool json = false;
  std::string spec;  // --spec: decode speculatively with this drafter
  int64_t spec_tokens = 4;
  float spec_min_confidence = 0.0f;
  bool spec_adaptive = false;
  // --verify-rows: time passes of T rows with every row's argmax (a verification of T - 1
  // drafts) at the context after the decode, rolled back after each; a pass of 1 row is timed
  // too, the unit of the speed-up T · c(1) / c(T) every draft standing would give.
  std::vector<int64_t> verify_rows;
  // --batch: B sequences, each prefilled alone, then decoding together: n passes of B rows
  // (one token of each sequence, each over its own KV history: a serving decode step).
  int64_t batch = 1;
};

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Bytes read + written per second copying 256 MiB with the pool's threads (median of 5).
double measure_copy_bandwidth(int threads) {
  const size_t n = size_t(256) << 20;
  std::vector<uint8_t> src(n, 1), dst(n, 0);
  ThreadPool pool(threads);
  std::vector<double> t;
  for (int r = 0; r < 5; ++r) {
    const double t0 = now_s();
    pool.parallel_ranges(int64_t(n), 1 << 20, [&](int64_t b, int64_t e) {
      std::memcpy(dst.data() + b, src.data() + b, size_t(e - b));
    });
    t.push_back(now_s() - t0);
  }
  return 2.0 * double(n) / median(t);
}

// FLOP/s of the backend's f32 matmul at T=128, N=K=1024 (weights in L2/L3; median of 5).
double measure_matmul_rate(Backend& be) {
  const int64_t T = 128, N = 1024, K = 1024;
  std::mt19937 rng(1);
  std::normal_distribution<float> d;
  std::vector<float> x(size_t(T * K)), w(size_t(N * K)), y(size_t(T * N));
  for (auto& v : x) v = d(rng);
  for (auto& v : w) v = d(rng);
  const WeightRef wr{DType::F32, N, K, w.data()};
  be.matmul(x.data(), T, wr, y.data());
  std::vector<double> t;
  for (int r = 0; r < 5; ++r) {
    const double t0 = now_s();
    be.matmul(x.data(), T, wr, y.data());
    t.push_back(now_s() - t0);
  }
  return 2.0 * double(T * N * K) / median(t);
}

int64_t peak_rss_bytes() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return int64_t(ru.ru_maxrss) * 1024;
}

int run_bench(const BenchArgs& a) {
  auto model = model_load(a.model);
  std::string recipe;
  auto be = make_backend(a.dev, a.threads, &recipe);
  const ModelConfig& c = model->config();
  struct Row {
    int64_t P;
    // Every run's times, in order: per sequence (prefill), per step (decode) × n. The medians
    // are reported; the first run pays one-time costs, which the median of 1 or 2 runs carries.
    std::vector<double> pre, dec;
    std::vector<double> verify_s;  // median per --verify-rows entry
  };
  const int64_t max_rows =
      a.verify_rows.empty() ? 0 : *std::max_element(a.verify_rows.begin(), a.verify_rows.end());
  if (!a.verify_rows.empty() && !a.spec.empty())
    fail("[bench] --verify-rows times plain passes: leave out --spec");
  const int64_t B = a.batch;
  if (B > 1 && (!a.spec.empty() || !a.verify_rows.empty()))
    fail("[bench] --batch times plain decode steps: leave out --spec and --verify-rows");
  std::vector<int64_t> vrows = a.verify_rows;
  for (int64_t T : vrows)
    if (T < 1 || T > 256) fail("[bench] --verify-rows {}: 1 … 256 rows", T);
  if (!vrows.empty() && std::find(vrows.begin(), vrows.end(), 1) == vrows.end())
    vrows.insert(vrows.begin(), 1);
  std::vector<Row> rows;
  GenerateStats spec;  // --spec: the last run's counts
  for (int64_t P : a.prompts) {
    if (P <= 0 || P + a.n > c.max_context)
      fail("[bench] prompt {} + {} decode tokens exceed the context {}", P, a.n, c.max_context);
    std::vector<int32_t> ids(static_cast<size_t>(P));
    for (int64_t i = 0; i < P; ++i) ids[size_t(i)] = int32_t((i * 7919 + 17) % c.vocab);
    std::vector<double> pre, dec;
    if (!a.spec.empty()) {  // decode through the Generator's speculative loop
      auto drafter =
          make_drafter(a.spec, *be, *model, P + a.n + a.spec_tokens + 1, a.spec_min_confidence);
      GenerateOptions o;
      o.max_new_tokens = a.n;
      o.ignore_eos = true;
      o.prefill_chunk = a.prefill_chunk;
      o.drafter = drafter.get();
      o.spec_tokens = a.spec_tokens;
      o.spec_adaptive = a.spec_adaptive;
      for (int r = 0; r < a.repeats; ++r) {
        const GenerateStats st =
            Generator(*model, *be).generate(ids, o, [](int32_t) { return true; });
        pre.push_back(st.prefill_s);
        dec.push_back(st.decode_s);
        spec = st;
      }
      rows.push_back({P, pre, dec, {}});
      continue;
    }
    if (B > 1) {
      // Each sequence its own ids (no prefix shared through the cache), prefilled alone; then
      // n greedy steps of one token of every sequence in one pass.
      // Whole blocks for each sequence, in the pool's own block (64 tokens on CUDA), so a
      // sequence may need more than P + n rounded to 16.
      const int64_t block = Model::kv_block_size(*be);
      const int64_t per_seq = (P + a.n + block - 1) / block * block;
      auto pool = model->new_kv_pool(*be, B * per_seq, block, B);
      std::vector<std::vector<int32_t>> seq_ids(static_cast<size_t>(B), ids);
      for (int64_t b = 1; b < B; ++b)
        for (int64_t i = 0; i < P; ++i)
          seq_ids[size_t(b)][size_t(i)] = int32_t((i * 7919 + 17 + b * 104729) % c.vocab);
      std::vector<float> logits(static_cast<size_t>(B * c.vocab));
      for (int r = 0; r < a.repeats; ++r) {
        std::vector<KvSequence> seqs(static_cast<size_t>(B));
        std::vector<int32_t> next(static_cast<size_t>(B));
        const int64_t chunk = a.prefill_chunk > 0 ? a.prefill_chunk : P;
        double t0 = now_s();
        for (int64_t b = 0; b < B; ++b) {
          const std::span<const int32_t> p = seq_ids[size_t(b)];
          for (int64_t i = 0; i < P; i += chunk)
            model->forward(*be, *pool, seqs[size_t(b)],
                           p.subspan(size_t(i), size_t(std::min(chunk, P - i))), logits.data(),
                           false, &next[size_t(b)]);
        }
        pre.push_back((now_s() - t0) / double(B));
        std::vector<Model::BatchItem> items(static_cast<size_t>(B));
        std::vector<int32_t> in(static_cast<size_t>(B));
        t0 = now_s();
        for (int64_t i = 0; i < a.n; ++i) {
          in = next;
          for (int64_t b = 0; b < B; ++b) {
            KvSequence& s = seqs[size_t(b)];
            if (!pool->reserve(s, 1)) fail("[bench] --batch {}: the KV pool is full", B);
            items[size_t(b)] = {&s, std::span<const int32_t>(&in[size_t(b)], 1)};
          }
          model->forward(*be, *pool, items, logits.data(), next.data());
        }
        dec.push_back(now_s() - t0);
        for (KvSequence& s : seqs) pool->release(s);
      }
      rows.push_back({P, pre, dec, {}});
      continue;
    }
    // One cache for the repeats, as llama-bench keeps its context: the first repeat touches
    // its pages (page faults that serving, which keeps its pool, does not pay per request).
    auto pool = model->new_kv_pool(*be, P + a.n + max_rows);
    std::vector<std::vector<double>> ver(vrows.size());
    for (int r = 0; r < a.repeats; ++r) {
      KvSequence seq;
      std::vector<float> logits(static_cast<size_t>(c.vocab));
      double t0 = now_s();
      const int64_t chunk = a.prefill_chunk > 0 ? a.prefill_chunk : P;
      for (int64_t i = 0; i < P; i += chunk)
        model->forward(*be, *pool, seq,
                       std::span(ids).subspan(size_t(i), size_t(std::min(chunk, P - i))),
                       logits.data(), false);
      pre.push_back(now_s() - t0);
      t0 = now_s();
      // Greedy decode; the argmax is taken where the logits are (on CUDA only ids come back).
      int32_t next = argmax(logits);
      for (int64_t i = 0; i < a.n; ++i) {
        const int32_t tok[1] = {next};
        model->forward(*be, *pool, seq, tok, logits.data(), false, &next);
      }
      dec.push_back(now_s() - t0);
      // Verification passes: T rows, all their argmaxes, then back to the decode's end (the
      // KV rollback speculative decoding does; hybrid models' state is not restored, which
      // changes the values computed, not the work).
      std::vector<int32_t> in(static_cast<size_t>(max_rows)), out(static_cast<size_t>(max_rows));
      std::vector<float> all(static_cast<size_t>(max_rows * c.vocab));
      for (int64_t i = 0; i < max_rows; ++i) in[size_t(i)] = int32_t((i * 31 + next) % c.vocab);
      for (size_t v = 0; v < vrows.size(); ++v)
        for (int rep = 0; rep < 5; ++rep) {
          const int64_t T = vrows[v], at = seq.length;
          t0 = now_s();
          model->forward(*be, *pool, seq, std::span(in).first(size_t(T)), all.data(), true,
                         out.data());
          ver[v].push_back(now_s() - t0);
          pool->truncate(seq, at);
        }
      pool->release(seq);
    }
    Row row{P, pre, dec, {}};
    for (auto& v : ver) row.verify_s.push_back(median(v));
    rows.push_back(row);
  }
  // The model's peak memory is read before the roofline probes allocate their buffers.
  // Rooflines: host backends, the copy bandwidth of the pool's threads and the f32 matmul kernel
  // itself; CUDA, a 1 GiB device copy and cuBLAS bf16 GEMM at the prefill's largest shape.
  int64_t peak = peak_rss_bytes();
  double copy_bw = 0, mm_rate = 0;
  const char* mm_what = "f32 matmul kernel";
  if (be->host_memory()) {
    copy_bw = measure_copy_bandwidth(a.threads);
    mm_rate = measure_matmul_rate(*be);
  } else {
    peak = int64_t(be->peak_bytes());
#ifdef BASALT_HAVE_CUDA
    copy_bw = cuda::measure_copy_bandwidth();
    const int64_t M = *std::max_element(a.prompts.begin(), a.prompts.end());
    // (MoE models without a dense MLP: a GEMM three times as wide as the model)
    const int64_t N = c.intermediate > 0 ? c.intermediate : 3 * c.hidden;
    mm_rate = cuda::measure_cublas_gemm(std::max<int64_t>(M, 256), N, c.hidden);
    mm_what = "cuBLAS bf16 GEMM";
    if (mm_rate == 0) fail("[bench] libcublas could not be loaded for the GEMM roofline");
#endif
  }
  std::fprintf(stderr, "backend: %s; copy bandwidth %.1f GB/s; %s %.1f GFLOP/s\n%s\n",
               be->name().c_str(), copy_bw / 1e9, mm_what, mm_rate / 1e9, recipe.c_str());
  if (!a.json)
    std::printf("%8s %8s %14s %10s %7s %14s %10s %7s\n", "prompt", "decode", "prefill tok/s",
                "ttft ms", "of mm", "decode tok/s", "MB/token", "of bw");
  for (const Row& row : rows) {
    const int64_t P = row.P;
    const double pre_s = median(row.pre), dec_s = median(row.dec);
    // Output tokens a second of decode runs taking s.
    auto decode_rate = [&](double s) { return a.n > 0 ? double(B * a.n) / s : 0.0; };
    const double pre_tps = double(P) / pre_s, dec_tps = decode_rate(dec_s);
    // Decode reads the weights and the KV at the mean context of the decode steps; a step of B
    // sequences reads the weights once and B histories (bytes below: a step's, per token).
    const size_t kv_row = be->kv_row_bytes(model->config().head_dim);
    const double kv_bytes =
        double(model->decode_bytes(P + a.n / 2, kv_row) - model->decode_bytes(0, kv_row));
    const double bytes =
        (double(model->decode_bytes(0, kv_row)) + double(B) * kv_bytes) / double(B);
    double prefill_flops = 0;
    for (int64_t p = 0; p < P; ++p) prefill_flops += model->token_flops(p);
    const double bw_frac = bytes * dec_tps / copy_bw;
    // The scratch plan of the prefill pass (src/memory): peak, lower bound, one buffer each.
    const int64_t chunk = a.prefill_chunk > 0 ? std::min(a.prefill_chunk, P) : P;
    const memory::Program prog = model->scratch_program(*be, chunk, 1);
    const memory::Plan plan = memory::plan(prog.values());
    const double mm_frac = prefill_flops / pre_s / mm_rate;
    const double one_row =
        row.verify_s.empty()
            ? 0.0
            : row.verify_s[size_t(std::find(vrows.begin(), vrows.end(), 1) - vrows.begin())];
    if (a.json) {
      nlohmann::json j = {{"backend", be->name()},
                          {"recipe_shapes", be->kernel_choices().size()},
                          {"context", P + a.n},
                          {"prompt_tokens", P},
                          {"decode_tokens", a.n},
                          {"batch", B},
                          {"decode_step_ms", a.n > 0 ? dec_s / double(a.n) * 1e3 : 0.0},
                          {"prefill_tok_s", pre_tps},
                          {"ttft_ms", pre_s * 1e3},
                          {"decode_tok_s", dec_tps},
                          {"bytes_per_token", bytes},
                          {"copy_bandwidth_bytes_s", copy_bw},
                          {"bandwidth_fraction", bw_frac},
                          {"matmul_rate_flop_s", mm_rate},
                          {"matmul_fraction", mm_frac},
                          {"peak_bytes", peak},
                          {"scratch_peak_bytes", plan.peak},
                          {"scratch_lower_bound_bytes", plan.lower_bound},
                          {"scratch_naive_bytes", plan.naive_sum},
                          {"repeats", a.repeats}};
      for (size_t r = 0; r < row.pre.size(); ++r) {
        j["ttft_ms_each"].push_back(row.pre[r] * 1e3);
        j["decode_tok_s_each"].push_back(decode_rate(row.dec[r]));
      }
      if (!a.spec.empty()) {
        j["spec"] = a.spec;
        j["spec_verifications"] = spec.verify_passes;
        j["spec_drafted"] = spec.drafted;
        j["spec_accepted"] = spec.accepted;
        j["spec_tokens_per_pass"] =
            spec.verify_passes ? double(spec.generated) / double(spec.verify_passes) : 0.0;
        j["spec_draft_s"] = spec.draft_s;
        j["spec_verify_s"] = spec.decode_s - spec.draft_s;
        if (a.spec_adaptive) j["spec_policy"] = spec.spec_policy;
      }
      for (size_t v = 0; v < row.verify_s.size(); ++v) {
        const std::string T = std::to_string(vrows[v]);
        j["verify_pass_ms"][T] = row.verify_s[v] * 1e3;
        // T tokens a pass if every draft stood (drafting free), against 1 a one-row pass.
        j["verify_full_acceptance_speedup"][T] = double(vrows[v]) * one_row / row.verify_s[v];
      }
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("%8lld %8lld %14.1f %10.1f %6.0f%% %14.2f %10.2f %6.0f%%\n", (long long)P,
                  (long long)a.n, pre_tps, pre_s * 1e3, 100 * mm_frac, dec_tps, bytes / 1e6,
                  100 * bw_frac);
      std::fprintf(stderr,
                   "prefill pass of %lld rows, scratch: %.1f MiB planned (lower bound %.1f, "
                   "one buffer each %.1f)\n",
                   (long long)chunk, double(plan.peak) / (1 << 20),
                   double(plan.lower_bound) / (1 << 20), double(plan.naive_sum) / (1 << 20));
      if (B > 1)
        std::fprintf(stderr,
                     "decode of %lld sequences together: %.3f ms a step of %lld rows, %.2f "
                     "tok/s each; prefill (each alone) %.1f ms a sequence\n",
                     (long long)B, a.n > 0 ? dec_s / double(a.n) * 1e3 : 0.0, (long long)B,
                     dec_tps / double(B), pre_s * 1e3);
      for (size_t v = 0; v < row.verify_s.size(); ++v)
        std::fprintf(stderr,
                     "verification pass of %lld rows at context %lld: %.3f ms (%.2fx a one-row "
                     "pass's tokens/s if every draft stood)\n",
                     (long long)vrows[v], (long long)(P + a.n), row.verify_s[v] * 1e3,
                     double(vrows[v]) * one_row / row.verify_s[v]);
    }
  }
  if (!a.spec.empty())
    std::fprintf(stderr,
                 "speculative (%s, up to %lld a pass; last run): %lld passes, %lld of %lld "
                 "drafts accepted, %.2f tokens a pass; drafting %.1f ms, verifying %.1f ms\n",
                 a.spec.c_str(), (long long)a.spec_tokens, (long long)spec.verify_passes,
                 (long long)spec.accepted, (long long)spec.drafted,
                 spec.verify_passes ? double(spec.generated) / double(spec.verify_passes) : 0.0,
                 spec.draft_s * 1e3, (spec.decode_s - spec.draft_s) * 1e3);
  if (!spec.spec_policy.empty()) std::fprintf(stderr, "adaptive: %s\n", spec.spec_policy.c_str());
  std::fprintf(stderr, "medians of %d runs; peak %s memory %.1f MiB\n", a.repeats,
               be->host_memory() ? "resident" : "device", double(peak) / (1 << 20));
  return 0;
}

}  // namespace

Runner add_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* sc = app.add_subcommand("bench", "Measure prefill and decode speed");
  sc->add_option("-m,--model", a->model, "HF model directory or .gguf (default: embedded)");
  sc->add_option("-p,--prompt-tokens", a->prompts, "Prompt lengths, e.g. -p 128,512")
      ->delimiter(',');
  sc->add_option("-n,--decode-tokens", a->n, "Decode steps per run");
  sc->add_option("-r,--repeats", a->repeats,
                 "Runs per configuration (median reported; the first run after loading pays "
                 "one-time costs, so 1 or 2 runs report them: use 3 or more)")
      ->check(CLI::Range(1, 1000));
  sc->add_option("-t,--threads", a->threads, "CPU threads (default: all)");
  add_device_option(sc, a->dev);
  add_spec_options(sc, a->spec, a->spec_tokens,
                   "Decode speculatively (ngram | draft:PATH | mtp | dspark:PATH) and report "
                   "acceptance and the drafting / verifying time",
                   &a->spec_adaptive, &a->spec_min_confidence);
  sc->add_option("--prefill-chunk", a->prefill_chunk, "Prompt tokens per pass (0 = all)");
  sc->add_option("--verify-rows", a->verify_rows,
                 "Also time verification passes of these row counts (k drafts + 1), e.g. "
                 "1,2,3,5,9, at the context after the decode, and the speed-up if every draft "
                 "stood")
      ->delimiter(',');
  sc->add_option("--batch", a->batch,
                 "Sequences decoding together (each its own prompt and KV history, prefilled "
                 "alone): decode tok/s counts every sequence's tokens, as a serving decode step "
                 "of this many streams")
      ->check(CLI::Range(1, 1024));
  sc->add_flag("--json", a->json, "One JSON object per configuration");
  return [a] { return run_bench(*a); };
}

}  // namespace basalt::cli
