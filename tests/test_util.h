// Helpers shared by the C++ tests.
#pragma once
#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <string>

#include "core/error.h"

namespace basalt::test {

// Runs fn, expects a basalt::Error whose message holds every one of `parts`.
template <typename Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected a basalt::Error containing '" << *parts.begin() << "'";
  } catch (const basalt::Error& e) {
    std::string msg = e.what();
    for (const auto& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "message: " << msg << "\nmissing: " << p;
  }
}
template <typename Fn>
void expect_error(Fn&& fn, const std::string& part) {
  expect_error(std::forward<Fn>(fn), {part});
}

// ../shared/fixtures (or $BASALT_FIXTURES); "" if absent.
inline std::string fixtures_dir() {
  const char* env = std::getenv("BASALT_FIXTURES");
  std::string d = env ? env : BASALT_FIXTURES_DIR;
  return std::filesystem::is_directory(d) ? d : std::string();
}
inline std::string source_dir() {
  return BASALT_SOURCE_DIR;
}
inline std::string basalt_bin() {
  return BASALT_BIN;
}

// Skips the current test with a clear message when the shared fixtures are missing.
#define BASALT_REQUIRE_FIXTURE(var, rel)                                                    \
  std::string var = ::basalt::test::fixtures_dir();                                         \
  if (var.empty() || !std::filesystem::exists(var + "/" + rel))                             \
    GTEST_SKIP() << "shared fixture '" << rel << "' not found (set BASALT_FIXTURES to the " \
                 << "folder holding ../shared/fixtures)";                                   \
  var += "/" rel

// A fresh temporary directory, removed when the object dies.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("basalt_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
  static int& counter() {
    static int c = 0;
    return c;
  }
};

}  // namespace basalt::test
