// The embedded default model: the files of models/default/, assembled into the binary by
// cmake/embed_model.cmake. The table ends with a {nullptr, nullptr, 0} row.
#pragma once
#include <cstddef>

namespace basalt {
struct EmbeddedFile {
  const char* name;
  const unsigned char* data;
  size_t size;
};
const EmbeddedFile* basalt_embedded_files();
}  // namespace basalt
