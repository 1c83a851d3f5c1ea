#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>

namespace basalt {

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  n_threads_ = n_threads;
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_start_.notify_all();
  for (auto& t : workers_) t.join();
}

namespace {
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}
// Spins until pred() holds or `us` microseconds pass; true if it held.
template <class Pred>
bool spin_until(Pred pred, int us) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  for (int i = 0;; ++i) {
    if (pred()) return true;
    cpu_relax();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > end) return false;
  }
}
}  // namespace

void ThreadPool::run_tasks(const std::function<void(int64_t)>* fn, int64_t n) {
  for (;;) {
    const int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= n) return;
    try {
      (*fn)(i);
    } catch (...) {  // kept for the caller, which rethrows once every task has finished
      std::lock_guard<std::mutex> lk(err_mu_);
      if (!err_) err_ = std::current_exception();
    }
    done_.fetch_add(1, std::memory_order_release);
  }
}

void ThreadPool::worker(int) {
  uint64_t seen = 0;
  for (;;) {
    if (!spin_until([&] { return stop_.load() || generation_.load() != seen; }, kSpinUs)) {
      std::unique_lock<std::mutex> lk(mu_);
      ++sleepers_;
      cv_start_.wait(lk, [&] { return stop_.load() || generation_.load() != seen; });
      --sleepers_;
    }
    if (stop_) return;
    const std::function<void(int64_t)>* job;
    int64_t n;
    {
      std::lock_guard<std::mutex> lk(mu_);  // a consistent (generation, job) pair
      seen = generation_.load();
      job = job_;
      n = job_n_;
      ++in_flight_;
    }
    run_tasks(job, n);
    --in_flight_;
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (n_threads_ == 1 || n == 1) {  // the same semantics without the workers
    std::exception_ptr e;
    for (int64_t i = 0; i < n; ++i) try {
        fn(i);
      } catch (...) {
        if (!e) e = std::current_exception();
      }
    if (e) std::rethrow_exception(e);
    return;
  }
  {
    // Under the lock no worker can pick up the previous job any more; those holding it only
    // have an empty counter left to read, and must be out before next_ is reset.
    std::lock_guard<std::mutex> lk(mu_);
    while (in_flight_.load() != 0) cpu_relax();
    job_ = &fn;
    job_n_ = n;
    done_ = 0;
    next_ = 0;
    ++generation_;
  }
  if (sleepers_.load() > 0) cv_start_.notify_all();
  run_tasks(&fn, n);
  if (!spin_until([&] { return done_.load(std::memory_order_acquire) == n; }, 1000))
    while (done_.load(std::memory_order_acquire) != n) std::this_thread::yield();
  // No task of fn runs after return (done_ == n); a worker arriving late finds no task left.
  if (err_) {
    std::exception_ptr e;
    std::swap(e, err_);
    std::rethrow_exception(e);
  }
}

void ThreadPool::parallel_ranges(int64_t n, int64_t grain,
                                 const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  int64_t blocks = (n + grain - 1) / grain;
  int64_t parts = std::min<int64_t>(blocks, n_threads_);
  int64_t per = (blocks + parts - 1) / parts;
  parallel_for(parts, [&](int64_t p) {
    int64_t b = p * per * grain, e = std::min(n, (p + 1) * per * grain);
    if (b < e) fn(b, e);
  });
}

}  // namespace basalt
