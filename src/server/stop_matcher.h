// Stop strings over streamed text: text that might be the start of a stop string is held back
// until it is known not to be, so a stop string is never emitted, not even in part.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace basalt::server {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // Appends text and returns what is now safe to emit. When a stop string completes, returns
  // the text before it and sets hit(); later calls return "".
  std::string push(std::string_view text);
  std::string flush();  // the held-back tail at the end of the stream
  const std::optional<std::string>& hit() const { return hit_; }

 private:
  std::vector<std::string> stops_;
  std::string buf_;
  std::optional<std::string> hit_;
};

}  // namespace basalt::server
