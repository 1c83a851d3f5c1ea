#include "core/thread_pool.h"

#include <algorithm>

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

void ThreadPool::worker(int) {
  uint64_t seen = 0;
  for (;;) {
    std::unique_lock<std::mutex> lk(mu_);
    cv_start_.wait(lk, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    const auto* job = job_;
    ++active_;
    for (;;) {
      if (next_ >= job_n_) break;
      int64_t i = next_++;
      lk.unlock();
      (*job)(i);
      lk.lock();
    }
    if (--active_ == 0) cv_done_.notify_all();
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (n_threads_ == 1 || n == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::unique_lock<std::mutex> lk(mu_);
  job_ = &fn;
  job_n_ = n;
  next_ = 0;
  ++generation_;
  ++active_;
  cv_start_.notify_all();
  for (;;) {
    if (next_ >= job_n_) break;
    int64_t i = next_++;
    lk.unlock();
    fn(i);
    lk.lock();
  }
  --active_;
  cv_done_.wait(lk, [&] { return active_ == 0; });
  job_ = nullptr;
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
