// Server metrics in the Prometheus text format (GET /metrics): HTTP requests by endpoint and
// status, tokens in/out, generations by finish reason, engine queue/running/KV gauges (from
// Engine::stats()), and latency histograms (time to first token, inter-token).
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"

namespace basalt::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);
  // "# TYPE" line, cumulative buckets with le="...", +Inf, _sum and _count.
  std::string render(const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last = +Inf
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();
  void count_request(const std::string& endpoint, int status);
  void count_tokens(int64_t prompt, int64_t completion);
  void generation_started();
  void generation_finished(const std::string& reason);
  void observe_ttft(double seconds);
  void observe_itl(double seconds);
  int64_t active_generations() const;
  std::string render(const EngineStats& es) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  std::map<std::string, uint64_t> finished_;
  int64_t prompt_tokens_ = 0, completion_tokens_ = 0;
  int64_t active_ = 0;
  Histogram ttft_, itl_;
};

}  // namespace basalt::server
