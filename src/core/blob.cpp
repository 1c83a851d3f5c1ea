#include "core/blob.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace basalt {

Blob blob_map_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("[io] {}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail("[io] {}: cannot stat: {}", path, std::strerror(e));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    fail("[io] {}: is a directory, expected a file", path);
  }
  Blob b;
  b.name = path;
  b.size = size_t(st.st_size);
  if (b.size == 0) {
    ::close(fd);
    static const uint8_t kEmpty = 0;
    b.data = &kEmpty;
    return b;
  }
  void* p = ::mmap(nullptr, b.size, PROT_READ, MAP_PRIVATE, fd, 0);
  int e = errno;
  ::close(fd);
  if (p == MAP_FAILED) fail("[io] {}: mmap failed: {}", path, std::strerror(e));
  size_t sz = b.size;
  b.data = static_cast<const uint8_t*>(p);
  b.owner = std::shared_ptr<void>(p, [sz](void* q) { ::munmap(q, sz); });
  return b;
}

Blob blob_static(const void* data, size_t size, std::string name) {
  Blob b;
  b.data = static_cast<const uint8_t*>(data);
  b.size = size;
  b.name = std::move(name);
  return b;
}

Blob blob_from_vector(std::vector<uint8_t> bytes, std::string name) {
  auto v = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  Blob b;
  b.data = v->data();
  b.size = v->size();
  b.name = std::move(name);
  b.owner = v;
  return b;
}

std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("[io] {}: cannot open: {}", path, std::strerror(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace basalt
