// libFuzzer target: safetensors bytes -> io::safetensors_parse, then every tensor's first and
// last elements read as a loader would. basalt::Error is the expected answer to a bad file;
// anything else is a finding.
#include <cstddef>
#include <cstdint>

#include "core/blob.h"
#include "fuzz_tensors.h"
#include "io/safetensors.h"

namespace {
volatile double g_sink;  // keeps the reads
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  basalt::io::TensorStore store;
  try {
    store = basalt::io::safetensors_parse(basalt::blob_static(data, size, "fuzz.safetensors"));
  } catch (const basalt::Error&) {
    return 0;
  }
  g_sink = basalt::fuzz::fuzz_read_store(store, data, size);
  return 0;
}
