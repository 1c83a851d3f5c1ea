#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace basalt {
void log_init(int verbosity) {
  static auto logger = [] {
    auto l = spdlog::stderr_color_mt("basalt");
    l->set_pattern("[%H:%M:%S.%e] %^%l%$ %v");
    spdlog::set_default_logger(l);
    return l;
  }();
  logger->set_level(verbosity >= 2   ? spdlog::level::debug
                    : verbosity == 1 ? spdlog::level::info
                                     : spdlog::level::warn);
}
}  // namespace basalt
