#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "core/thread_pool.h"

namespace basalt {
namespace {

TEST(ThreadPool, EveryIndexRunsExactlyOnce) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 3, 100, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.parallel_for(n, [&](int64_t i) { hits[size_t(i)]++; });
      for (auto& h : hits) ASSERT_EQ(h.load(), 1) << threads << " threads, n " << n;
    }
  }
}

TEST(ThreadPool, RangesCoverWithoutOverlapInGrainMultiples) {
  ThreadPool pool(3);
  for (int64_t n : {1, 15, 16, 17, 1000}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.parallel_ranges(n, 16, [&](int64_t b, int64_t e) {
      EXPECT_EQ(b % 16, 0);
      for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
}

TEST(ThreadPool, ManyJobsBackToBack) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  for (int j = 0; j < 2000; ++j) pool.parallel_for(7, [&](int64_t i) { sum += i; });
  EXPECT_EQ(sum.load(), 2000 * 21);
}

// A task that throws: the caller gets the exception after every other task ran, and the pool
// keeps working.
TEST(ThreadPool, ExceptionReachesTheCallerAfterTheJob) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    std::atomic<int> ran{0};
    EXPECT_THROW(pool.parallel_for(50,
                                   [&](int64_t i) {
                                     ran++;
                                     if (i == 7) throw std::runtime_error("task 7");
                                   }),
                 std::runtime_error);
    EXPECT_EQ(ran.load(), 50) << threads;
    std::atomic<int64_t> sum{0};
    pool.parallel_for(10, [&](int64_t i) { sum += i; });
    EXPECT_EQ(sum.load(), 45) << threads;
  }
}

}  // namespace
}  // namespace basalt
