#include "io/tensor_store.h"

#include "core/error.h"

namespace basalt::io {

void TensorStore::add(TensorView t) {
  std::string name = t.name;
  if (!tensors_.emplace(name, std::move(t)).second)
    fail("[checkpoint] tensor '{}' appears twice", name);
}

void TensorStore::merge(TensorStore&& other) {
  for (auto& [name, t] : other.tensors_) add(std::move(t));
  for (auto& b : other.blobs_) blobs_.push_back(std::move(b));
  other.tensors_.clear();
  other.blobs_.clear();
}

const TensorView* TensorStore::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const TensorView& TensorStore::get(const std::string& name) const {
  const TensorView* t = find(name);
  if (!t) fail("[checkpoint] missing tensor '{}'", name);
  return *t;
}

std::vector<std::string> TensorStore::names() const {
  std::vector<std::string> v;
  v.reserve(tensors_.size());
  for (const auto& [n, t] : tensors_) v.push_back(n);
  return v;
}

}  // namespace basalt::io
