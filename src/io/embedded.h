// Files assembled into the binary by cmake/embed_model.cmake: the default model (models/default/)
// and the shipped kernel recipes (recipes/*.json). Each table ends with a {nullptr, nullptr, 0}
// row.
#pragma once
#include <cstddef>

namespace basalt {
struct EmbeddedFile {
  const char* name;
  const unsigned char* data;
  size_t size;
};
const EmbeddedFile* basalt_embedded_files();
const EmbeddedFile* basalt_embedded_recipes();
}  // namespace basalt
