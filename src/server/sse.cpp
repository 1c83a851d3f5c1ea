#include "server/sse.h"

namespace basalt::server {

std::string json_line(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string sse_data(const nlohmann::ordered_json& j) {
  return "data: " + json_line(j) + "\n\n";
}

std::string sse_event(std::string_view name, const nlohmann::ordered_json& j) {
  std::string s = "event: ";
  s += name;
  s += "\ndata: ";
  s += json_line(j);
  s += "\n\n";
  return s;
}

std::string sse_done() {
  return "data: [DONE]\n\n";
}

std::string sse_comment(std::string_view text) {
  std::string s = ": ";
  for (char c : text) s += (c == '\n' || c == '\r') ? ' ' : c;
  s += "\n\n";
  return s;
}

}  // namespace basalt::server
