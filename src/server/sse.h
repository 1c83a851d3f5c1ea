// Server-sent events framing (https://html.spec.whatwg.org/multipage/server-sent-events.html):
// each event is optional "event: NAME", one "data: JSON" line, and a blank line. JSON is
// dumped on one line (newlines inside strings are escaped), so one data line always suffices.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace basalt::server {

// One-line JSON; bytes that are not UTF-8 become U+FFFD instead of throwing.
std::string json_line(const nlohmann::ordered_json& j);
std::string sse_data(const nlohmann::ordered_json& j);  // OpenAI chunks
std::string sse_event(std::string_view name,
                      const nlohmann::ordered_json& j);  // Anthropic, Responses
std::string sse_done();                                  // "data: [DONE]" (OpenAI's end of stream)
std::string sse_comment(std::string_view text);          // ": text" — keeps idle streams alive

}  // namespace basalt::server
