// Every CPU kernel against the scalar reference (ops/ref), on random data and awkward
// shapes. Tolerances: fp32 accumulation in a different order than the reference's serial
// sum gives relative errors ~1e-6·sqrt(K); we allow 1e-5 relative to the row's magnitude.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/dtype.h"
#include "ops/ref/qdot.h"
#include "ops/ref/ref_ops.h"
#include "ops_test_util.h"

namespace basalt {
namespace {

using test::randn;

// Weight storage of one dtype built from f32 values (rounded like a checkpoint would be).
struct TestWeight {
  std::vector<uint8_t> bytes;
  WeightRef ref;
  TestWeight(DType t, int64_t N, int64_t K, const std::vector<float>& v) {
    ref = {t, N, K, nullptr};
    if (t == DType::F32) {
      bytes.resize(v.size() * 4);
      std::memcpy(bytes.data(), v.data(), bytes.size());
    } else if (t == DType::F16 || t == DType::BF16) {
      bytes.resize(v.size() * 2);
      auto* p = reinterpret_cast<uint16_t*>(bytes.data());
      for (size_t i = 0; i < v.size(); ++i)
        p[i] = t == DType::F16 ? f32_to_f16(v[i]) : f32_to_bf16(v[i]);
    } else if (t == DType::Q8_0) {
      bytes.resize(size_t(N * (K / 32) * 34));
      for (int64_t n = 0; n < N; ++n)
        for (int64_t b = 0; b < K / 32; ++b) {
          float amax = 0;
          for (int j = 0; j < 32; ++j)
            amax = std::max(amax, std::fabs(v[size_t(n * K + b * 32 + j)]));
          const float d = amax / 127.0f;
          uint8_t* blk = bytes.data() + (n * (K / 32) + b) * 34;
          const uint16_t dh = f32_to_f16(d);
          std::memcpy(blk, &dh, 2);
          for (int j = 0; j < 32; ++j) {
            const float x = v[size_t(n * K + b * 32 + j)];
            blk[2 + j] = uint8_t(int8_t(d == 0 ? 0 : std::lround(x / d)));
          }
        }
    }
    ref.data = bytes.data();
  }
};

struct MatmulShape {
  int64_t T, N, K;
  DType dtype;
};

class MatmulVsRef : public ::testing::TestWithParam<MatmulShape> {};

TEST_P(MatmulVsRef, MatchesReference) {
  const auto [T, N, K, dt] = GetParam();
  const auto x = randn(size_t(T * K), 1);
  TestWeight w(dt, N, K, randn(size_t(N * K), 2, 0.5f));
  std::vector<float> want(size_t(T * N)), got(size_t(T * N), NAN);
  ref::matmul(x.data(), T, w.ref, want.data());
  cpu::make_cpu_backend(2, false)->matmul(x.data(), T, w.ref, got.data());
  EXPECT_TRUE(test::matmul_within_bound(x, T, w.ref, got, want, 1e-6));  // eps · Σ|x·w|
  if (ref::q8_acts_supported(dt)) {  // the default for block weights: 8-bit activations
    ref::matmul_q8(x.data(), T, w.ref, want.data());
    cpu::make_cpu_backend(2)->matmul(x.data(), T, w.ref, got.data());
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4));
  }
}

INSTANTIATE_TEST_SUITE_P(
    AwkwardShapes, MatmulVsRef,
    ::testing::Values(MatmulShape{1, 1, 1, DType::F32}, MatmulShape{1, 31, 33, DType::F32},
                      MatmulShape{7, 33, 127, DType::F32}, MatmulShape{5, 17, 64, DType::BF16},
                      MatmulShape{9, 31, 127, DType::BF16}, MatmulShape{3, 33, 255, DType::F16},
                      MatmulShape{1, 64, 1000, DType::F16}, MatmulShape{6, 19, 96, DType::Q8_0},
                      MatmulShape{1, 127, 256, DType::Q8_0}, MatmulShape{16, 64, 64, DType::F32}));

