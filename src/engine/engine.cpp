#include "engine/engine.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/log.h"

namespace basalt {

namespace {

// log-softmax of `id` and the k best alternatives, from raw logits (before penalties).
void fill_logprobs(const std::vector<float>& logits, int32_t id, int k, TokenEvent& ev) {
  const float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float l : logits) sum += std::exp(double(l - mx));
  const double lse = double(mx) + std::log(sum);
  ev.logprob = float(double(logits[size_t(id)]) - lse);
  if (k <= 0) return;
  std::vector<int32_t> idx(logits.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = int32_t(i);
  k = std::min<int>(k, int(idx.size()));
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
  });
  for (int i = 0; i < k; ++i)
    ev.top.emplace_back(idx[size_t(i)], float(double(logits[size_t(idx[size_t(i)])]) - lse));
}

}  // namespace

Engine::Engine(Model& model, Backend& backend, EngineConfig cfg)
    : model_(model), be_(backend), cfg_(cfg) {
  model_.check_backend(be_);
  max_context_ = cfg_.max_context > 0 ? std::min(cfg_.max_context, model_.config().max_context)
                                      : model_.config().max_context;
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  for (Job& j : queue_) {
    TokenEvent ev;
    ev.finished = true;
    ev.finish_reason = "cancelled";
    j.cb(ev);
  }
}

uint64_t Engine::submit(EngineRequest req, Callback cb) {
  if (req.prompt.empty()) fail("[engine] the prompt is empty");
  if (int64_t(req.prompt.size()) >= max_context_)
    fail("[engine] the prompt has {} tokens; the context holds {}", req.prompt.size(),
         max_context_);
  for (int32_t t : req.prompt)
    if (t < 0 || t >= model_.config().vocab)
      fail("[engine] token id {} out of range [0, {})", t, model_.config().vocab);
  std::lock_guard<std::mutex> lk(mu_);
  const uint64_t id = next_id_++;
  queue_.push_back(Job{id, std::move(req), std::move(cb)});
  stats_.queued = int64_t(queue_.size());
  cv_.notify_all();
  return id;
}

void Engine::cancel(uint64_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  cancelled_[id] = true;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

void Engine::loop() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      stats_.queued = int64_t(queue_.size());
      stats_.running = 1;
      ++stats_.requests_total;
    }
    try {
      run_job(job);
    } catch (const std::exception& e) {
      TokenEvent ev;
      ev.finished = true;
      ev.finish_reason = "error";
      ev.error = e.what();
      job.cb(ev);
    }
    std::lock_guard<std::mutex> lk(mu_);
    stats_.running = 0;
    cancelled_.erase(job.id);
  }
}

void Engine::run_job(Job& job) {
  const EngineRequest& r = job.req;
  const ModelConfig& c = model_.config();
  const int64_t P = int64_t(r.prompt.size());
  const int64_t cap = std::min(max_context_, P + std::max<int64_t>(r.max_new_tokens, 0));
  auto kv = model_.new_kv_cache(std::max(cap, P + 1));
  std::vector<float> logits(size_t(c.vocab));
  const int64_t chunk = cfg_.prefill_chunk > 0 ? cfg_.prefill_chunk : P;
  for (int64_t i = 0; i < P; i += chunk)
    model_.forward(be_, std::span(r.prompt).subspan(size_t(i), size_t(std::min(chunk, P - i))),
                   *kv, logits.data(), false);
  {
    std::lock_guard<std::mutex> lk(mu_);
    stats_.prompt_tokens_total += P;
  }
  std::vector<int32_t> history(r.prompt);
  int64_t generated = 0;
  std::string reason = "length";
  for (int64_t i = 0; i < r.max_new_tokens; ++i) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (cancelled_.count(job.id) || stop_) {
        reason = "cancelled";
        break;
      }
    }
    const std::vector<float> raw = logits;
    std::vector<float> work = logits;
    int32_t tok = size_t(i) < r.forced_output.size()
                      ? r.forced_output[size_t(i)]
                      : sample_token(work, r.sampling, history, int64_t(history.size()));
    if (!r.forced_output.empty() && size_t(i) >= r.forced_output.size()) {
      reason = "stop";
      break;
    }
    history.push_back(tok);
    const bool eos = !r.ignore_eos &&
                     std::find(c.eos_ids.begin(), c.eos_ids.end(), tok) != c.eos_ids.end();
    const bool stop_id = std::find(r.stop_ids.begin(), r.stop_ids.end(), tok) != r.stop_ids.end();
    if (eos || stop_id) {
      reason = "stop";
      break;
    }
    TokenEvent ev;
    ev.token = tok;
    fill_logprobs(raw, tok, r.top_logprobs, ev);
    ++generated;
    {
      std::lock_guard<std::mutex> lk(mu_);
      ++stats_.completion_tokens_total;
    }
    job.cb(ev);
    if (i + 1 == r.max_new_tokens) break;
    if (kv->length() + 1 > kv->capacity()) {
      reason = "length";
      break;
    }
    const int32_t one[1] = {tok};
    model_.forward(be_, one, *kv, logits.data(), false);
  }
  TokenEvent fin;
  fin.finished = true;
  fin.finish_reason = reason;
  fin.prompt_tokens = P;
  fin.completion_tokens = generated;
  job.cb(fin);
}

}  // namespace basalt
