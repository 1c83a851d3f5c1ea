#include "server/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace basalt::server {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string StopMatcher::push(std::string_view text) {
  if (hit_) return "";
  buf_.append(text);
  if (stops_.empty()) return std::exchange(buf_, {});
  // The stop string that completes first wins (as if the text came one byte at a time, so the
  // result does not depend on how the text was split); at equal ends the longer one.
  size_t best_end = std::string::npos, best = 0;
  const std::string* which = nullptr;
  for (const std::string& s : stops_) {
    const size_t p = buf_.find(s);
    if (p == std::string::npos) continue;
    const size_t e = p + s.size();
    if (e < best_end || (e == best_end && p < best)) {
      best_end = e;
      best = p;
      which = &s;
    }
  }
  if (which) {
    hit_ = *which;
    std::string out = buf_.substr(0, best);
    buf_.clear();
    return out;
  }
  // Hold back the longest tail that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    for (size_t k = std::min(buf_.size(), s.size() - 1); k > hold; --k) {
      if (buf_.compare(buf_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  std::string out = buf_.substr(0, buf_.size() - hold);
  buf_.erase(0, buf_.size() - hold);
  return out;
}

std::string StopMatcher::flush() {
  return hit_ ? std::string() : std::exchange(buf_, {});
}

}  // namespace basalt::server