// prepare_weight copies a weight into the backend's huge-page arena: the same bytes at another
// (64-byte aligned) address, the same products bit for bit; BASALT_CPU_MMAP_WEIGHTS=1 keeps
// the caller's memory. A copy of several MiB spans more than one 2 MiB piece of the parallel
// copy.
TEST(CpuBackend, PrepareWeightCopiesTheBytes) {
  const int64_t T = 3;
  for (auto [dt, N, K] : std::vector<std::tuple<DType, int64_t, int64_t>>{
           {DType::F16, 37, 200}, {DType::Q8_0, 1500, 2048}, {DType::F32, 1, 1}}) {
    const auto x = randn(size_t(T * K), 5);
    TestWeight w(dt, N, K, randn(size_t(N * K), 6));
    auto be = cpu::make_cpu_backend(2);
    const WeightRef c = be->prepare_weight(w.ref);
    EXPECT_NE(c.data, w.ref.data) << dtype_name(dt);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(c.data) % 64, 0u);
    EXPECT_EQ(c.dtype, dt);
    EXPECT_EQ(c.rows, N);
    EXPECT_EQ(c.cols, K);
    ASSERT_EQ(0, std::memcmp(c.data, w.ref.data, w.bytes.size())) << dtype_name(dt);
    std::vector<float> a(size_t(T * N)), b(size_t(T * N));
    be->matmul(x.data(), T, w.ref, a.data());
    be->matmul(x.data(), T, c, b.data());
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << dtype_name(dt);
    // A second weight lands after the first, not over it.
    const WeightRef c2 = be->prepare_weight(w.ref);
    EXPECT_GE(static_cast<const char*>(c2.data), static_cast<const char*>(c.data) + w.bytes.size());
    EXPECT_EQ(0, std::memcmp(c.data, w.ref.data, w.bytes.size()));
  }
  setenv("BASALT_CPU_MMAP_WEIGHTS", "1", 1);
  TestWeight w(DType::F32, 4, 8, randn(32, 7));
  EXPECT_EQ(cpu::make_cpu_backend(1)->prepare_weight(w.ref).data, w.ref.data);
  unsetenv("BASALT_CPU_MMAP_WEIGHTS");
}

// The exactness contract at the kernel level: row t of a T-row matmul is bitwise the
// result of the same row alone (T=1), and the thread count changes nothing.
TEST(MatmulExact, RowsIndependentOfTAndThreads) {
  const int64_t T = 13, N = 37, K = 200;
  for (DType dt : {DType::F32, DType::BF16, DType::F16, DType::Q8_0}) {
    const int64_t KK = dt == DType::Q8_0 ? 224 : K;
    const auto x = randn(size_t(T * KK), 3);
    TestWeight w(dt, N, KK, randn(size_t(N * KK), 4));
    auto be1 = cpu::make_cpu_backend(1), be2 = cpu::make_cpu_backend(2);
    std::vector<float> all(size_t(T * N)), all1(size_t(T * N)), one(static_cast<size_t>(N));
    be2->matmul(x.data(), T, w.ref, all.data());
    be1->matmul(x.data(), T, w.ref, all1.data());
    EXPECT_EQ(0, std::memcmp(all.data(), all1.data(), all.size() * 4)) << dtype_name(dt);
    for (int64_t t = 0; t < T; ++t) {
      be2->matmul(x.data() + t * KK, 1, w.ref, one.data());
      EXPECT_EQ(0, std::memcmp(one.data(), all.data() + t * N, size_t(N) * 4))
          << dtype_name(dt) << " row " << t;
    }
  }
}

