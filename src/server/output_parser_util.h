// Helpers shared by output_parser.cpp and tool_call_formats.cpp (not part of the API).
#pragma once
#include <initializer_list>
#include <string_view>

namespace basalt::server::detail {

constexpr const char* kWs = " \t\r\n";
inline bool is_ws(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

// Where buf must be cut: at the earliest complete marker (marker = its index), else before the
// longest suffix that could still grow into a marker (marker = -1); final: nothing is held.
struct Cut {
  size_t pos = 0;
  int marker = -1;
};
Cut find_cut(std::string_view buf, std::initializer_list<std::string_view> markers, bool final);

// True when buf starts with marker (complete = true) or is a prefix of it (could become it).
bool starts_or_prefix(std::string_view buf, std::string_view marker, bool& complete);

}  // namespace basalt::server::detail
