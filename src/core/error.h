// basalt::Error: the one exception type. Messages start with the component in brackets,
// e.g. "[safetensors] model.safetensors: tensor 'x' has 12 bytes, shape needs 16".
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace basalt {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace basalt