TEST(OpsVsRef, RmsnormSwigluAddEmbeddingRope) {
  auto be = cpu::make_cpu_backend(2);
  const int64_t rows = 7, n = 33;
  const auto x = randn(size_t(rows * n), 5), w = randn(size_t(n), 6);
  std::vector<float> a(x.size()), b(x.size());
  ref::rmsnorm(x.data(), w.data(), a.data(), rows, n, 1e-6f);
  be->rmsnorm(x.data(), w.data(), b.data(), rows, n, 1e-6f);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6f * std::fabs(a[i]) + 1e-7f);

  const auto g = randn(1031, 7), u = randn(1031, 8);
  std::vector<float> s1(1031), s2(1031);
  ref::swiglu(g.data(), u.data(), s1.data(), 1031);
  be->swiglu(g.data(), u.data(), s2.data(), 1031);
  for (size_t i = 0; i < s1.size(); ++i) EXPECT_FLOAT_EQ(s1[i], s2[i]);

  const int64_t V = 11, E = 9;
  const auto table = randn(size_t(V * E), 9);
  TestWeight tw(DType::BF16, V, E, table);
  const int32_t ids[3] = {10, 0, 4};
  std::vector<float> e1(3 * E), e2(3 * E);
  ref::embedding(tw.ref, ids, 3, e1.data());
  PassRows pr;
  pr.T = 3, pr.ids = ids;
  be->begin_pass(pr);
  be->embedding(tw.ref, e2.data());
  EXPECT_EQ(e1, e2);

  for (RopeStyle st : {RopeStyle::NeoX, RopeStyle::Interleaved}) {
    const int64_t T = 3, heads = 2, D = 10, rot = 6;
    auto q = randn(size_t(T * heads * D), 10);
    const auto c = randn(size_t(T * rot / 2), 11), s = randn(size_t(T * rot / 2), 12);
    auto q1 = q, q2 = q;
    ref::rope(q1.data(), T, heads, D, rot, c.data(), s.data(), st);
    be->rope(q2.data(), T, heads, D, rot, c.data(), s.data(), st);
    EXPECT_EQ(q1, q2);
    // Dims past `rot` are untouched.
    for (int64_t t = 0; t < T * heads; ++t)
      for (int64_t i = rot; i < D; ++i) EXPECT_EQ(q1[size_t(t * D + i)], q[size_t(t * D + i)]);
  }
}

// Paged attention: two sequences in one pass, their blocks scattered through the pool.
TEST(OpsVsRef, PagedAttentionMatchesReferenceAndIsRowExact) {
  // 3 query heads a KV head, and 18 (a decode row's heads go in groups of 8, 8 and 2).
  for (const int64_t H : {6, 18}) {
    const int64_t Hkv = H == 6 ? 2 : 1, D = 24, bs = 4, n_blocks = 32;
    const auto k = randn(size_t(n_blocks * bs * Hkv * D), 13);
    const auto v = randn(size_t(n_blocks * bs * Hkv * D), 14);
    const std::vector<int32_t> table_a = {7, 3, 30, 12, 0, 21, 9, 14, 2, 25, 18, 5};  // 48 pos
    const std::vector<int32_t> table_b = {1, 31, 4, 16, 8};                           // 20 pos
    // Rows: 9 of sequence a at positions 30..38, then 6 of b at positions 13..18.
    std::vector<const int32_t*> tables;
    std::vector<int64_t> pos;
    for (int64_t p = 30; p < 39; ++p) tables.push_back(table_a.data()), pos.push_back(p);
    for (int64_t p = 13; p < 19; ++p) tables.push_back(table_b.data()), pos.push_back(p);
    const int64_t T = int64_t(pos.size());
    const auto q = randn(size_t(T * H * D), 15);
    std::vector<float> want(q.size()), got(q.size(), NAN);
    AttentionArgs a;
    a.q = q.data(), a.out = want.data(), a.k = k.data(), a.v = v.data();
    a.T = T, a.H = H, a.Hkv = Hkv, a.D = D, a.block_size = bs;
    a.block_tables = tables.data(), a.pos = pos.data(), a.scale = 0.2f;
    ref::attention(a);
    auto be = cpu::make_cpu_backend(2);
    a.out = got.data();
    be->attention(a);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(want[i], got[i], 2e-6f);
    // Each row alone (as a decode step at its position) is bitwise the same.
    for (int64_t t = 0; t < T; ++t) {
      std::vector<float> one(static_cast<size_t>(H * D));
      AttentionArgs b = a;
      b.q = q.data() + t * H * D, b.out = one.data(), b.T = 1;
      b.block_tables = tables.data() + t, b.pos = pos.data() + t;
      be->attention(b);
      EXPECT_EQ(0, std::memcmp(one.data(), got.data() + t * H * D, one.size() * 4)) << "row " << t;
    }
    // A decode batch: rows of sequences a and b alternating, each a run of one row (its query
    // heads share their KV head's loads), bitwise the rows of the prefill-shaped pass above.
    const int64_t rows_ab[4] = {2, 9, 8, 14};  // a at 32, b at 13, a at 38, b at 18
    std::vector<const int32_t*> tb;
    std::vector<int64_t> pb;
    std::vector<float> qb;
    for (int64_t t : rows_ab) {
      tb.push_back(tables[size_t(t)]), pb.push_back(pos[size_t(t)]);
      qb.insert(qb.end(), q.begin() + t * H * D, q.begin() + (t + 1) * H * D);
    }
    std::vector<float> batch(qb.size(), NAN);
    AttentionArgs c = a;
    c.q = qb.data(), c.out = batch.data(), c.T = 4, c.block_tables = tb.data(), c.pos = pb.data();
    be->attention(c);
    for (int64_t i = 0; i < 4; ++i)
      EXPECT_EQ(0, std::memcmp(batch.data() + i * H * D, got.data() + rows_ab[i] * H * D,
                               size_t(H * D) * 4))
          << "decode batch row " << i << ", H " << H;
  }
}

