// ThreadPool: a fixed set of workers running parallel_for over task indices.
// Kernels split work over *outputs* (rows, columns, heads), never over a reduction, so the
// thread count cannot change a result (exactness contract, EXACTNESS.md rule 4).
// A decode step makes hundreds of short parallel_for calls, so workers spin for a short while
// (kSpinUs) after a job before sleeping, and tasks are claimed with an atomic counter: a wake-up
// through the kernel costs tens of microseconds, more than many of the jobs themselves.
// One caller at a time; fn must not call parallel_for on the same pool. An exception thrown by a
// task is rethrown by parallel_for after every task of the job has finished.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
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
  static constexpr int kSpinUs = 200;
  void worker(int id);
  // Claims and runs tasks of the job until none is left.
  void run_tasks(const std::function<void(int64_t)>* fn, int64_t n);
  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;  // guards the job's publication (job_, job_n_) and sleeping
  std::condition_variable cv_start_;
  const std::function<void(int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  std::atomic<uint64_t> generation_{0};  // bumped when a job is published
  std::atomic<int64_t> next_{0};         // the next unclaimed task
  std::atomic<int64_t> done_{0};         // tasks finished
  std::atomic<int> in_flight_{0};        // workers holding the current job
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::mutex err_mu_;
  std::exception_ptr err_;  // the first exception a task threw in the current job
};

}  // namespace basalt
