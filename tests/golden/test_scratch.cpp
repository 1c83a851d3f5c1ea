// The scratch planner (src/memory) on the real models' pass programs: sound plans, the arena a
// forward pass allocates is the planned peak, and it depends on the rows of the pass only.
#include <gtest/gtest.h>

#include "backends/cpu/cpu_backend.h"
#include "memory/planner.h"
#include "models/model.h"
#include "test_util.h"

namespace basalt {
namespace {

TEST(Scratch, DefaultModelPlansAreSoundAndUsed) {
  auto model = model_load("");  // the embedded default model
  auto be = cpu::make_cpu_backend(1);
  for (int64_t T : {1, 7, 64, 512}) {
    const memory::Program p = model->scratch_program(*be, T, 1);
    const memory::Plan plan = memory::plan(p.values());
    EXPECT_EQ(memory::verify(p.values(), plan), "") << "T=" << T;
    EXPECT_GE(plan.peak, plan.lower_bound);
    EXPECT_LT(plan.peak, plan.naive_sum) << memory::describe(p.values(), plan);
    // Linear in T: a pass of 2T rows needs at most twice the scratch (no context term).
    const memory::Plan twice = memory::plan(model->scratch_program(*be, 2 * T, 1).values());
    EXPECT_LE(twice.peak, 2 * plan.peak + 4096) << "T=" << T;
  }
  // A forward pass allocates exactly the planned peak for its rows.
  const int64_t T = 40;
  auto pool = model->new_kv_pool(*be, T);
  KvSequence seq;
  std::vector<int32_t> ids(static_cast<size_t>(T), 7);
  std::vector<float> logits(static_cast<size_t>(model->config().vocab));
  model->forward(*be, *pool, seq, ids, logits.data(), false);
  EXPECT_EQ(model->scratch_bytes(), memory::plan(model->scratch_program(*be, T, 1).values()).peak);
  const std::string report = model->scratch_report(*be, T, 1);
  EXPECT_NE(report.find("lower bound"), std::string::npos) << report;
}

}  // namespace
}  // namespace basalt