// A bf16 KV cache: the stored values widen exactly, so the CPU kernel (and the reference) on a
// bf16 cache give bitwise what they give on an f32 cache holding the same rounded values, for
// head dims on the narrow path (8), with a scalar tail (20 on AVX-512), and whole vectors.
TEST(OpsVsRef, PagedAttentionBf16CacheIsTheF32ArithmeticOnItsValues) {
  for (const int64_t D : {8, 20, 24, 128}) {
    const int64_t H = 4, Hkv = 2, bs = 4, n_blocks = 12;
    const size_t n = size_t(n_blocks * bs * Hkv * D);
    const auto k = randn(n, 21), v = randn(n, 22);
    std::vector<uint16_t> kb(n), vb(n);
    std::vector<float> kr(n), vr(n);  // the bf16 values, as f32
    for (size_t i = 0; i < n; ++i) {
      kb[i] = f32_to_bf16(k[i]), vb[i] = f32_to_bf16(v[i]);
      kr[i] = bf16_to_f32(kb[i]), vr[i] = bf16_to_f32(vb[i]);
    }
    const std::vector<int32_t> table = {5, 0, 11, 3, 8, 1, 9, 2, 7, 4};  // 40 positions
    std::vector<const int32_t*> tables;
    std::vector<int64_t> pos;
    for (int64_t p = 0; p < 40; p += 3) tables.push_back(table.data()), pos.push_back(p);
    const int64_t T = int64_t(pos.size());
    const auto q = randn(size_t(T * H * D), 23);
    std::vector<float> f32(q.size(), NAN), b16(q.size(), NAN), rf(q.size()), rb(q.size());
    AttentionArgs a;
    a.q = q.data(), a.T = T, a.H = H, a.Hkv = Hkv, a.D = D, a.block_size = bs;
    a.block_tables = tables.data(), a.pos = pos.data(), a.scale = 0.125f;
    AttentionArgs b = a;
    a.k = kr.data(), a.v = vr.data(), a.kv = DType::F32;
    b.k = kb.data(), b.v = vb.data(), b.kv = DType::BF16;
    auto be = cpu::make_cpu_backend(2);
    a.out = f32.data(), b.out = b16.data();
    be->attention(a), be->attention(b);
    EXPECT_EQ(0, std::memcmp(f32.data(), b16.data(), f32.size() * 4)) << "cpu, D " << D;
    a.out = rf.data(), b.out = rb.data();
    ref::attention(a), ref::attention(b);
    EXPECT_EQ(0, std::memcmp(rf.data(), rb.data(), rf.size() * 4)) << "reference, D " << D;
    for (size_t i = 0; i < rf.size(); ++i) ASSERT_NEAR(rf[i], b16[i], 2e-6f) << "D " << D;
    // Rounding did happen (not a cache read as f32 by mistake).
    a.k = k.data(), a.v = v.data(), a.out = rf.data();
    be->attention(a);
    EXPECT_NE(0, std::memcmp(rf.data(), b16.data(), rf.size() * 4)) << "D " << D;
  }
}

