// CudaBackend: device memory, resident weights, pass metadata and CUDA graphs around the kernels.
#include "backends/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backends/cuda/cublas.h"
#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cuda_tune.h"
#include "backends/cuda/kernels.h"
#include "core/error.h"
#include "core/log.h"
#include "ops/ref/scaled.h"

namespace basalt::cuda {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("[cuda] {}: {}", what, cudaGetErrorString(e));
}

uint64_t pow2_at_least(uint64_t v) {
  uint64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaOptions& opt) : opt_(opt) {
    const auto devs = cuda_devices();
    if (devs.empty()) fail("[cuda] no CUDA device is visible");
    if (opt.device < 0 || opt.device >= int(devs.size()))
      fail("[cuda] device {} does not exist ({} visible)", opt.device, devs.size());
    const DeviceInfo& d = devs[size_t(opt.device)];
    if (d.cc_major != 9)
      fail(
          "[cuda] device {} ({}) has compute capability {}.{}; basalt's kernels are built for "
          "sm_90a (Hopper) only",
          opt.device, d.name, d.cc_major, d.cc_minor);
    name_ = fmt::format("cuda:{} ({}, {} SMs){}", opt.device, d.name, d.sm_count,
                        opt.fast_prefill ? ", fast prefill (cuBLAS, not exact)" : "");
    if (opt_.profile) opt_.graphs = false;  // one event pair per op needs eager launches
    check(cudaSetDevice(opt.device), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }

  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    if (opt_.profile) print_profile();
    if (cublas_) Cublas::get()->destroy(cublas_);
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    clear_graphs();
    for (auto& [p, n] : sizes_) cudaFree(p);
    if (pinned_) cudaFreeHost(pinned_);
    if (meta_copied_) cudaEventDestroy(meta_copied_);
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return name_; }
  // NVFP4 and FP8 (E4M3) weights stay in their codes on the device (matmul_scaled).
  bool supports_weight(DType t) const override {
    return t == DType::BF16 || t == DType::F16 || t == DType::F32 || t == DType::NVFP4 ||
           t == DType::F8_E4M3;
  }
  bool supports_head_dim(int64_t D) const override {
    return D == 32 || D == 64 || D == 128 || D == 256;
  }

  // --- memory ------------------------------------------------------------------------------
  void* alloc(size_t bytes) override {
    void* p = nullptr;
    const size_t n = std::max<size_t>(bytes, 1);
    const cudaError_t e = cudaMalloc(&p, n);
    if (e != cudaSuccess) {
      cudaGetLastError();
      size_t free_b = 0, total = 0;
      cudaMemGetInfo(&free_b, &total);
      fail("[cuda] out of device memory allocating {:.1f} MiB ({:.1f} MiB free of {:.1f})",
           double(bytes) / (1 << 20), double(free_b) / (1 << 20), double(total) / (1 << 20));
    }
    check(cudaMemsetAsync(p, 0, n, stream_), "cudaMemset");
    sizes_[p] = n;
    live_ += n;
    peak_ = std::max(peak_, live_);
    return p;
  }
  void dealloc(void* p) override {
    if (!p) return;
    auto it = sizes_.find(p);
    if (it == sizes_.end()) fail("[cuda] dealloc of memory it did not allocate");
    check(cudaStreamSynchronize(stream_), "sync before free");
    clear_graphs();  // a recording may point at this memory
    ++mem_generation_;
    live_ -= it->second;
    sizes_.erase(it);
    check(cudaFree(p), "cudaFree");
  }
  void upload(void* dst, const void* src, size_t bytes) override {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "upload");
    check(cudaStreamSynchronize(stream_), "upload");
  }
  void download(void* dst, const void* src, size_t bytes) override {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "download");
    check(cudaStreamSynchronize(stream_), "download");
    if (opt_.profile) collect_profile();
  }
  // Device to device on the stream, queued like an op (recurrent-state snapshots).
  void copy(void* dst, const void* src, size_t bytes) override {
    op("copy", 0, 0,
       [&] { return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_); });
  }
  void act_to_f32(const void* x, float* y, int64_t n) override {
    op("act_to_f32", 0, 0, [&] {
      return cuda::convert_bf16_f32(static_cast<const bf16_bits*>(x), y, n, stream_);
    });
  }
  void f32_to_act(const float* x, void* y, int64_t n) override {
    op("f32_to_act", 0, 0,
       [&] { return cuda::convert_f32_bf16(x, static_cast<bf16_bits*>(y), n, stream_); });
  }
  // One strided copy (a model's taps: rows of the residual stream into a wider row).
  void copy_rows(void* dst, size_t dst_stride, const void* src, size_t src_stride, size_t bytes,
                 int64_t rows) override {
    if (rows <= 0 || bytes == 0) return;
    op("copy_rows", 0, 0, [&] {
      return cudaMemcpy2DAsync(dst, dst_stride, src, src_stride, bytes, size_t(rows),
                               cudaMemcpyDeviceToDevice, stream_);
    });
  }
  bool host_memory() const override { return false; }
  DType act_dtype() const override { return DType::BF16; }
  DType kv_dtype() const override { return kv_; }
  void set_kv_dtype(DType t) override {  // bf16, or E4M3 codes with a scale per row and head
    if (t != DType::BF16 && t != DType::F8_E4M3)
      fail("[cuda] cannot keep the KV cache in {} (bf16 or fp8)", dtype_name(t));
    kv_ = t;
  }
  int64_t kv_block_multiple() const override { return kAttnChunk; }
  size_t peak_bytes() const override { return peak_; }

  WeightRef prepare_weight(const WeightRef& w) override {
    if (!supports_weight(w.dtype))
      fail("[cuda] cannot run {} weights (bf16, f16, f32, NVFP4 and FP8 E4M3 checkpoints only)",
           dtype_name(w.dtype));
    if (ref::is_scaled(w)) return prepare_scaled(w);
    if (w.cols % 8)
      fail("[cuda] a [{}, {}] weight: the matmul kernels need K % 8 == 0", w.rows, w.cols);
    const int64_t n = w.rows * w.cols;
    std::vector<uint16_t> conv;
    const void* src = w.data;
    if (w.dtype != DType::BF16) {
      if (!warned_convert_) {
        spdlog::info("[cuda] rounding {} weights to bf16 at upload", dtype_name(w.dtype));
        warned_convert_ = true;
      }
      conv.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i)
        conv[size_t(i)] = f32_to_bf16(float(dtype_read_f64(w.dtype, w.data, i)));
      src = conv.data();
    }
    void* d = alloc(size_t(n) * 2);
    upload(d, src, size_t(n) * 2);
    return WeightRef{DType::BF16, w.rows, w.cols, d};
  }
  const float* prepare_vector(const float* data, int64_t n) override {
    void* d = alloc(size_t(n) * 4);
    upload(d, data, size_t(n) * 4);
    return static_cast<const float*>(d);
  }

  // A scaled weight (ops/ref/scaled.h) keeps its codes and scales on the device as they are
  // (NVFP4: the packed codes and E4M3 group scales; FP8: the codes and the f32 per-row or block
  // scales, if any); matmul_scaled converts them inside the matmul. Embedding tables are never
  // scaled (the loader dequantises them); MoE experts must be bf16 (moe_matmul has no scaled
  // variant: `moe` refuses other expert dtypes).
  WeightRef prepare_scaled(const WeightRef& w) {
    if (w.rows <= 0 || w.cols <= 0 || !w.data)
      fail("[cuda] a [{}, {}] {} weight without data", w.rows, w.cols, dtype_name(w.dtype));
    if (w.dtype == DType::NVFP4 && (w.cols % 16 || !w.scales))
      fail(
          "[cuda] a [{}, {}] NVFP4 weight: K must be a multiple of 16 (one E4M3 scale per 16 "
          "codes) and the scales present",
          w.rows, w.cols);
    if (w.dtype == DType::F8_E4M3 && w.cols % 8)
      fail("[cuda] a [{}, {}] FP8 weight: the matmul kernels need K % 8 == 0", w.rows, w.cols);
    if (w.dtype == DType::F8_E4M3 && w.scales && w.scale_block < 0)
      fail("[cuda] a [{}, {}] FP8 weight with block size {}", w.rows, w.cols, w.scale_block);
    const size_t data_bytes =
        size_t(w.rows) * size_t(w.dtype == DType::NVFP4 ? w.cols / 2 : w.cols);
    const size_t sc_bytes = ref::scaled_scales_bytes(w);
    WeightRef d = w;
    void* dd = alloc(data_bytes);
    upload(dd, w.data, data_bytes);
    d.data = dd;
    d.scales = nullptr;
    if (sc_bytes) {
      void* ds = alloc(sc_bytes);
      upload(ds, w.scales, sc_bytes);
      d.scales = ds;
    }
    // BASALT_CUDA_NVFP4_FRAG=1: NVFP4 with K % 64 == 0 is kept in the fragment layout
    // (kernels.h nvfp4_to_frag), whose decode kernel streams codes straight into registers.
    // Same bits; opt-in because it is slower on most llama-3.1-8b shapes so far (docs/cuda.md).
    // NVFP4, or FP8 per tensor or per row, with K % 128 == 0 is kept in the wgmma layout
    // (kernels.h scaled_to_wg), whose decode kernel puts the weights in wgmma's register operand
    // (same bits; llama-3.1-8b decode on the H100, 2026-12-07: NVFP4 253 against 220 tok/s, FP8
    // 226 against 194). BASALT_CUDA_NVFP4_WG=0 / BASALT_CUDA_FP8_WG=0 keep the checkpoint's.
    const bool fp8_wg = w.dtype == DType::F8_E4M3 && !(w.scales && w.scale_block);
    if (w.cols % 128 == 0 && ((w.dtype == DType::NVFP4 && wg_enabled("BASALT_CUDA_NVFP4_WG")) ||
                              (fp8_wg && wg_enabled("BASALT_CUDA_FP8_WG")))) {
      const ScaledWeight cw = scaled_weight(d);
      void* wb = alloc(scaled_wg_bytes(cw.format, w.rows, w.cols));
      check(scaled_to_wg(cw, static_cast<uint8_t*>(wb), stream_), "scaled_to_wg");
      check(cudaStreamSynchronize(stream_), "scaled_to_wg");
      dealloc(dd);
      d.data = wb;
      if (w.dtype == DType::NVFP4) {
        dealloc(const_cast<void*>(d.scales));
        d.scales = wb;  // (unused: the blobs hold the scales)
      }
      wg_.insert(wb);
    } else if (w.dtype == DType::NVFP4 && w.cols % 64 == 0 && frag_enabled()) {
      ScaledWeight cw = scaled_weight(d);
      void* fc = alloc(nvfp4_frag_code_bytes(w.rows, w.cols));
      void* fs = alloc(nvfp4_frag_scale_bytes(w.rows, w.cols));
      check(nvfp4_to_frag(cw, static_cast<uint8_t*>(fc), static_cast<uint8_t*>(fs), stream_),
            "nvfp4_to_frag");
      check(cudaStreamSynchronize(stream_), "nvfp4_to_frag");
      dealloc(dd);
      if (d.scales) dealloc(const_cast<void*>(d.scales));
      d.data = fc;
      d.scales = fs;
      frag_.insert(fc);
    }
    const ScaledWeight sw = scaled_weight(d);
    if (!matmul_scaled_fused_ok(sw))
      spdlog::info(
          "[cuda] a [{}, {}] {} weight{}: decode matmuls take the dequant path too (its values "
          "into a bf16 scratch at each call; the fused kernel needs K % {} == 0{})",
          w.rows, w.cols, dtype_name(w.dtype),
          w.dtype == DType::F8_E4M3 && w.scales && w.scale_block ? " with block scales" : "",
          w.dtype == DType::NVFP4 ? 64 : 16,
          w.dtype == DType::F8_E4M3 && w.scales && w.scale_block ? " and B % 128 == 0" : "");
    return d;
  }
  static bool wg_enabled(const char* var) {
    const char* e = std::getenv(var);
    return !(e && std::string(e) == "0");
  }
  static bool frag_enabled() {
    static const bool on = [] {
      const char* e = std::getenv("BASALT_CUDA_NVFP4_FRAG");
      return e && std::string(e) == "1";
    }();
    return on;
  }
  ScaledWeight scaled_weight(const WeightRef& w) const {
    ScaledWeight s;
    s.frag = frag_.count(w.data) > 0;
    s.wg = wg_.count(w.data) > 0;
    s.format = w.dtype == DType::NVFP4 ? ScaledFormat::NVFP4
               : !w.scales             ? ScaledFormat::FP8
               : w.scale_block == 0    ? ScaledFormat::FP8Rows
                                       : ScaledFormat::FP8Blocks;
    s.data = static_cast<const uint8_t*>(w.data);
    s.scales = s.wg && w.dtype == DType::NVFP4 ? nullptr : w.scales;
    s.scale = w.scale;
    s.N = w.rows, s.K = w.cols;
    s.block = w.scale_block;
    return s;
  }
  // T <= 64 on a shape the fused kernel takes: codes are converted inside the matmul (no
  // scratch). Otherwise (prefill, other shapes) the inner values go through a bf16 scratch
  // (grown outside recordings; passes of more than 64 rows are never recorded) and the bf16
  // tilings: the same bits. --fast-prefill does not apply to scaled weights (they always take
  // the exact path).
  // Measured cost of the dequant pass (H200, `bench_cuda_kernels scaled`, llama-3.1-8b shapes):
  // dequant_scaled of a whole 14336×4096 weight 57 µs (NVFP4), 49 (FP8), 62 (FP8 blocks); the
  // scaled matmul against bf16 at T = 512: +12-15 % (gate/up 382 vs 333 µs; the LM head,
  // dequantised in 4 blocks of rows, +24 %), at T = 2048: +4-5 % (1179 vs 1127 µs).
  void matmul_scaled_op(const void* x, int64_t T, const WeightRef& w, float* y, void* ws,
                        size_t ws_bytes, const MatmulPlan& p) {
    const ScaledWeight sw = scaled_weight(w);
    const bool fused = p.path == ScaledKernel::Fused ||
                       (p.path == ScaledKernel::Auto && T <= 64 && matmul_scaled_fused_ok(sw));
    if (!fused) {  // the preferred size exactly (not doubled: it is up to 128 MiB), or any of at
                   // least 128 rows inside a recording (the path works through smaller blocks)
      const size_t want = matmul_scaled_scratch_bytes(sw);
      const size_t least = size_t(std::min<int64_t>(w.rows, 128) * w.cols * 2);
      if (deq_bytes_ < want && !capturing()) {
        if (deq_) dealloc(deq_);
        deq_ = alloc(want);
        deq_bytes_ = want;
      }
      if (deq_bytes_ < least) fail("[cuda] the scaled matmul scratch must grow during a recording");
    }
    op(fused ? "matmul (fused)" : "matmul (dequant)", w.rows, w.cols, [&] {
      return matmul_scaled(static_cast<const bf16_bits*>(x), T, sw, y, stream_, p.path, ws,
                           ws_bytes, deq_, deq_bytes_, p.kseg, p.config);
    });
  }

  // --- passes ------------------------------------------------------------------------------
  // Packs ids, positions, cache slots, row → table and the block tables (one row per distinct
  // sequence, `stride_` wide) into pinned memory and copies them to the device in one transfer.
  void begin_pass(const PassRows& r) override {
    // The previous pass's rows may still be waiting in the stream to be copied from the pinned
    // buffer (a pass that ends without a download, e.g. Model::forward_context): the host
    // rewrites it only once that copy is done.
    if (meta_copied_) check(cudaEventSynchronize(meta_copied_), "pass rows (previous copy)");
    T_ = r.T;
    block_size_ = r.block_size;
    std::vector<const int32_t*> seqs;
    int64_t max_blocks = 1, max_pos = 0;
    row_table_h_.resize(size_t(r.T));
    for (int64_t t = 0; t < r.T; ++t) {
      auto it = std::find(seqs.begin(), seqs.end(), r.tables[t]);
      if (it == seqs.end()) {
        seqs.push_back(r.tables[t]);
        it = seqs.end() - 1;
        max_blocks = std::max(max_blocks, r.table_sizes[t]);
      }
      row_table_h_[size_t(t)] = int32_t(it - seqs.begin());
      max_pos = std::max(max_pos, r.pos[t]);
    }
    stride_ = int64_t(pow2_at_least(uint64_t(max_blocks)));
    row_per_seq_ = r.T > 1 && seqs.size() == size_t(r.T);
    // Bucketed so a recorded pass serves every context up to the bucket.
    max_pos_ = int64_t(pow2_at_least(uint64_t(max_pos / kAttnChunk + 1))) * kAttnChunk - 1;
    // [ids | positions | cache slots | row → table | tables (seqs × stride) | state slots |
    //  the last row's position, T times (the keys of a non-causal block: attention()) |
    //  state snapshot slots (gdn)]
    const size_t n_tables = seqs.size() * size_t(stride_);
    const size_t n = size_t(7 * r.T) + n_tables;
    if (n > meta_cap_) {
      if (pinned_) check(cudaFreeHost(pinned_), "cudaFreeHost");
      if (meta_) dealloc(meta_);
      meta_cap_ = std::max(n, meta_cap_ * 2);
      check(cudaMallocHost(reinterpret_cast<void**>(&pinned_), meta_cap_ * 4), "cudaMallocHost");
      meta_ = static_cast<int32_t*>(alloc(meta_cap_ * 4));
    }
    int32_t* h = pinned_;
    for (int64_t t = 0; t < r.T; ++t) {
      const int64_t p = r.pos[t];
      h[t] = r.ids[t];
      h[r.T + t] = int32_t(p);
      h[2 * r.T + t] =
          int32_t(int64_t(r.tables[t][p / r.block_size]) * r.block_size + p % r.block_size);
      h[3 * r.T + t] = row_table_h_[size_t(t)];
    }
    int32_t* tb = h + 4 * r.T;
    std::fill(tb, tb + seqs.size() * size_t(stride_), 0);
    for (int64_t t = 0; t < r.T; ++t) {
      int32_t* row = tb + int64_t(row_table_h_[size_t(t)]) * stride_;
      std::copy_n(r.tables[t], r.table_sizes[t], row);
    }
    int32_t* st = tb + n_tables;  // recurrent-state slots (hybrid models), else -1
    for (int64_t t = 0; t < r.T; ++t) st[t] = r.slots ? r.slots[t] : -1;
    std::fill(st + r.T, st + 2 * r.T, int32_t(r.pos[r.T - 1]));
    for (int64_t t = 0; t < r.T; ++t) st[2 * r.T + t] = r.snaps ? r.snaps[t] : -1;
    has_state_slots_ = r.slots != nullptr;
    check(cudaMemcpyAsync(meta_, pinned_, n * 4, cudaMemcpyHostToDevice, stream_), "pass rows");
    if (!meta_copied_)
      check(cudaEventCreateWithFlags(&meta_copied_, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventRecord(meta_copied_, stream_), "pass rows (event)");
    d_ids_ = meta_;
    d_pos_ = meta_ + r.T;
    d_slots_ = meta_ + 2 * r.T;
    d_row_table_ = meta_ + 3 * r.T;
    d_tables_ = meta_ + 4 * r.T;
    d_state_slots_ = d_tables_ + n_tables;
    d_block_pos_ = d_state_slots_ + r.T;
    d_snaps_ = d_block_pos_ + r.T;
    last_pos_ = r.pos[r.T - 1];
  }

  void run(uint64_t key, const std::function<void()>& program) override {
    if (!opt_.graphs || T_ > opt_.graph_max_rows) {
      program();
      return;
    }
    uint64_t k = key;
    for (uint64_t v : {uint64_t(T_), uint64_t(stride_), uint64_t(max_pos_), mem_generation_,
                       uint64_t(block_size_), uint64_t(row_per_seq_)})
      k = (k ^ v) * 0x100000001b3ull;
    auto it = graphs_.find(k);
    if (it != graphs_.end() && it->second.exec) {
      check(cudaGraphLaunch(it->second.exec, stream_), "cudaGraphLaunch");
      return;
    }
    if (it == graphs_.end()) {  // first sight: run eagerly (buffers settle), record next time
      graphs_[k] = Graph{};
      program();
      return;
    }
    if (graphs_.size() > 256) clear_graphs();
    cudaGraph_t g = nullptr;
    check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "begin capture");
    try {
      program();
    } catch (...) {
      cudaStreamEndCapture(stream_, &g);
      if (g) cudaGraphDestroy(g);
      throw;
    }
    check(cudaStreamEndCapture(stream_, &g), "end capture");
    cudaGraphExec_t exec = nullptr;
    check(cudaGraphInstantiate(&exec, g, 0), "cudaGraphInstantiate");
    cudaGraphDestroy(g);
    graphs_[k].exec = exec;
    check(cudaGraphLaunch(exec, stream_), "cudaGraphLaunch");
  }

  // --- ops ---------------------------------------------------------------------------------
  // The plan of the choices in force (cuda_tune.h): the weight shape's segments, the tiling or
  // scaled path of this T; without choices, the defaults.
  MatmulPlan plan_of(const WeightRef& w, int64_t T) const {
    return choices_.empty() ? MatmulPlan{}
                            : matmul_plan(choices_, kernel_dtype(w), T, w.rows, w.cols);
  }
  void matmul(const void* x, int64_t T, const WeightRef& w, float* y) override {
    matmul_run(x, T, w, y, plan_of(w, T), opt_.fast_prefill);
  }
  // Decode passes over scaled weights in the wgmma layout whose plans leave the path to Auto or
  // Fused (q / k / v): one launch (matmul_scaled_group: the bits of each weight's matmul_scaled);
  // false where it does not run (the caller runs the weights another way).
  // BASALT_CUDA_SCALED_GROUP=0 turns it off.
  bool scaled_group(const void* x, int64_t T, int n, const WeightRef* const* w, float* const* y) {
    constexpr int kMax = 3;
    if (!opt_.scaled_group || n < 2 || n > kMax || T < 1 || T > 64) return false;
    ScaledWeight sw[kMax];
    int64_t kseg[kMax];
    for (int i = 0; i < n; ++i) {
      if (!ref::is_scaled(*w[i])) return false;
      const MatmulPlan p = plan_of(*w[i], T);
      if (p.path == ScaledKernel::Dequant) return false;
      sw[i] = scaled_weight(*w[i]);
      kseg[i] = p.kseg;
      if (!sw[i].wg) return false;
    }
    void* ws = matmul_workspace(matmul_scaled_group_workspace_bytes(T, n, sw, kseg));
    bool refused = false;
    int64_t rows = 0;
    for (int i = 0; i < n; ++i) rows += sw[i].N;
    op("matmul (fused group)", rows, sw[0].K, [&] {
      const cudaError_t e = matmul_scaled_group(static_cast<const bf16_bits*>(x), T, n, sw, y, kseg,
                                                stream_, ws, ws ? mm_ws_bytes_ : 0);
      refused = e == cudaErrorNotSupported;
      return refused ? cudaSuccess : e;
    });
    return !refused;
  }
  // Gate / up scaled weights in the wgmma layout (T <= 64, paths Auto or Fused): one launch with
  // SwiGLU in its epilogue (matmul_scaled_swiglu); false where it does not run.
  // BASALT_CUDA_SCALED_SWIGLU=0 (or BASALT_CUDA_SCALED_GROUP=0) turns it off.
  bool scaled_swiglu(const void* x, int64_t T, const WeightRef& gate, const WeightRef& up,
                     void* out) {
    if (!opt_.scaled_group || !opt_.scaled_swiglu || !opt_.fuse || T < 1 || T > 64 ||
        !ref::is_scaled(gate) || !ref::is_scaled(up))
      return false;
    const MatmulPlan p = plan_of(gate, T), pu = plan_of(up, T);
    if (p.path == ScaledKernel::Dequant || pu.path == ScaledKernel::Dequant || p.kseg != pu.kseg)
      return false;
    const ScaledWeight sg = scaled_weight(gate), su = scaled_weight(up);
    if (!sg.wg || !su.wg) return false;
    void* ws = matmul_workspace(matmul_scaled_swiglu_workspace_bytes(T, sg, p.kseg));
    bool refused = false;
    op("matmul swiglu (fused)", 2 * sg.N, sg.K, [&] {
      const cudaError_t e = matmul_scaled_swiglu(static_cast<const bf16_bits*>(x), T, sg, su,
                                                 static_cast<bf16_bits*>(out), stream_, p.kseg, ws,
                                                 ws ? mm_ws_bytes_ : 0);
      refused = e == cudaErrorNotSupported;
      return refused ? cudaSuccess : e;
    });
    return !refused;
  }
  // Passes of up to 64 rows over bf16 weights of the same K whose plans leave the tiling to
  // Auto or RowsTMA run in one launch (matmul_bf16_group: each output has the bits of its own
  // matmul); anything else, one matmul each.
  void matmul_n(const void* x, int64_t T, int n, const WeightRef* const* w,
                float* const* y) override {
    constexpr int kMax = 3;
    MatmulPlan plans[kMax];
    if (scaled_group(x, T, n, w, y)) return;
    bool one = n > 1 && n <= kMax && T >= 1 && T <= 64 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
    for (int i = 0; one && i < n; ++i) {
      plans[i] = plan_of(*w[i], T);
      one = !ref::is_scaled(*w[i]) && w[i]->cols == w[0]->cols &&
            reinterpret_cast<uintptr_t>(w[i]->data) % 16 == 0 &&
            (plans[i].tiling == MatmulKernel::Auto || plans[i].tiling == MatmulKernel::RowsTMA);
    }
    if (!one) {
      Backend::matmul_n(x, T, n, w, y);
      return;
    }
    const bf16_bits* wp[kMax];
    int64_t N[kMax], kseg[kMax], rows = 0;
    for (int i = 0; i < n; ++i) {
      wp[i] = static_cast<const bf16_bits*>(w[i]->data);
      N[i] = w[i]->rows, kseg[i] = plans[i].kseg, rows += N[i];
    }
    const int64_t K = w[0]->cols;
    void* ws = matmul_workspace(matmul_group_workspace_bytes(T, n, N, K, kseg));
    bool refused = false;
    op("matmul group", rows, K, [&] {
      const cudaError_t e = matmul_bf16_group(static_cast<const bf16_bits*>(x), T, n, wp, N, K, y,
                                              kseg, stream_, ws, ws ? mm_ws_bytes_ : 0);
      refused = e == cudaErrorNotSupported;
      return refused ? cudaSuccess : e;
    });
    if (refused) Backend::matmul_n(x, T, n, w, y);
  }
  // bf16 gate / up weights whose plans leave the tiling to Auto or the fused launch's tilings
  // (RowsTMA up to 64 rows; TileTMA / TileTMA256 above, not with --fast-prefill): one launch that
  // applies SwiGLU in its epilogue (matmul_bf16_swiglu: the bits of the two matmuls and swiglu);
  // anything else, the two ops.
  void matmul_swiglu(const void* x, int64_t T, const WeightRef& gate, const WeightRef& up, float* g,
                     float* u, void* out) override {
    if (scaled_swiglu(x, T, gate, up, out)) return;
    const MatmulPlan p = plan_of(gate, T);
    const bool rows = T <= 64;
    const bool tiling_ok = rows
                               ? p.tiling == MatmulKernel::Auto || p.tiling == MatmulKernel::RowsTMA
                               : !opt_.fast_prefill && (p.tiling == MatmulKernel::Auto ||
                                                        p.tiling == MatmulKernel::TileTMA ||
                                                        p.tiling == MatmulKernel::TileTMA256);
    const bool fuse = opt_.fuse && T >= 1 && tiling_ok && !ref::is_scaled(gate) &&
                      !ref::is_scaled(up) && gate.rows == up.rows && gate.cols == up.cols &&
                      (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(gate.data) |
                       reinterpret_cast<uintptr_t>(up.data)) %
                              16 ==
                          0;
    bool refused = !fuse;
    // Split-K as matmul_n's launch, up to 64 rows.
    void* ws =
        fuse && rows
            ? matmul_workspace(matmul_swiglu_workspace_bytes(T, gate.rows, gate.cols, p.kseg))
            : nullptr;
    const size_t ws_bytes = ws ? mm_ws_bytes_ : 0;
    if (fuse)
      op("matmul swiglu", 2 * gate.rows, gate.cols, [&] {
        const cudaError_t e = matmul_bf16_swiglu(
            static_cast<const bf16_bits*>(x), T, static_cast<const bf16_bits*>(gate.data),
            static_cast<const bf16_bits*>(up.data), gate.rows, gate.cols,
            static_cast<bf16_bits*>(out), stream_, p.kseg, p.tiling, ws, ws_bytes);
        refused = e == cudaErrorNotSupported;
        return refused ? cudaSuccess : e;
      });
    if (refused) Backend::matmul_swiglu(x, T, gate, up, g, u, out);
  }
  // The split-K workspace, grown to `need` outside recordings only; nullptr where it is still
  // smaller (inside a recording: the kernels then fold in registers, the same bits).
  void* matmul_workspace(size_t need) {
    if (need > mm_ws_bytes_ && !capturing()) {
      if (mm_ws_) dealloc(mm_ws_);
      mm_ws_bytes_ = std::max(need, mm_ws_bytes_ * 2);
      mm_ws_ = alloc(mm_ws_bytes_);
    }
    return need <= mm_ws_bytes_ ? mm_ws_ : nullptr;
  }
  // Decode-sized passes run split-K with a workspace (more blocks in flight); it grows outside
  // recordings only (inside one, the kernel folds in registers: the same bits).
  void matmul_run(const void* x, int64_t T, const WeightRef& w, float* y, const MatmulPlan& p,
                  bool cublas_prefill) {
    void* ws = nullptr;
    size_t ws_bytes = 0;
    const int64_t kseg = p.kseg ? std::min(p.kseg, w.cols) : matmul_kseg(w.rows, w.cols);
    if (T <= 64 && kseg < w.cols) {
      ws = matmul_workspace(matmul_workspace_bytes(T, w.rows, w.cols, p.kseg));
      ws_bytes = ws ? mm_ws_bytes_ : 0;
    }
    if (ref::is_scaled(w)) {
      matmul_scaled_op(x, T, w, y, ws, ws_bytes, p);
      return;
    }
    if (cublas_prefill && T > 64) {  // non-exact: cuBLAS picks its own reduction order
      op("matmul (cuBLAS)", w.rows, w.cols, [&] {
        if (!cublas_) {
          const Cublas* cb = Cublas::get();
          if (!cb) fail("[cuda] --fast-prefill needs libcublas, which could not be loaded");
          if (cb->create(&cublas_) != 0) fail("[cuda] cublasCreate failed");
          cb->set_stream(cublas_, stream_);
        }
        return Cublas::get()->matmul(cublas_, x, T, w.data, w.rows, w.cols, y) == 0
                   ? cudaSuccess
                   : cudaErrorUnknown;
      });
      return;
    }
    op("matmul", w.rows, w.cols, [&] {
      return matmul_bf16(static_cast<const bf16_bits*>(x), T, static_cast<const bf16_bits*>(w.data),
                         w.rows, w.cols, y, stream_, p.tiling, ws, ws_bytes, p.kseg);
    });
  }
  void rmsnorm(const float* x, const float* w, void* y, int64_t rows, int64_t n,
               float eps) override {
    op("rmsnorm", 0, 0, [&] {
      return rmsnorm_residual(const_cast<float*>(x), nullptr, w, static_cast<bf16_bits*>(y), rows,
                              n, eps, stream_);
    });
  }
  void add_rmsnorm(float* x, const float* delta, const float* w, void* y, int64_t rows, int64_t n,
                   float eps) override {
    op("add_rmsnorm", 0, 0, [&] {
      return rmsnorm_residual(x, delta, w, static_cast<bf16_bits*>(y), rows, n, eps, stream_);
    });
  }
  void head_rmsnorm(float* x, const float* w, int64_t rows, int64_t n, float eps) override {
    op("head_rmsnorm", 0, 0, [&] { return cuda::head_rmsnorm(x, w, rows, n, eps, stream_); });
  }
  void embedding(const WeightRef& table, float* out) override {
    op("embedding", 0, 0, [&] {
      return cuda::embedding(static_cast<const bf16_bits*>(table.data), table.rows, table.cols,
                             d_ids_, T_, out, stream_);
    });
  }
  void rope_angles(const float* inv_freq, int64_t half, float* cos, float* sin) override {
    op("rope_angles", 0, 0,
       [&] { return cuda::rope_angles(d_pos_, inv_freq, T_, half, cos, sin, stream_); });
  }
  void rope(float* x, int64_t T, int64_t heads, int64_t D, int64_t rot, const float* cos,
            const float* sin, RopeStyle style) override {
    op("rope", 0, 0, [&] {
      return cuda::rope(x, T, heads, D, rot, cos, sin,
                        style == RopeStyle::NeoX ? RopeLayout::NeoX : RopeLayout::Interleaved,
                        stream_);
    });
  }
  void add_bias(float* y, const float* b, int64_t T, int64_t n) override {
    op("add_bias", 0, 0, [&] { return cuda::add_bias(y, b, T, n, stream_); });
  }
  void kv_write(const float* k, const float* v, void* k_cache, void* v_cache, int64_t Hkv,
                int64_t D) override {
    const int64_t row = Hkv * D;
    if (kv_ == DType::F8_E4M3) {
      op("kv_write", 0, 0, [&] {
        return cuda::kv_write_fp8(k, v, d_slots_, T_, Hkv, D, block_size_,
                                  static_cast<uint8_t*>(k_cache), static_cast<uint8_t*>(v_cache),
                                  stream_);
      });
      return;
    }
    op("kv_write", 0, 0, [&] {
      return cuda::kv_write(k, v, d_slots_, T_, row, static_cast<bf16_bits*>(k_cache),
                            static_cast<bf16_bits*>(v_cache), stream_);
    });
  }
  // One launch where the cache is bf16 and the rows are the pass's (the E4M3 cache's per-row
  // scales need a reduction: the separate ops).
  void rope_kv_write(const RopeKvArgs& a) override {
    if (!opt_.fuse || kv_ == DType::F8_E4M3 || a.T != T_ || !a.q_norm != !a.k_norm) {
      Backend::rope_kv_write(a);
      return;
    }
    op("rope_kv_write", 0, 0, [&] {
      return cuda::rope_kv_write(
          a.q, a.k, a.v, d_slots_, a.T, a.H, a.Hkv, a.D, a.rot, a.cos, a.sin,
          a.style == RopeStyle::NeoX ? RopeLayout::NeoX : RopeLayout::Interleaved,
          static_cast<bf16_bits*>(a.k_cache), static_cast<bf16_bits*>(a.v_cache), stream_, a.q_norm,
          a.k_norm, a.eps);
    });
  }
  // A non-causal block (AttentionArgs::block_last: a DSpark drafter's block, the whole pass of
  // one sequence) runs the causal kernels with every row's position read as the last row's
  // (begin_pass's copy): each row attends keys 0..block_last, with the same chunks and the same
  // order as a decode row at that position.
  bool supports_block_attention() const override { return true; }
  void attention(const AttentionArgs& a) override {
    if (a.block_last >= 0 && (a.T != T_ || a.block_last != last_pos_))
      fail(
          "[cuda] block attention: the block must be the pass's {} rows and end at its last "
          "position {} (got {} rows, keys 0..{})",
          T_, last_pos_, a.T, a.block_last);
    const bool fp8 = kv_ == DType::F8_E4M3;
    AttnKernel k = choices_.empty() ? AttnKernel::Auto
                                    : attention_plan(choices_, fp8 ? "fp8" : "bf16", a.T, a.H, a.D,
                                                     a.Hkv, attention_ctx_bucket(max_pos_ + 1));
    if (k == AttnKernel::Auto && opt_.attn_kernel && a.T > 64)
      k = static_cast<AttnKernel>(opt_.attn_kernel);
    attention_run(a, k, fp8);
  }
  void attention_run(const AttentionArgs& a, AttnKernel kernel, bool fp8) {
    AttnArgs c;
    c.q = a.q;
    if (fp8) {
      c.k8 = static_cast<const uint8_t*>(a.k);
      c.v8 = static_cast<const uint8_t*>(a.v);
    } else {
      c.k = static_cast<const bf16_bits*>(a.k);
      c.v = static_cast<const bf16_bits*>(a.v);
    }
    c.out = static_cast<bf16_bits*>(a.out);
    c.T = a.T, c.H = a.H, c.Hkv = a.Hkv, c.D = a.D;
    c.scale = a.scale;
    c.pos = a.block_last >= 0 ? d_block_pos_ : d_pos_;
    c.tables = d_tables_;
    c.row_table = d_row_table_;
    c.table_stride = stride_;
    c.block_size = a.block_size;
    c.max_pos = max_pos_;
    c.rows_own_seq = opt_.attn_batch_hint && row_per_seq_;
    // The split kernel's workspace grows with T × context: only passes that may take it
    // (cuda::attention's Auto choice, or a recipe's split) get one; the others run the fused
    // kernel (same bits).
    const bool may_split =
        kernel == AttnKernel::Split ||
        (kernel == AttnKernel::Auto && cuda::attention_may_split(a.T, a.H, a.Hkv, a.D));
    const size_t ws = may_split ? attention_workspace_bytes(a.T, a.H, a.D, max_pos_ + 1) : 0;
    grow(ws_, ws_bytes_, ws, "attention");
    c.workspace = ws ? static_cast<float*>(ws_) : nullptr;
    c.workspace_bytes = ws ? ws_bytes_ : 0;
    // merge_fold (BASALT_CUDA_MERGE_FOLD=1): decode's split passes merge in their last blocks
    // (zeroed counters) instead of a merge launch.
    if (ws && opt_.fuse && opt_.merge_fold) {
      grow(attn_counters_, attn_counters_bytes_, kAttnFoldCounters * sizeof(unsigned),
           "attention counters");
      c.counters = static_cast<unsigned*>(attn_counters_);
    }
    op("attention", 0, 0, [&] { return cuda::attention(c, stream_, kernel); });
  }
  void swiglu(const float* gate, const float* up, void* out, int64_t n) override {
    op("swiglu", 0, 0,
       [&] { return cuda::swiglu(gate, up, static_cast<bf16_bits*>(out), n, stream_); });
  }
  void argmax_rows(const float* x, int64_t rows, int64_t n, int32_t* out) override {
    op("argmax", 0, 0, [&] { return cuda::argmax_rows(x, rows, n, out, stream_); });
  }
  void add(float* y, const float* x, int64_t n) override {
    op("add", 0, 0, [&] { return add_f32(y, x, n, stream_); });
  }

  // --- hybrid and MoE models (hybrid.cu, moe_matmul in matmul.cu) --------------------------
  bool supports_hybrid() const override { return true; }
  bool supports_moe() const override { return true; }
  // moe_matmul reads bf16 experts (f32/f16 ones are rounded at upload); no scaled variant yet.
  bool supports_expert_weight(DType t) const override {
    return supports_weight(t) && t != DType::NVFP4 && t != DType::F8_E4M3;
  }
  void sigmoid_mul(void* y, const float* gate, int64_t n) override {
    op("sigmoid_mul", 0, 0,
       [&] { return cuda::sigmoid_mul(static_cast<bf16_bits*>(y), gate, n, stream_); });
  }
  void gated_add(float* y, const float* s, const float* g, int64_t T, int64_t n) override {
    op("gated_add", 0, 0, [&] { return cuda::gated_add(y, s, g, T, n, stream_); });
  }
  void gated_rmsnorm(const float* x, const float* z, const float* w, void* y, int64_t rows,
                     int64_t n, float eps) override {
    op("gated_rmsnorm", 0, 0, [&] {
      return cuda::gated_rmsnorm(x, z, w, static_cast<bf16_bits*>(y), rows, n, eps, stream_);
    });
  }
  // The pass's rows: slots and positions from begin_pass's device copy (a recorded graph
  // reads them at replay); the conv output [T, C] and the gates [T, Hv, 2] in a backend scratch.
  void gdn(const GdnArgs& g) override {
    if (!has_state_slots_) fail("[cuda] gdn: the pass has no state slots");
    if (g.T != T_) fail("[cuda] gdn: {} rows in a pass of {}", g.T, T_);
    if (g.Hk <= 0 || g.Dk > kGdnMaxDk || g.K > kGdnMaxK || g.Hv % g.Hk)
      fail(
          "[cuda] gdn: key head dim {} (at most {}), conv kernel {} (at most {}), {} value "
          "heads over {} key heads: not supported",
          g.Dk, kGdnMaxDk, g.K, kGdnMaxK, g.Hv, g.Hk);
    const size_t need = gdn_scratch_floats(g.T, g.Hk, g.Hv, g.Dk, g.Dv) * 4;
    grow(gdn_ws_, gdn_ws_bytes_, need, "gdn");
    GdnKernelArgs a;
    a.qkv = g.qkv, a.b = g.b, a.a = g.a, a.conv_w = g.conv_w, a.A_log = g.A_log;
    a.dt_bias = g.dt_bias, a.conv_state = g.conv_state, a.rec_state = g.rec_state;
    a.out = g.out, a.slots = d_state_slots_, a.pos = d_pos_, a.snaps = d_snaps_;
    a.u = static_cast<float*>(gdn_ws_);
    a.T = g.T, a.Hk = g.Hk, a.Hv = g.Hv, a.Dk = g.Dk, a.Dv = g.Dv, a.K = g.K;
    op("gdn", 0, 0, [&] { return cuda::gdn(a, stream_); });
  }
  void moe(const MoeArgs& m) override {
    if (m.n_experts > kMoeMaxExperts || m.top_k > kMoeMaxTopK || m.top_k > m.n_experts || m.E % 8 ||
        m.F % 8)
      fail(
          "[cuda] moe: {} experts (at most {}), top {} (at most {}), sizes {}, {} (multiples "
          "of 8): not supported",
          m.n_experts, kMoeMaxExperts, m.top_k, kMoeMaxTopK, m.E, m.F);
    MoeKernelArgs a;
    a.x = static_cast<const bf16_bits*>(m.x);
    a.router = m.router, a.out = m.out;
    a.T = m.T, a.E = m.E, a.F = m.F, a.n_experts = m.n_experts, a.top_k = m.top_k;
    a.norm_topk = m.norm_topk;
    a.combine_fold = opt_.combine_fold;
    const ExpertTable& tab = expert_table(m);
    a.gate = tab.dev(), a.up = tab.dev() + m.n_experts, a.down = tab.dev() + 2 * m.n_experts;
    moe_run(a, moe_plan(choices_, "bf16", m.T, m.F, m.E, m.n_experts, m.top_k));
  }
  // The experts with tiling `k`, on the backend's workspace (moe and run_variant).
  void moe_run(MoeKernelArgs& a, MatmulKernel k) {
    const size_t need = moe_workspace_bytes(a.T, a.E, a.F, a.n_experts, a.top_k);
    grow(moe_ws_, moe_ws_bytes_, need, "moe");
    a.workspace = moe_ws_, a.workspace_bytes = moe_ws_bytes_;
    a.kernel = k;
    op("moe", 0, 0, [&] { return cuda::moe(a, stream_); });
  }

  // --- kernel variants and recipes (cuda_tune.h) ---------------------------------------------
  DeviceIdentity identity() const override { return device_identity(opt_.device); }
  std::vector<OpKernels> kernel_registry() const override {
    return cuda::kernel_registry(&choices_);
  }
  // F32 and F16 matrices run as bf16 (rounded at upload); scaled ones in their format.
  std::string kernel_dtype(const WeightRef& w) const override {
    if (w.dtype == DType::BF16 || w.dtype == DType::F16 || w.dtype == DType::F32) return "bf16";
    return ref::is_scaled(w) ? scaled_kernel_dtype(w) : Backend::kernel_dtype(w);
  }
  // Through the passes' own code (matmul_run, attention_run), never cuBLAS.
  VariantRun run_variant(const OpShape& shape, const KernelVariant& v, int warmup, int reps,
                         bool want_output) override {
    VariantOps ops;
    ops.matmul = [this](const void* x, int64_t T, const WeightRef& w, float* y,
                        const MatmulPlan& p) { matmul_run(x, T, w, y, p, false); };
    ops.begin_pass = [this](const PassRows& r) { begin_pass(r); };
    ops.attention = [this](const AttentionArgs& a, AttnKernel k) {
      attention_run(a, k, a.kv == DType::F8_E4M3);
    };
    ops.moe = [this](MoeKernelArgs& a, MatmulKernel k) { moe_run(a, k); };
    return bench_.run(kernel_registry(), choices_, ops, opt_.device, stream_, shape, v, warmup,
                      reps, want_output);
  }
  // Choices this backend cannot run are dropped (usable_choices); recordings hold the old
  // choices' launches, so they go.
  void set_kernel_choices(KernelChoices c) override {
    check(cudaStreamSynchronize(stream_), "set_kernel_choices");
    choices_ = std::move(c);
    choices_ = usable_choices(choices_, kernel_registry());
    clear_graphs();
  }

 private:
  // Runs one launch; with profiling, between two events attributed to `name` (and the weight
  // shape for matmuls) and the pass kind (T = 1 decode, 2-64 rows: serving steps and
  // verification, or a longer pass: prefill).
  template <class F>
  void op(const char* name, int64_t N, int64_t K, F&& launch) {
    if (!opt_.profile) {
      check(launch(), name);
      return;
    }
    cudaEvent_t a = event(), b = event();
    check(cudaEventRecord(a, stream_), "event");
    check(launch(), name);
    check(cudaEventRecord(b, stream_), "event");
    std::string key = N ? fmt::format("{} {}x{}", name, N, K) : std::string(name);
    const char* pass = T_ == 1 ? "T=1" : T_ <= 64 ? "T<=64" : "T>64";
    pending_.push_back({fmt::format("{:<5} {}", pass, key), a, b});
  }
  cudaEvent_t event() {
    if (!free_events_.empty()) {
      cudaEvent_t e = free_events_.back();
      free_events_.pop_back();
      return e;
    }
    cudaEvent_t e;
    check(cudaEventCreate(&e), "cudaEventCreate");
    events_.push_back(e);
    return e;
  }
  void collect_profile() {
    for (const Pending& p : pending_) {
      float ms = 0;
      check(cudaEventElapsedTime(&ms, p.a, p.b), "cudaEventElapsedTime");
      auto& st = profile_[p.key];
      st.first += 1, st.second += double(ms);
      free_events_.push_back(p.a), free_events_.push_back(p.b);
    }
    pending_.clear();
  }
  void print_profile() const {
    std::vector<std::pair<std::string, std::pair<int64_t, double>>> rows(profile_.begin(),
                                                                         profile_.end());
    std::sort(rows.begin(), rows.end(),
              [](auto& a, auto& b) { return a.second.second > b.second.second; });
    double total = 0;
    for (auto& r : rows) total += r.second.second;
    std::fprintf(stderr, "\n[cuda profile] %.1f ms of kernel time (events around each launch)\n",
                 total);
    std::fprintf(stderr, "%-44s %9s %11s %10s %7s\n", "op", "calls", "total ms", "mean us",
                 "share");
    for (auto& [k, v] : rows)
      std::fprintf(stderr, "%-44s %9lld %11.2f %10.2f %6.1f%%\n", k.c_str(), (long long)v.first,
                   v.second, 1e3 * v.second / double(v.first), 100 * v.second / total);
  }
  struct Pending {
    std::string key;
    cudaEvent_t a, b;
  };
  std::vector<Pending> pending_;
  std::vector<cudaEvent_t> events_, free_events_;
  std::map<std::string, std::pair<int64_t, double>> profile_;
  void* cublas_ = nullptr;

  struct Graph {
    cudaGraphExec_t exec = nullptr;
  };
  bool capturing() {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    check(cudaStreamIsCapturing(stream_, &st), "capture status");
    return st != cudaStreamCaptureStatusNone;
  }
  void clear_graphs() {
    for (auto& [k, g] : graphs_)
      if (g.exec) cudaGraphExecDestroy(g.exec);
    graphs_.clear();
  }
  // An op's workspace, grown (doubling) outside recordings only: a reallocation frees the old
  // buffer, which drops every recording and changes the memory generation of later keys.
  void grow(void*& buf, size_t& bytes, size_t need, const char* what) {
    if (need <= bytes) return;
    if (capturing()) fail("[cuda] {} workspace must grow during a recording", what);
    if (buf) dealloc(buf);
    bytes = std::max(need, bytes * 2);
    buf = alloc(bytes);
  }
  // The experts of one MoE layer as a device table [gate | up | down] × n_experts of device
  // pointers, built the first time the layer's host array is seen and re-checked (pointer by
  // pointer) on every call, so a reused host address never serves stale pointers. Uploads
  // happen outside recordings only (the first sight of every pass key runs eagerly).
  struct ExpertTable {
    std::vector<const void*> host;  // 3 · n_experts
    void* mem = nullptr;            // the same on the device
    const bf16_bits* const* dev() const { return static_cast<const bf16_bits* const*>(mem); }
  };
  const ExpertTable& expert_table(const MoeArgs& m) {
    const int64_t n = m.n_experts;
    table_scratch_.resize(size_t(3 * n));
    for (int64_t e = 0; e < n; ++e) {
      table_scratch_[size_t(e)] = m.gate[e].data;
      table_scratch_[size_t(n + e)] = m.up[e].data;
      table_scratch_[size_t(2 * n + e)] = m.down[e].data;
    }
    ExpertTable& t = expert_tables_[m.gate];
    if (t.mem && t.host == table_scratch_) return t;
    if (capturing()) fail("[cuda] moe: an expert table would be built during a recording");
    for (int64_t e = 0; e < n; ++e) {
      auto bad = [&](const WeightRef& w, int64_t rows, int64_t cols) {
        return w.dtype != DType::BF16 || w.rows != rows || w.cols != cols || !w.data;
      };
      if (bad(m.gate[e], m.F, m.E) || bad(m.up[e], m.F, m.E) || bad(m.down[e], m.E, m.F))
        fail("[cuda] moe: expert {} is not a prepared bf16 [{}, {}] / [{}, {}] set", e, m.F, m.E,
             m.E, m.F);
    }
    if (!t.mem || t.host.size() != table_scratch_.size()) {
      if (t.mem) dealloc(t.mem);
      t.mem = alloc(table_scratch_.size() * sizeof(void*));
    }
    upload(t.mem, table_scratch_.data(), table_scratch_.size() * sizeof(void*));
    t.host = table_scratch_;
    return t;
  }

  CudaOptions opt_;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  std::unordered_map<void*, size_t> sizes_;
  size_t live_ = 0, peak_ = 0;
  uint64_t mem_generation_ = 0;
  bool warned_convert_ = false;
  // The current pass.
  int64_t T_ = 0, stride_ = 1, max_pos_ = 0, block_size_ = 0;
  std::vector<int32_t> row_table_h_;
  bool row_per_seq_ = false;  // begin_pass: T > 1 rows, each a sequence of its own
  int32_t* pinned_ = nullptr;
  cudaEvent_t meta_copied_ = nullptr;  // recorded after the pinned rows' copy (begin_pass)
  int32_t* meta_ = nullptr;
  size_t meta_cap_ = 0;
  DType kv_ = DType::BF16;
  const int32_t *d_ids_ = nullptr, *d_pos_ = nullptr, *d_slots_ = nullptr, *d_row_table_ = nullptr,
                *d_tables_ = nullptr, *d_state_slots_ = nullptr, *d_block_pos_ = nullptr,
                *d_snaps_ = nullptr;
  int64_t last_pos_ = -1;  // the pass's last row's position
  bool has_state_slots_ = false;
  void* ws_ = nullptr;  // attention's split workspace (f32 partials)
  size_t ws_bytes_ = 0;
  void* attn_counters_ = nullptr;  // the folded merge's counters (zero between passes)
  size_t attn_counters_bytes_ = 0;
  void* mm_ws_ = nullptr;
  size_t mm_ws_bytes_ = 0;
  void* deq_ = nullptr;  // matmul_scaled's dequant scratch (bf16 inner values)
  std::unordered_set<const void*> frag_;  // NVFP4 codes kept in the fragment layout
  std::unordered_set<const void*> wg_;    // NVFP4 / FP8 weights kept in the wgmma layout
  size_t deq_bytes_ = 0;
  void *gdn_ws_ = nullptr, *moe_ws_ = nullptr;
  size_t gdn_ws_bytes_ = 0, moe_ws_bytes_ = 0;
  std::unordered_map<const WeightRef*, ExpertTable> expert_tables_;
  std::vector<const void*> table_scratch_;
  std::unordered_map<uint64_t, Graph> graphs_;
  VariantBench bench_;  // run_variant's inputs
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const CudaOptions& opt) {
  CudaOptions o = opt;
  if (const char* p = std::getenv("BASALT_CUDA_PROFILE"); p && std::string(p) == "1")
    o.profile = true;
  if (const char* p = std::getenv("BASALT_CUDA_FUSE"); p && std::string(p) == "0") o.fuse = false;
  if (const char* p = std::getenv("BASALT_CUDA_MOE_COMBINE_FOLD"); p && std::string(p) == "0")
    o.combine_fold = false;
  if (const char* p = std::getenv("BASALT_CUDA_MERGE_FOLD"); p && std::string(p) == "1")
    o.merge_fold = true;
  if (const char* p = std::getenv("BASALT_CUDA_SCALED_GROUP"); p && std::string(p) == "0")
    o.scaled_group = false;
  if (const char* p = std::getenv("BASALT_CUDA_SCALED_SWIGLU"); p && std::string(p) == "0")
    o.scaled_swiglu = false;
  if (const char* p = std::getenv("BASALT_CUDA_ATTN_BATCH"); p && std::string(p) == "0")
    o.attn_batch_hint = false;
  if (const char* p = std::getenv("BASALT_CUDA_ATTN"))
    o.attn_kernel = static_cast<uint8_t>(attention_kernel_named(p));
  return std::make_unique<CudaBackend>(o);
}

}  // namespace basalt::cuda
