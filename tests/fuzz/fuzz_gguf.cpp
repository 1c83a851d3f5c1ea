// libFuzzer target: GGUF bytes -> io::gguf_parse, then what a loader reads from the result
// (every metadata value through its accessors, every tensor's first and last elements).
// basalt::Error is the expected answer to a bad file; anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <variant>

#include "core/blob.h"
#include "fuzz_tensors.h"
#include "io/gguf.h"

namespace {

using basalt::Error;
using basalt::io::GgufValue;

volatile double g_sink;  // keeps the reads

// The accessor that matches the stored type must answer (a throw escapes and is a finding);
// at the top level, one that does not match must throw basalt::Error. Array elements are read
// without the mismatched call: exceptions cost microseconds under ASan and vocab arrays are long.
double visit(const GgufValue& v, int depth) {
  double sum = double(v.type);
  if (v.is_array()) {
    for (const GgufValue& e : v.as_array()) sum += visit(e, depth + 1);
  } else if (v.is_string()) {
    sum += double(v.as_string().size());
  } else if (std::holds_alternative<bool>(v.v)) {
    sum += double(v.as_bool()) + double(v.as_int());
  } else if (std::holds_alternative<double>(v.v)) {
    sum += v.as_float();
  } else {
    sum += v.as_float();
    auto* u = std::get_if<uint64_t>(&v.v);
    if (!u || *u <= uint64_t(INT64_MAX)) sum += double(v.as_int());  // else as_int throws
  }
  if (depth == 0) {
    bool threw = false;
    try {
      sum += v.is_string() ? double(v.as_int()) : double(v.as_string().size());
    } catch (const Error&) {
      threw = true;
    }
    if (!threw) __builtin_trap();
  }
  return sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  basalt::io::GgufFile g;
  try {
    g = basalt::io::gguf_parse(basalt::blob_static(data, size, "fuzz.gguf"));
  } catch (const Error&) {
    return 0;
  }
  double sum = double(g.version) + double(g.alignment);
  for (const auto& [key, v] : g.metadata) {
    if (g.find(key) != &v || &g.get(key) != &v) __builtin_trap();
    sum += visit(v, 0);
  }
  try {
    g.get("fuzz.no.such.key");
    __builtin_trap();  // a missing key must throw
  } catch (const Error&) {
  }
  sum += basalt::fuzz::fuzz_read_store(g.tensors, data, size);
  g_sink = sum;
  return 0;
}
