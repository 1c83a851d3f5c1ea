// Logging goes to stderr (stdout is reserved for generated text / program output).
#pragma once
#include <spdlog/spdlog.h>

namespace basalt {
void log_init(int verbosity);  // 0 = warnings, 1 = info, 2 = debug
}  // namespace basalt