// An FP8 cache is read in place: the CPU kernel matches the scalar reference, and with every
// scale 1/64 gives bitwise what it gives on an f32 cache of the decoded codes / 64 (random
// codes: all 254 finite ones appear, subnormals included).
TEST(OpsVsRef, PagedAttentionFp8CacheReadsEveryCodeInPlace) {
  for (const int64_t D : {8, 20, 128}) {
    const int64_t H = 4, Hkv = 2, bs = 4, n_blocks = 12, rows = n_blocks * bs * Hkv;
    const size_t block = size_t(bs * Hkv * (D + 4));  // codes [bs, Hkv, D], scales [bs, Hkv]
    std::vector<uint8_t> kc(size_t(n_blocks) * block), vc(kc.size());
    std::vector<float> kf(size_t(rows * D)), vf(kf.size());
    std::mt19937 gen{uint32_t(D)};
    for (int64_t b = 0; b < n_blocks; ++b)
      for (int64_t r = 0; r < bs * Hkv; ++r)
        for (int kv = 0; kv < 2; ++kv) {
          uint8_t* base = (kv ? vc : kc).data() + size_t(b) * block;
          for (int64_t i = 0; i < D; ++i) {
            uint8_t c;
            do c = uint8_t(gen());
            while ((c & 0x7f) == 0x7f);  // no NaN codes
            base[r * D + i] = c;
            (kv ? vf : kf)[size_t((b * bs * Hkv + r) * D + i)] = fp8_e4m3_to_f32(c) / 64.0f;
          }
          const float one = 1.0f / 64.0f;  // exact: same products as the f32 cache's, scaled
          std::memcpy(base + bs * Hkv * D + r * 4, &one, 4);
        }
    const std::vector<int32_t> table = {5, 0, 11, 3, 8, 1, 9, 2, 7, 4};
    std::vector<const int32_t*> tables;
    std::vector<int64_t> pos;
    for (int64_t p = 0; p < 40; p += 3) tables.push_back(table.data()), pos.push_back(p);
    const int64_t T = int64_t(pos.size());
    const auto q = randn(size_t(T * H * D), 24);
    std::vector<float> f32(q.size(), NAN), f8(q.size(), NAN), r8(q.size());
    AttentionArgs a;
    a.q = q.data(), a.T = T, a.H = H, a.Hkv = Hkv, a.D = D, a.block_size = bs;
    a.block_tables = tables.data(), a.pos = pos.data(), a.scale = 0.125f;
    AttentionArgs b = a;
    a.k = kf.data(), a.v = vf.data(), a.kv = DType::F32, a.out = f32.data();
    b.k = kc.data(), b.v = vc.data(), b.kv = DType::F8_E4M3, b.out = f8.data();
    auto be = cpu::make_cpu_backend(2);
    be->attention(b);
    AttentionArgs c = b;
    c.out = r8.data();
    ref::attention(c);
    for (size_t i = 0; i < r8.size(); ++i)  // E4M3 values reach 448: scores of some size
      ASSERT_NEAR(r8[i], f8[i], 1e-5f * std::max(1.0f, std::fabs(r8[i]))) << "D " << D;
    // Scales of 1/64 against f32 values already divided by 64: 1/64 is a power of two, so the
    // f32 cache's products are the FP8 cache's, each scaled exactly: bitwise the same outputs.
    be->attention(a);
    EXPECT_EQ(0, std::memcmp(f32.data(), f8.data(), f32.size() * 4)) << "D " << D;
  }
}

}  // namespace
}  // namespace basalt
