#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace basalt::server {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  const size_t i = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  ++counts_[i];
  sum_ += v;
  ++count_;
}

std::string Histogram::render(const std::string& name, const std::string& help) const {
  std::string s = fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    s += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cum);
  }
  cum += counts_.back();
  s += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, cum, name, sum_,
                   name, count_);
  return s;
}

Metrics::Metrics()
    : ttft_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      itl_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}) {}

void Metrics::count_request(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lk(mu_);
  ++requests_[{endpoint, status}];
}

void Metrics::count_tokens(int64_t prompt, int64_t completion) {
  std::lock_guard<std::mutex> lk(mu_);
  prompt_tokens_ += prompt;
  completion_tokens_ += completion;
}

void Metrics::generation_started() {
  std::lock_guard<std::mutex> lk(mu_);
  ++active_;
}

void Metrics::generation_finished(const std::string& reason) {
  std::lock_guard<std::mutex> lk(mu_);
  --active_;
  ++finished_[reason];
}

void Metrics::observe_ttft(double seconds) {
  std::lock_guard<std::mutex> lk(mu_);
  ttft_.observe(seconds);
}

void Metrics::observe_itl(double seconds) {
  std::lock_guard<std::mutex> lk(mu_);
  itl_.observe(seconds);
}

int64_t Metrics::active_generations() const {
  std::lock_guard<std::mutex> lk(mu_);
  return active_;
}

std::string Metrics::render(const EngineStats& es) const {
  std::lock_guard<std::mutex> lk(mu_);
  std::string s;
  s += "# HELP basalt_http_requests_total HTTP requests by endpoint and status.\n";
  s += "# TYPE basalt_http_requests_total counter\n";
  for (const auto& [k, n] : requests_)
    s += fmt::format("basalt_http_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", k.first,
                     k.second, n);
  s += "# HELP basalt_generations_total Generations by finish reason.\n";
  s += "# TYPE basalt_generations_total counter\n";
  for (const auto& [r, n] : finished_)
    s += fmt::format("basalt_generations_total{{reason=\"{}\"}} {}\n", r, n);
  auto one = [&](const char* name, const char* type, const char* help, auto v) {
    s += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, v);
  };
  one("basalt_generations_active", "gauge", "Generations the HTTP layer is serving now.", active_);
  one("basalt_prompt_tokens_total", "counter", "Prompt tokens of finished generations.",
      prompt_tokens_);
  one("basalt_completion_tokens_total", "counter", "Tokens generated (finished generations).",
      completion_tokens_);
  one("basalt_requests_queued", "gauge", "Engine requests waiting to start.", es.queued);
  one("basalt_requests_running", "gauge", "Engine requests running.", es.running);
  one("basalt_engine_requests_total", "counter", "Requests the engine has started.",
      es.requests_total);
  one("basalt_kv_blocks_used", "gauge", "KV cache blocks in use.", es.kv_blocks_used);
  one("basalt_kv_blocks_total", "gauge", "KV cache blocks in the pool.", es.kv_blocks_total);
  one("basalt_prefix_cache_hit_tokens_total", "counter",
      "Prompt tokens served from the prefix cache.", es.prefix_cache_hit_tokens);
  one("basalt_spec_verifications_total", "counter",
      "Decode steps that verified speculative drafts (--spec).", es.spec_verifications);
  one("basalt_spec_draft_tokens_total", "counter", "Draft tokens proposed (--spec).",
      es.spec_drafted);
  one("basalt_spec_accepted_tokens_total", "counter",
      "Draft tokens accepted: the mean accepted length is accepted / verifications.",
      es.spec_accepted);
  one("basalt_spec_draft_seconds_total", "counter",
      "Engine time spent drafting (--spec); verification runs inside the forward passes "
      "(basalt_engine_forward_seconds_total).",
      es.spec_draft_seconds);
  one("basalt_spec_adaptive_passes_total", "counter",
      "Decode steps whose draft length an adaptive policy chose (--spec-adaptive).",
      es.spec_adaptive_passes);
  one("basalt_spec_adaptive_draft_length_total", "counter",
      "Sum of the draft lengths chosen (--spec-adaptive): divided by the passes, the mean k.",
      es.spec_adaptive_k_total);
  one("basalt_spec_draft_batches_total", "counter",
      "Steps whose draft-model drafters drafted together in shared passes (--spec draft:PATH).",
      es.spec_draft_batches);
  one("basalt_spec_draft_batch_sequences_total", "counter",
      "Sequences in those steps: divided by the batches, the mean drafters a shared pass serves.",
      es.spec_draft_batch_rows);
  one("basalt_engine_forward_seconds_total", "counter",
      "Engine time in forward passes (prefill, decode and verification rows together).",
      es.forward_seconds);
  s += ttft_.render("basalt_time_to_first_token_seconds",
                    "Time from request arrival to the first generated token.");
  s += itl_.render("basalt_inter_token_latency_seconds", "Time between consecutive tokens.");
  return s;
}

}  // namespace basalt::server
