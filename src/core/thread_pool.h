// ThreadPool: a fixed set of workers running parallel_for over task indices.
// Kernels split work over *outputs* (rows, columns, heads), never over a reduction, so the
// thread count cannot change a result (exactness contract, EXACTNESS.md rule 4).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace basalt {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // n_threads <= 0: hardware concurrency
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Calls fn(i) for i in [0, n) across the pool (the caller takes part); returns when done.
  void parallel_for(int64_t n, const std::function<void(int64_t)>& fn);
  // Splits [0, n) into at most size() contiguous ranges of multiples of `grain`:
  // fn(begin, end).
  void parallel_ranges(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker(int id);
  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_start_, cv_done_;
  const std::function<void(int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t next_ = 0;
  int active_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace basalt
