// Timings of the CUDA kernels on the device, against the copy bandwidth measured in the same run.
// CUDA events around each launch; warm-up, then the median of many; weights rotate among
// copies whose total exceeds the L2 (60 MB on an H200), so decode timings read device memory.
//   bench_cuda_kernels            (prints a table; exits 0 with SKIP when no GPU)
//   bench_cuda_kernels matmul     (only the bf16 tilings; BENCH_T=512 picks one row count)
//   bench_cuda_kernels hybrid     (only the Gated DeltaNet and MoE kernels)
//   bench_cuda_kernels decode     (segment-length sweep of the bf16 matmul)
//   bench_cuda_kernels attn-batch (a serving decode step's attention, 16 and 64 sequences:
//                                  Auto and each Split kernel)
//   bench_cuda_kernels scaled     (NVFP4 / FP8 matmuls against bf16 at llama-3.1-8b's shapes;
//                                  BENCH_SHAPE=gate/up BENCH_FMT=FP8 BENCH_T=1 BENCH_CFG=0 pick
//                                  one)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backends/cuda/cuda_device.h"
#include "backends/cuda/kernels.h"

namespace bc = basalt::cuda;

#define CK(expr)                                                                               \
  do {                                                                                         \
    const cudaError_t e_ = (expr);                                                             \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "CUDA error %s at line %d: %s\n", cudaGetErrorString(e_), __LINE__, \
                   #expr);                                                                     \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

namespace {

// Median milliseconds of fn(i) over reps launches after warm-up launches.
template <typename F>
double time_ms(F fn, int warm, int reps) {
  for (int i = 0; i < warm; ++i) fn(i);
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<double> ts;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(a));
    fn(warm + i);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    ts.push_back(ms);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

// Random bf16 in [-1, 1) on the device, from a host pattern (never zeros).
void fill_bf16(uint16_t* d, size_t n) {
  std::vector<uint16_t> h(std::min<size_t>(n, 1 << 24));
  std::mt19937 rng(7);
  for (auto& v : h) v = uint16_t(0x3c00 + (rng() % 0x300)) | uint16_t((rng() & 1) << 15);
  for (size_t off = 0; off < n; off += h.size())
    CK(cudaMemcpy(d + off, h.data(), std::min(h.size(), n - off) * 2, cudaMemcpyHostToDevice));
}

// Timed repetitions, or BENCH_REPS (e.g. 1 under ncu).
int reps(int n) {
  const char* e = std::getenv("BENCH_REPS");
  return e ? std::max(1, std::atoi(e)) : n;
}

// Gated DeltaNet of one layer at Qwen3-Next's shape (Hk 16, Hv 32, Dk = Dv = 128, K 4):
// `seqs` sequences of `rows` rows each (decode: rows 1; prefill: one sequence).
void bench_gdn(int64_t seqs, int64_t rows) {
  const int64_t Hk = 16, Hv = 32, Dk = 128, Dv = 128, K = 4, T = seqs * rows;
  const int64_t C = 2 * Hk * Dk + Hv * Dv;
  float *qkv, *b, *a, *w, *A, *dt, *conv, *rec, *out, *u;
  int32_t *slots, *pos;
  CK(cudaMalloc(&qkv, T * C * 4));
  CK(cudaMalloc(&b, T * Hv * 4));
  CK(cudaMalloc(&a, T * Hv * 4));
  CK(cudaMalloc(&w, C * K * 4));
  CK(cudaMalloc(&A, Hv * 4));
  CK(cudaMalloc(&dt, Hv * 4));
  CK(cudaMalloc(&conv, seqs * C * (K - 1) * 4));
  CK(cudaMalloc(&rec, seqs * Hv * Dk * Dv * 4));
  CK(cudaMalloc(&out, T * Hv * Dv * 4));
  CK(cudaMalloc(&u, bc::gdn_scratch_floats(T, Hk, Hv, Dk, Dv) * 4));
  CK(cudaMalloc(&slots, T * 4));
  CK(cudaMalloc(&pos, T * 4));
  auto fill = [](float* p, int64_t n) {  // small finite values (0x3c3c3c3c ≈ 0.0115)
    CK(cudaMemset(p, 0x3c, size_t(n) * 4));
  };
  fill(qkv, T * C), fill(b, T * Hv), fill(a, T * Hv), fill(w, C * K), fill(A, Hv), fill(dt, Hv);
  fill(conv, seqs * C * (K - 1)), fill(rec, seqs * Hv * Dk * Dv);
  std::vector<int32_t> hs(T), hp(T);
  for (int64_t t = 0; t < T; ++t) hs[t] = int32_t(t / rows), hp[t] = int32_t(100 + t % rows);
  CK(cudaMemcpy(slots, hs.data(), T * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(pos, hp.data(), T * 4, cudaMemcpyHostToDevice));
  bc::GdnKernelArgs g;
  g.qkv = qkv, g.b = b, g.a = a, g.conv_w = w, g.A_log = A, g.dt_bias = dt, g.conv_state = conv;
  g.rec_state = rec, g.out = out, g.slots = slots, g.pos = pos, g.u = u;
  g.T = T, g.Hk = Hk, g.Hv = Hv, g.Dk = Dk, g.Dv = Dv, g.K = K;
  const double ms = time_ms([&](int) { CK(bc::gdn(g, nullptr)); }, 3, reps(T >= 512 ? 10 : 50));
  const double state_bytes = 2.0 * seqs * Hv * Dk * Dv * 4;  // read + write
  std::printf("%-10s %6lld %6lld %6lld %-10s %10.2f %9.0f %14.2f\n", "gdn", (long long)T,
              (long long)seqs, (long long)rows, "recurrent", ms * 1e3,
              state_bytes / (ms * 1e-3) / 1e9, ms * 1e3 / double(rows));
  for (void* p : {(void*)qkv, (void*)b, (void*)a, (void*)w, (void*)A, (void*)dt, (void*)conv,
                  (void*)rec, (void*)out, (void*)u, (void*)slots, (void*)pos})
    CK(cudaFree(p));
}

// The routed experts of one layer at Qwen3-30B-A3B's shape (E 2048, F 768, 128 experts, top 8).
void bench_moe(int64_t T) {
  const int64_t E = 2048, F = 768, NE = 128, KK = 8;
  const size_t per = size_t(F) * E;  // elements of one matrix
  uint16_t *wts, *x;
  float *router, *out;
  CK(cudaMalloc(&wts, per * 3 * NE * 2));
  fill_bf16(wts, per * 3 * NE);
  std::vector<const uint16_t*> ptrs(3 * NE);
  for (int64_t i = 0; i < 3 * NE; ++i) ptrs[i] = wts + per * i;
  const uint16_t** tab;
  CK(cudaMalloc(&tab, 3 * NE * sizeof(void*)));
  CK(cudaMemcpy(tab, ptrs.data(), 3 * NE * sizeof(void*), cudaMemcpyHostToDevice));
  CK(cudaMalloc(&x, T * E * 2));
  fill_bf16(x, T * E);
  CK(cudaMalloc(&router, T * NE * 4));
  CK(cudaMalloc(&out, T * E * 4));
  std::vector<float> hr(T * NE);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> d(-2, 2);
  for (auto& v : hr) v = d(rng);
  CK(cudaMemcpy(router, hr.data(), hr.size() * 4, cudaMemcpyHostToDevice));
  const size_t wsb = bc::moe_workspace_bytes(T, E, F, NE, KK);
  void* ws;
  CK(cudaMalloc(&ws, wsb));
  // Experts touched (their weights are the bytes a pass must read).
  int32_t* ids;
  float* wr;
  CK(cudaMalloc(&ids, T * KK * 4));
  CK(cudaMalloc(&wr, T * KK * 4));
  CK(bc::moe_route(router, T, NE, KK, true, ids, wr, nullptr));
  std::vector<int32_t> hid(T * KK);
  CK(cudaMemcpy(hid.data(), ids, hid.size() * 4, cudaMemcpyDeviceToHost));
  const std::set<int32_t> used(hid.begin(), hid.end());
  bc::MoeKernelArgs m;
  m.x = x, m.router = router, m.out = out, m.T = T, m.E = E, m.F = F, m.n_experts = NE;
  m.top_k = KK, m.norm_topk = true, m.gate = tab, m.up = tab + NE, m.down = tab + 2 * NE;
  m.workspace = ws, m.workspace_bytes = wsb;
  const double bytes = double(used.size()) * 3 * per * 2;
  const double flops = 2.0 * T * KK * 3 * double(per);
  for (auto kern :
       {bc::MatmulKernel::Auto, bc::MatmulKernel::Rows16x32, bc::MatmulKernel::Rows16x32Deep}) {
    m.kernel = kern;
    const double ms = time_ms([&](int) { CK(bc::moe(m, nullptr)); }, 3, reps(T >= 512 ? 10 : 50));
    std::printf("%-10s %6lld %6zu %6s %-10s %10.2f %9.0f %14.1f\n", "moe", (long long)T,
                used.size(), "-",
                kern == bc::MatmulKernel::Auto        ? "auto"
                : kern == bc::MatmulKernel::Rows16x32 ? "R16x32"
                                                      : "R16x32Deep",
                ms * 1e3, bytes / (ms * 1e-3) / 1e9, flops / (ms * 1e-3) / 1e12);
  }
  for (void* p :
       {(void*)wts, (void*)tab, (void*)x, (void*)router, (void*)out, ws, (void*)ids, (void*)wr})
    CK(cudaFree(p));
}

void bench_hybrid() {
  std::printf("\n%-10s %6s %6s %6s %-10s %10s %9s %14s\n", "op", "T", "seqs", "rows", "kernel",
              "median_us", "state GB/s", "us per row");
  bench_gdn(1, 1);
  bench_gdn(64, 1);
  bench_gdn(1, 64);
  bench_gdn(1, 512);
  std::printf("\n%-10s %6s %6s %6s %-10s %10s %9s %14s\n", "op", "T", "experts", "-", "kernel",
              "median_us", "GB/s", "TFLOP/s");
  for (int64_t T : {1, 8, 64, 512, 2048}) bench_moe(T);
}

// Copy bandwidth: 1 GiB device to device, bytes read + written per second (GB/s).
double measure_copy_gbs() {
  const size_t copy_bytes = size_t(1) << 30;
  void *ca, *cb;
  CK(cudaMalloc(&ca, copy_bytes));
  CK(cudaMalloc(&cb, copy_bytes));
  CK(cudaMemset(ca, 0x5a, copy_bytes));
  const double copy_ms = time_ms(
      [&](int) { CK(cudaMemcpyAsync(cb, ca, copy_bytes, cudaMemcpyDeviceToDevice)); }, 3, 20);
  CK(cudaFree(ca));
  CK(cudaFree(cb));
  const double gbs = 2.0 * copy_bytes / (copy_ms * 1e-3) / 1e9;
  std::printf("copy 1 GiB d2d: %.3f ms, %.0f GB/s (read + write)\n", copy_ms, gbs);
  return gbs;
}

// Random bytes on the device (codes and E4M3 scales: every value occurs).
void fill_bytes(uint8_t* d, size_t n, uint32_t seed) {
  std::vector<uint8_t> h(std::min<size_t>(n, 1 << 24));
  std::mt19937 rng(seed);
  for (auto& v : h) v = uint8_t(rng());
  for (size_t off = 0; off < n; off += h.size())
    CK(cudaMemcpy(d + off, h.data(), std::min(h.size(), n - off), cudaMemcpyHostToDevice));
}

// matmul_scaled against matmul_bf16 over llama-3.1-8b's projections (q/o 4096×4096, k/v
// 1024×4096, gate/up 14336×4096, down 4096×14336, LM head 128256×4096): T = 1, 16, 64 (decode:
// the fused kernel, split-K workspace as the backend passes it) and 512, 2048 (prefill: the
// dequant path, inner values into the scratch, then Tile128). Bytes counted are the bytes read:
// codes + scales (+ bf16 weights) + the T rows of x. "%copy": of the copy rate measured above
// (read + write per second); "%4TB": of 4.0 TB/s. The last column: TFLOP/s (2·T·N·K per second).
// For prefill, "dequant" is dequant_scaled of the whole weight alone (its share of the matmul).
void bench_scaled() {
  const double copy_gbs = measure_copy_gbs();
  struct Shape {
    const char* name;
    int64_t N, K;
  };
  struct Fmt {
    const char* name;
    bool bf16;
    bc::ScaledFormat f;
    int64_t B;
    bool frag = false;  // NVFP4 in the fragment layout (BASALT_CUDA_NVFP4_FRAG=1)
    bool wg = false;    // the wgmma layout (scaled_to_wg)
  };
  const Fmt fmts[] = {{"bf16", true, bc::ScaledFormat::FP8, 0},
                      {"NVFP4", false, bc::ScaledFormat::NVFP4, 0},
                      {"NVFP4-frag", false, bc::ScaledFormat::NVFP4, 0, true},
                      {"NVFP4-wg", false, bc::ScaledFormat::NVFP4, 0, false, true},
                      {"FP8", false, bc::ScaledFormat::FP8, 0},
                      {"FP8-wg", false, bc::ScaledFormat::FP8, 0, false, true},
                      {"FP8-b128", false, bc::ScaledFormat::FP8Blocks, 128}};
  std::printf("\n%-8s %-9s %6s %6s %6s %-8s %10s %8s %6s %6s %8s\n", "shape", "format", "T", "N",
              "K", "path", "median_us", "GB/s", "%copy", "%4TB", "TFLOP/s");
  for (Shape sh :
       {Shape{"q/o", 4096, 4096}, Shape{"k/v", 1024, 4096}, Shape{"gate/up", 14336, 4096},
        Shape{"down", 4096, 14336}, Shape{"lm_head", 128256, 4096}}) {
    if (const char* e = std::getenv("BENCH_SHAPE"); e && std::string(e) != sh.name) continue;
    for (const Fmt& f : fmts) {
      if (const char* e = std::getenv("BENCH_FMT"); e && std::string(e) != f.name) continue;
      const int64_t N = sh.N, K = sh.K;
      size_t code_bytes = 0, sc_bytes = 0;
      if (f.bf16)
        code_bytes = size_t(N * K) * 2;
      else if (f.f == bc::ScaledFormat::NVFP4)
        code_bytes = size_t(N * K / 2), sc_bytes = size_t(N * K / 16);
      else
        code_bytes = size_t(N * K),
        sc_bytes = f.B ? size_t(((N + f.B - 1) / f.B) * ((K + f.B - 1) / f.B)) * 4 : 0;
      const size_t wbytes = code_bytes + sc_bytes;
      const int copies = int(std::max<size_t>(2, (size_t(512) << 20) / wbytes + 1));
      // One allocation per copy: [codes | scales], 256-byte aligned.
      const size_t stride = (wbytes + 255) / 256 * 256;
      uint8_t* wmem;
      CK(cudaMalloc(&wmem, stride * copies));
      if (f.bf16) {
        for (int c = 0; c < copies; ++c)
          fill_bf16(reinterpret_cast<uint16_t*>(wmem + stride * c), code_bytes / 2);
      } else {
        fill_bytes(wmem, stride * copies, 11);
        if (f.B)  // f32 block scales: finite values
          for (int c = 0; c < copies; ++c) {
            std::vector<float> hs(sc_bytes / 4, 0.01f);
            CK(cudaMemcpy(wmem + stride * c + code_bytes, hs.data(), sc_bytes,
                          cudaMemcpyHostToDevice));
          }
      }
      auto weight = [&](int c) {
        bc::ScaledWeight w;
        w.format = f.f, w.data = wmem + stride * c, w.N = N, w.K = K, w.block = f.B;
        w.scales = sc_bytes ? wmem + stride * c + code_bytes : nullptr;
        w.scale = 0.01f;
        w.frag = f.frag;
        w.wg = f.wg;
        if (f.wg && f.f == bc::ScaledFormat::NVFP4) w.scales = nullptr;
        return w;
      };
      if (f.frag)  // each copy rewritten in place (N % 16 == 0: the same size) through a temporary
        for (int c = 0; c < copies; ++c) {
          const size_t fc = bc::nvfp4_frag_code_bytes(N, K), fsb = bc::nvfp4_frag_scale_bytes(N, K);
          uint8_t* tmp;
          CK(cudaMalloc(&tmp, fc + fsb));
          bc::ScaledWeight src = weight(c);
          src.frag = false;
          CK(bc::nvfp4_to_frag(src, tmp, tmp + fc, nullptr));
          CK(cudaMemcpy(wmem + stride * c, tmp, fc + fsb, cudaMemcpyDeviceToDevice));
          CK(cudaFree(tmp));
        }
      if (f.wg)  // each copy rewritten in place (N % 64 == 0: the same size) through a temporary
        for (int c = 0; c < copies; ++c) {
          const size_t wb = bc::scaled_wg_bytes(f.f, N, K);
          uint8_t* tmp;
          CK(cudaMalloc(&tmp, wb));
          bc::ScaledWeight src = weight(c);
          src.wg = false, src.scales = sc_bytes ? wmem + stride * c + code_bytes : nullptr;
          CK(bc::scaled_to_wg(src, tmp, nullptr));
          CK(cudaMemcpy(wmem + stride * c, tmp, wb, cudaMemcpyDeviceToDevice));
          CK(cudaFree(tmp));
        }
      const size_t scr_bytes = f.bf16 ? 0 : bc::matmul_scaled_scratch_bytes(weight(0));
      void* scr = nullptr;
      if (scr_bytes) CK(cudaMalloc(&scr, scr_bytes));
      for (int64_t T : {1, 8, 16, 64, 512, 2048}) {
        uint16_t* x;
        float* y;
        CK(cudaMalloc(&x, size_t(T * K) * 2));
        CK(cudaMalloc(&y, size_t(T * N) * 4));
        fill_bf16(x, size_t(T * K));
        const size_t ws_bytes = T <= 64 ? bc::matmul_workspace_bytes(T, N, K) : 0;
        void* ws = nullptr;
        if (ws_bytes) {
          CK(cudaMalloc(&ws, ws_bytes));
          CK(cudaMemset(ws, 0, ws_bytes));
        }
        const bool split = T <= 64 && bc::matmul_kseg(N, K) < K;
        const bool fused = !f.bf16 && T <= 64 && bc::matmul_scaled_fused_ok(weight(0));
        // T = 1: the fused kernel's other stage shapes too (set_matmul_scaled_config).
        if (const char* e = std::getenv("BENCH_T"); e && std::atoll(e) != T) continue;
        for (int cfg = 0; cfg < (fused && T == 1 && !f.B && !f.frag && !f.wg ? 4 : 1); ++cfg) {
          if (const char* e = std::getenv("BENCH_CFG"); e && std::atoi(e) != cfg) continue;
          bc::set_matmul_scaled_config(cfg);
          const double ms = time_ms(
              [&](int i) {
                if (f.bf16)
                  CK(bc::matmul_bf16(
                      x, T, reinterpret_cast<const uint16_t*>(wmem + stride * (i % copies)), N, K,
                      y, nullptr, bc::MatmulKernel::Auto, split ? ws : nullptr,
                      split ? ws_bytes : 0));
                else
                  CK(bc::matmul_scaled(x, T, weight(i % copies), y, nullptr, bc::ScaledKernel::Auto,
                                       split ? ws : nullptr, split ? ws_bytes : 0, scr, scr_bytes));
              },
              3, reps(T <= 64 ? 200 : 10));
          const double bytes = double(wbytes) + double(T * K) * 2;
          const double gbs = bytes / (ms * 1e-3) / 1e9;
          const std::string path = f.bf16  ? "bf16"
                                   : fused ? (cfg ? "fused/" + std::to_string(cfg) : "fused")
                                           : "dequant";
          std::printf("%-8s %-9s %6lld %6lld %6lld %-8s %10.2f %8.0f %5.1f%% %5.1f%% %8.1f\n",
                      sh.name, f.name, (long long)T, (long long)N, (long long)K, path.c_str(),
                      ms * 1e3, gbs, 100.0 * gbs / copy_gbs, 100.0 * gbs / 4000.0,
                      2.0 * double(T) * N * K / (ms * 1e-3) / 1e12);
        }
        bc::set_matmul_scaled_config(0);
        if (!f.bf16 && T == 512 && scr_bytes >= size_t(N * K) * 2) {
          const double dq = time_ms(
              [&](int i) {
                CK(bc::dequant_scaled(weight(i % copies), 0, N, static_cast<uint16_t*>(scr),
                                      nullptr));
              },
              3, reps(20));
          std::printf("%-8s %-9s %6s %6lld %6lld %-8s %10.2f %8.0f %5.1f%%\n", sh.name, f.name, "-",
                      (long long)N, (long long)K, "dequant", dq * 1e3,
                      (double(wbytes) + double(N * K) * 2) / (dq * 1e-3) / 1e9,
                      100.0 * (double(wbytes) + double(N * K) * 2) / (dq * 1e-3) / 1e9 / copy_gbs);
        }
        CK(cudaFree(x));
        CK(cudaFree(y));
        if (ws) CK(cudaFree(ws));
      }
      if (scr) CK(cudaFree(scr));
      CK(cudaFree(wmem));
    }
  }
}

}  // namespace

// T = 1 (and T = 2048 for the prefill side of a segment choice) over the projection shapes of
// the hybrid and MoE presets, for every Rows tiling with and without split-K, and for several
// segment lengths (set_matmul_kseg_override: a segment choice changes the bits of a shape in
// decode and prefill alike, so it is a per-shape decision).
void bench_decode_shapes() {
  struct Shape {
    int64_t N, K;
  };
  std::printf("%-6s %6s %6s %5s %-10s %10s %7s\n", "T", "N", "K", "kseg", "kernel", "median_us",
              "GB/s");
  for (Shape sh : {Shape{17408, 5120}, Shape{5120, 17408}, Shape{6144, 5120}, Shape{12288, 5120},
                   Shape{10240, 5120}, Shape{5120, 6144}, Shape{1024, 5120}, Shape{48, 5120},
                   Shape{4096, 2048}, Shape{512, 2048}, Shape{2048, 4096}, Shape{256, 2048},
                   Shape{32, 2048}, Shape{8192, 2048}, Shape{14336, 4096}}) {
    const size_t wbytes = size_t(sh.N) * sh.K * 2;
    const int copies = int(std::max<size_t>(2, (size_t(512) << 20) / wbytes + 1));
    uint16_t* w;
    CK(cudaMalloc(&w, wbytes * copies));
    fill_bf16(w, wbytes / 2 * copies);
    for (int64_t T : {1, 2048}) {
      uint16_t* x;
      float* y;
      CK(cudaMalloc(&x, size_t(T) * sh.K * 2));
      CK(cudaMalloc(&y, size_t(T) * sh.N * 4));
      fill_bf16(x, size_t(T) * sh.K);
      for (int64_t kseg : {0, 256, 512, 1024, 2048, 4096}) {
        if (kseg >= sh.K) continue;
        bc::set_matmul_kseg_override(kseg);
        const size_t ws_bytes = bc::matmul_workspace_bytes(T, sh.N, sh.K);
        void* ws = nullptr;
        CK(cudaMalloc(&ws, ws_bytes));
        CK(cudaMemset(ws, 0, ws_bytes));
        for (auto kern : {bc::MatmulKernel::Rows16x32, bc::MatmulKernel::Rows16x16,
                          bc::MatmulKernel::Rows16x32Deep, bc::MatmulKernel::Tile128})
          for (bool split : {false, true}) {
            if ((T == 1) == (kern == bc::MatmulKernel::Tile128)) continue;
            if (split && T > 1) continue;
            const double ms = time_ms(
                [&](int i) {
                  CK(bc::matmul_bf16(x, T, w + (wbytes / 2) * (i % copies), sh.N, sh.K, y, nullptr,
                                     kern, split ? ws : nullptr, split ? ws_bytes : 0));
                },
                3, T == 1 ? 100 : 10);
            const char* kn =
                kern == bc::MatmulKernel::Rows16x32       ? (split ? "R16x32+sK" : "Rows16x32")
                : kern == bc::MatmulKernel::Rows16x16     ? (split ? "R16x16+sK" : "Rows16x16")
                : kern == bc::MatmulKernel::Rows16x32Deep ? (split ? "R16x32D+sK" : "R16x32Deep")
                                                          : "Tile128";
            std::printf("%-6lld %6lld %6lld %5lld %-10s %10.2f %7.0f\n", (long long)T,
                        (long long)sh.N, (long long)sh.K, (long long)kseg, kn, ms * 1e3,
                        double(wbytes) / (ms * 1e-3) / 1e9);
          }
        CK(cudaFree(ws));
      }
      bc::set_matmul_kseg_override(0);
      CK(cudaFree(x));
      CK(cudaFree(y));
    }
    CK(cudaFree(w));
  }
}

// A serving decode step's attention: B sequences of llama-3.1-8b's heads (H 32, Hkv 8, D 128),
// a row each at positions 512 + t (row t of sequence t), each sequence's keys in its own blocks
// of 64 of one paged cache (bf16, then E4M3 written by kv_write_fp8), max_pos bucketed as the
// backend does: Auto told the rows are sequences of their own (AttnArgs::rows_own_seq), then each
// Split kernel; GB/s of the keys and values the rows see.
void bench_batch_decode_attention(double copy_gbs) {
  const int64_t H = 32, Hkv = 8, D = 128, bs = 64;
  for (int64_t B : {int64_t(16), int64_t(64)}) {
    const int64_t max_len = 512 + B, blocks_per = (max_len + bs - 1) / bs;
    const int64_t rows = B * blocks_per * bs, stride = 16;
    std::vector<int32_t> pos(static_cast<size_t>(B)), row_table(static_cast<size_t>(B)),
        tables(static_cast<size_t>(B * stride), 0);
    std::vector<int32_t> slots(static_cast<size_t>(rows));
    double seen = 0;
    for (int64_t t = 0; t < B; ++t) {
      pos[size_t(t)] = int32_t(512 + t), row_table[size_t(t)] = int32_t(t);
      for (int64_t j = 0; j < blocks_per; ++j)
        tables[size_t(t * stride + j)] = int32_t(t * blocks_per + j);
      seen += double(513 + t);
    }
    for (int64_t i = 0; i < rows; ++i) slots[size_t(i)] = int32_t(i);
    const int64_t max_pos = int64_t(1) << 10;  // 576 .. 575 + B keys: 16 chunks bucketed
    uint16_t *k, *v, *out;
    float *q, *ws, *frows;
    uint8_t *k8, *v8;
    int32_t *dpos, *drt, *dtab, *dslots;
    const size_t kv = size_t(rows) * Hkv * D;
    CK(cudaMalloc(&k, kv * 2));
    CK(cudaMalloc(&v, kv * 2));
    fill_bf16(k, kv);
    fill_bf16(v, kv);
    CK(cudaMalloc(&k8, size_t(rows) * Hkv * (D + 4)));
    CK(cudaMalloc(&v8, size_t(rows) * Hkv * (D + 4)));
    CK(cudaMalloc(&frows, kv * 4));
    fill_bf16(reinterpret_cast<uint16_t*>(frows), kv * 2);
    CK(cudaMalloc(&q, B * H * D * 4));
    CK(cudaMemset(q, 0x3c, B * H * D * 4));
    CK(cudaMalloc(&out, B * H * D * 2));
    CK(cudaMalloc(&dpos, B * 4));
    CK(cudaMalloc(&drt, B * 4));
    CK(cudaMalloc(&dtab, tables.size() * 4));
    CK(cudaMalloc(&dslots, rows * 4));
    CK(cudaMemcpy(dpos, pos.data(), B * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(drt, row_table.data(), B * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dtab, tables.data(), tables.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dslots, slots.data(), rows * 4, cudaMemcpyHostToDevice));
    CK(bc::kv_write_fp8(frows, frows, dslots, rows, Hkv, D, bs, k8, v8, nullptr));
    const size_t wsb = bc::attention_workspace_bytes(B, H, D, max_pos);
    CK(cudaMalloc(&ws, wsb));
    bc::AttnArgs a;
    a.q = q, a.out = out, a.T = B, a.H = H, a.Hkv = Hkv, a.D = D, a.scale = 0.088f;
    a.pos = dpos, a.tables = dtab, a.row_table = drt, a.table_stride = stride;
    a.block_size = bs, a.max_pos = max_pos - 1;
    a.workspace = ws, a.workspace_bytes = wsb;
    for (bool f8 : {false, true}) {
      a.k = f8 ? nullptr : k, a.v = f8 ? nullptr : v;
      a.k8 = f8 ? k8 : nullptr, a.v8 = f8 ? v8 : nullptr;
      const double bytes = 2.0 * seen * double(Hkv) * double(f8 ? D + 4 : 2 * D);
      a.rows_own_seq = true;
      for (const auto& [sk, name] :
           {std::pair{bc::SplitKernel::Auto, "auto"}, std::pair{bc::SplitKernel::Chunk4, "chunk4"},
            std::pair{bc::SplitKernel::Walk4, "walk4"},
            std::pair{bc::SplitKernel::Warp1, "warp1"}}) {
        bc::set_attention_split_kernel(sk);
        const double ms = time_ms([&](int) { CK(bc::attention(a, nullptr)); }, 5, 100);
        const double gbs = bytes / (ms * 1e-3) / 1e9;
        std::printf("%-10s %6lld %6d %-4s %-7s %9.2f us %7.0f GB/s %5.1f%%\n", "attn-batch",
                    (long long)B, 512, f8 ? "fp8" : "bf16", name, ms * 1e3, gbs,
                    100.0 * gbs / copy_gbs);
      }
      // Warp1 and Walk4 with the chunks of a (KV head, tile) shared by g groups (Auto: as many
      // as fit on the chip at once).
      for (const auto& [sk, name] :
           {std::pair{bc::SplitKernel::Walk4, "walk4"}, std::pair{bc::SplitKernel::Warp1, "warp1"}})
        for (int64_t g : {1, 2, 4, 8, 16}) {
          bc::set_attention_split_kernel(sk, g);
          const double ms = time_ms([&](int) { CK(bc::attention(a, nullptr)); }, 5, 100);
          const double gbs = bytes / (ms * 1e-3) / 1e9;
          std::printf("%-10s %6lld %6d %-4s %-5s g%-2lld %8.2f us %7.0f GB/s %5.1f%%\n",
                      "attn-batch", (long long)B, 512, f8 ? "fp8" : "bf16", name, (long long)g,
                      ms * 1e3, gbs, 100.0 * gbs / copy_gbs);
        }
      bc::set_attention_split_kernel(bc::SplitKernel::Auto);
    }
    for (void* p : {static_cast<void*>(k), static_cast<void*>(v), static_cast<void*>(k8),
                    static_cast<void*>(v8), static_cast<void*>(frows), static_cast<void*>(q),
                    static_cast<void*>(out), static_cast<void*>(dpos), static_cast<void*>(drt),
                    static_cast<void*>(dtab), static_cast<void*>(dslots), static_cast<void*>(ws)})
      CK(cudaFree(p));
  }
}

int main(int argc, char** argv) {
  const auto devs = bc::cuda_devices();
  if (devs.empty()) {
    std::printf("SKIP: no CUDA device\n");
    return 0;
  }
  std::printf("device: %s, %d SMs\n", devs[0].name.c_str(), devs[0].sm_count);
  const bool attn_only = argc > 1 && std::string(argv[1]) == "attention";
  const bool matmul_only = argc > 1 && std::string(argv[1]) == "matmul";
  if (argc > 1 && std::string(argv[1]) == "decode") {
    bench_decode_shapes();
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "hybrid") {
    bench_hybrid();
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "attn-batch") {
    bench_batch_decode_attention(measure_copy_gbs());
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "scaled") {
    bench_scaled();
    return 0;
  }

  const double copy_gbs = measure_copy_gbs();

  struct Shape {
    int64_t N, K;
  };
  std::printf("\n%-10s %6s %6s %6s %-10s %10s %9s %7s %9s\n", "op", "T", "N", "K", "kernel",
              "median_us", "GB/s", "%copy", "TFLOP/s");
  for (Shape sh : {Shape{4096, 4096}, Shape{14336, 4096}, Shape{4096, 14336}}) {
    if (attn_only) break;
    const size_t wbytes = size_t(sh.N) * sh.K * 2;
    const int copies = int(std::max<size_t>(2, (size_t(512) << 20) / wbytes + 1));
    uint16_t* w;
    CK(cudaMalloc(&w, wbytes * copies));
    fill_bf16(w, wbytes / 2 * copies);
    for (int64_t T : {1, 16, 32, 64, 512, 2048}) {
      if (const char* e = std::getenv("BENCH_T"); e && std::atoll(e) != T) continue;
      uint16_t* x;
      float* y;
      CK(cudaMalloc(&x, size_t(T) * sh.K * 2));
      CK(cudaMalloc(&y, size_t(T) * sh.N * 4));
      fill_bf16(x, size_t(T) * sh.K);
      const size_t ws_bytes = bc::matmul_workspace_bytes(T, sh.N, sh.K);
      void* ws = nullptr;
      CK(cudaMalloc(&ws, ws_bytes));
      CK(cudaMemset(ws, 0, ws_bytes));
      for (auto kern :
           {bc::MatmulKernel::Auto, bc::MatmulKernel::Rows16x32, bc::MatmulKernel::Rows16x16,
            bc::MatmulKernel::Rows16x32Deep, bc::MatmulKernel::Tile128,
            bc::MatmulKernel::Tile128K64, bc::MatmulKernel::TileWG, bc::MatmulKernel::TileWG2,
            bc::MatmulKernel::TileWG64, bc::MatmulKernel::TileTMA, bc::MatmulKernel::TileTMA64,
            bc::MatmulKernel::RowsTMA, bc::MatmulKernel::TileTMA256, bc::MatmulKernel::TileTMAP})
        for (bool split : {false, true}) {
          const bool tile =
              kern == bc::MatmulKernel::Tile128 || kern == bc::MatmulKernel::Tile128K64 ||
              kern == bc::MatmulKernel::TileWG || kern == bc::MatmulKernel::TileWG2 ||
              kern == bc::MatmulKernel::TileTMA || kern == bc::MatmulKernel::TileTMA256 ||
              kern == bc::MatmulKernel::TileTMAP;
          const bool wg64 =
              kern == bc::MatmulKernel::TileWG64 || kern == bc::MatmulKernel::TileTMA64;
          const bool autok = kern == bc::MatmulKernel::Auto;
          if ((autok && split) || (T == 1 && (tile || wg64)) || (T >= 512 && !tile && !autok) ||
              (tile && split) || (kern == bc::MatmulKernel::RowsTMA && T > 64))
            continue;
          const double ms = time_ms(
              [&](int i) {
                CK(bc::matmul_bf16(x, T, w + (wbytes / 2) * (i % copies), sh.N, sh.K, y, nullptr,
                                   kern, split ? ws : nullptr, split ? ws_bytes : 0));
              },
              5, T <= 64 ? 200 : 30);
          const double bytes = double(wbytes) + double(T) * sh.K * 2 + double(T) * sh.N * 4;
          const double gbs = bytes / (ms * 1e-3) / 1e9;
          const double tf = 2.0 * T * sh.N * sh.K / (ms * 1e-3) / 1e12;
          const char* kn =
              autok                                     ? "Auto"
              : kern == bc::MatmulKernel::Rows16x32     ? (split ? "R16x32+sK" : "Rows16x32")
              : kern == bc::MatmulKernel::Rows16x16     ? (split ? "R16x16+sK" : "Rows16x16")
              : kern == bc::MatmulKernel::Rows16x32Deep ? (split ? "R16x32D+sK" : "R16x32Deep")
              : kern == bc::MatmulKernel::Tile128K64    ? "T128K64"
              : kern == bc::MatmulKernel::TileWG        ? "TileWG"
              : kern == bc::MatmulKernel::TileWG2       ? "TileWG2"
              : kern == bc::MatmulKernel::TileWG64      ? (split ? "WG64+sK" : "TileWG64")
              : kern == bc::MatmulKernel::TileTMA       ? "TileTMA"
              : kern == bc::MatmulKernel::TileTMA64     ? (split ? "TMA64+sK" : "TileTMA64")
              : kern == bc::MatmulKernel::RowsTMA       ? (split ? "RTMA+sK" : "RowsTMA")
              : kern == bc::MatmulKernel::TileTMA256    ? "TileTMA256"
              : kern == bc::MatmulKernel::TileTMAP      ? "TileTMAP"
                                                        : "Tile128";
          std::printf("%-10s %6lld %6lld %6lld %-10s %10.2f %9.0f %6.1f%% %9.1f\n", "matmul",
                      (long long)T, (long long)sh.N, (long long)sh.K, kn, ms * 1e3, gbs,
                      100.0 * gbs / copy_gbs, tf);
        }
      CK(cudaFree(x));
      CK(cudaFree(y));
      CK(cudaFree(ws));
    }
    CK(cudaFree(w));
  }
  // The prefill gate / up products with SwiGLU in one launch (llama-3.1-8b's F = 14336, K =
  // 4096): blocks of 64 + 64 columns (TileTMA) and 128 + 128 (TileTMA256, Auto's choice for
  // one-segment weights). TFLOP/s of the two products.
  for (int64_t T : {512, 2048}) {
    if (attn_only) break;
    if (const char* e = std::getenv("BENCH_T"); e && std::atoll(e) != T) continue;
    const int64_t F = 14336, K = 4096;
    uint16_t *x, *wg, *wu, *out;
    CK(cudaMalloc(&x, size_t(T) * K * 2));
    CK(cudaMalloc(&wg, size_t(F) * K * 2));
    CK(cudaMalloc(&wu, size_t(F) * K * 2));
    CK(cudaMalloc(&out, size_t(T) * F * 2));
    fill_bf16(x, size_t(T) * K), fill_bf16(wg, size_t(F) * K), fill_bf16(wu, size_t(F) * K);
    for (auto kern : {bc::MatmulKernel::TileTMA, bc::MatmulKernel::TileTMA256}) {
      const double ms = time_ms(
          [&](int) { CK(bc::matmul_bf16_swiglu(x, T, wg, wu, F, K, out, nullptr, 0, kern)); }, 5,
          30);
      const double tf = 4.0 * T * F * K / (ms * 1e-3) / 1e12;
      std::printf("%-10s %6lld %6lld %6lld %-10s %10.2f %9s %7s %9.1f\n", "mm_swiglu", (long long)T,
                  (long long)F, (long long)K,
                  kern == bc::MatmulKernel::TileTMA ? "TileTMA" : "TileTMA256", ms * 1e3, "-", "-",
                  tf);
    }
    CK(cudaFree(x));
    CK(cudaFree(wg));
    CK(cudaFree(wu));
    CK(cudaFree(out));
  }
  if (matmul_only) return 0;

  // Decode attention: one query row, H=32, Hkv=8, D=128 (Llama-3.1-8B), several contexts.
  struct Heads {
    int64_t H, Hkv, D;
  };
  for (Heads hd : {Heads{32, 8, 128}, Heads{24, 4, 256}})  // Llama-3.1-8B, Qwen3.5-27B
    for (int64_t ctx : {512, 4096, 32768}) {
      const int64_t H = hd.H, Hkv = hd.Hkv, D = hd.D;
      uint16_t *k, *v, *out;
      float *q, *ws;
      const size_t kv = size_t(ctx) * Hkv * D;
      CK(cudaMalloc(&k, kv * 2));
      CK(cudaMalloc(&v, kv * 2));
      fill_bf16(k, kv);
      fill_bf16(v, kv);
      CK(cudaMalloc(&q, H * D * 4));
      CK(cudaMemset(q, 0x3c, H * D * 4));
      CK(cudaMalloc(&out, H * D * 2));
      const size_t wsb = bc::attention_workspace_bytes(1, H, D, ctx);
      CK(cudaMalloc(&ws, wsb));
      bc::AttnArgs a;
      a.q = q;
      a.k = k;
      a.v = v;
      a.out = out;
      a.T = 1;
      a.H = H;
      a.Hkv = Hkv;
      a.D = D;
      a.pos0 = ctx - 1;
      a.scale = 0.088f;
      a.workspace = ws;
      a.workspace_bytes = wsb;
      // Split's kernels (tensor-core path): Auto's choice (up to 64 chunks Chunk4 on the bf16
      // cache and Walk4 on the FP8 one, Warp1 above), then each of them at every context.
      const std::pair<bc::SplitKernel, const char*> split_kernels[] = {
          {bc::SplitKernel::Auto, "auto"},
          {bc::SplitKernel::Chunk4, "chunk4"},
          {bc::SplitKernel::Walk4, "walk4"},
          {bc::SplitKernel::Warp1, "warp1"}};
      for (const auto& [sk, sk_name] : split_kernels) {
        if (D == 256 && sk != bc::SplitKernel::Auto) continue;  // (CUDA-core path: one kernel)
        bc::set_attention_split_kernel(sk);
        const double ms = time_ms([&](int) { CK(bc::attention(a, nullptr)); }, 5, 100);
        const double gbs = 2.0 * kv * 2 / (ms * 1e-3) / 1e9;
        std::printf("%-10s %6d %6lld %6lld %-10s %10.2f %9.0f %6.1f%%\n", "attn-dec", 1,
                    (long long)ctx, (long long)D, sk_name, ms * 1e3, gbs, 100.0 * gbs / copy_gbs);
      }
      bc::set_attention_split_kernel(bc::SplitKernel::Auto);

      // The same over an E4M3 cache (paged, blocks of 64 in order), written by kv_write_fp8 from
      // f32 rows whose top halves are fill_bf16's values. It reads codes [ctx, Hkv, D] and f32
      // scales [ctx, Hkv] for K and V: 2 · ctx · Hkv · (D + 4) bytes.
      const int64_t bs = 64;
      const size_t kv8 = size_t(ctx) * Hkv * (D + 4);
      uint8_t *k8, *v8;
      float* rows;
      int32_t* iota;
      CK(cudaMalloc(&k8, kv8));
      CK(cudaMalloc(&v8, kv8));
      CK(cudaMalloc(&rows, kv * 4));
      CK(cudaMalloc(&iota, ctx * 4));
      fill_bf16(reinterpret_cast<uint16_t*>(rows), kv * 2);
      std::vector<int32_t> h_iota(ctx);
      for (int64_t i = 0; i < ctx; ++i) h_iota[i] = int32_t(i);
      CK(cudaMemcpy(iota, h_iota.data(), ctx * 4, cudaMemcpyHostToDevice));
      // iota serves as the slots (position p at cache row p), the block table and the row table.
      CK(bc::kv_write_fp8(rows, rows, iota, ctx, Hkv, D, bs, k8, v8, nullptr));
      bc::AttnArgs a8 = a;
      a8.k = a8.v = nullptr;
      a8.k8 = k8, a8.v8 = v8;
      a8.tables = iota, a8.row_table = iota, a8.table_stride = ctx / bs, a8.block_size = bs;
      for (const auto& [sk, sk_name] : split_kernels) {
        if (D == 256 && sk != bc::SplitKernel::Auto) continue;
        bc::set_attention_split_kernel(sk);
        const double ms8 = time_ms([&](int) { CK(bc::attention(a8, nullptr)); }, 5, 100);
        const double gbs8 = 2.0 * kv8 / (ms8 * 1e-3) / 1e9;
        std::printf("%-10s %6d %6lld %6lld %-10s %10.2f %9.0f %6.1f%%\n", "attn-dec8", 1,
                    (long long)ctx, (long long)D, sk_name, ms8 * 1e3, gbs8,
                    100.0 * gbs8 / copy_gbs);
      }
      bc::set_attention_split_kernel(bc::SplitKernel::Auto);

      // Prefill: the last 512 rows of a ctx-long prompt in one pass, and at ctx 4096 also a
      // whole 2,048-token prompt (rows 0..2047), both caches, kernels Fused and Block (Block:
      // tensor-core path only). TFLOP/s of the useful products, 4 · D flops a (query head,
      // visible key), the causal half counted.
      if (ctx >= 4096) {
        for (int64_t T : {int64_t(512), int64_t(2048)}) {
          if (T == 2048 && ctx != 4096) continue;
          const int64_t pos0 = T == 2048 ? 0 : ctx - T;
          float* qp;
          uint16_t* outp;
          int32_t* zeros;
          CK(cudaMalloc(&qp, T * H * D * 4));
          CK(cudaMemset(qp, 0x3c, T * H * D * 4));
          CK(cudaMalloc(&outp, T * H * D * 2));
          CK(cudaMalloc(&zeros, T * 4));
          CK(cudaMemset(zeros, 0, T * 4));
          const double flops = 4.0 * D * H * T * (pos0 + T / 2.0);
          bc::AttnArgs pa = a, pa8 = a8;
          for (bc::AttnArgs* p : {&pa, &pa8}) {
            p->q = qp, p->out = outp, p->T = T, p->pos0 = pos0;
            p->workspace = nullptr, p->workspace_bytes = 0;  // never split
          }
          pa8.row_table = zeros;
          for (const bc::AttnArgs* p : {&pa, &pa8})
            for (bc::AttnKernel kern : {bc::AttnKernel::Fused, bc::AttnKernel::Block,
                                        bc::AttnKernel::BlockWG, bc::AttnKernel::BlockWGPV}) {
              if (kern != bc::AttnKernel::Fused && D != 64 && D != 128) continue;
              if ((kern == bc::AttnKernel::BlockWG || kern == bc::AttnKernel::BlockWGPV) &&
                  p == &pa8)
                continue;  // (runs Block)
              const double msp = time_ms([&](int) { CK(bc::attention(*p, nullptr, kern)); }, 2, 10);
              std::printf("%-10s %6lld %6lld %6lld %-10s %10.2f %9s %7s %9.1f\n",
                          p == &pa ? "attn-pre" : "attn-pre8", (long long)T, (long long)ctx,
                          (long long)D,
                          kern == bc::AttnKernel::Block       ? "block"
                          : kern == bc::AttnKernel::BlockWG   ? "blockwg"
                          : kern == bc::AttnKernel::BlockWGPV ? "blockwgpv"
                                                              : "fused",
                          msp * 1e3, "", "", flops / (msp * 1e-3) / 1e12);
            }
          CK(cudaFree(qp));
          CK(cudaFree(outp));
          CK(cudaFree(zeros));
        }
      }
      CK(cudaFree(k8));
      CK(cudaFree(v8));
      CK(cudaFree(rows));
      CK(cudaFree(iota));
      CK(cudaFree(k));
      CK(cudaFree(v));
      CK(cudaFree(q));
      CK(cudaFree(out));
      CK(cudaFree(ws));
    }
  bench_batch_decode_attention(copy_gbs);
  if (!attn_only) bench_hybrid();
  return 0;
}
