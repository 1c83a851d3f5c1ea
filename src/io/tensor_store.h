// TensorStore: the named tensors of a checkpoint, views into blobs it keeps alive.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/blob.h"
#include "core/tensor.h"

namespace basalt::io {

class TensorStore {
 public:
  void add(TensorView t);  // throws on a duplicate name
  void keep(const Blob& b) { blobs_.push_back(b); }
  void merge(TensorStore&& other);  // throws on a duplicate name

  const TensorView* find(const std::string& name) const;
  const TensorView& get(const std::string& name) const;  // throws "[checkpoint] missing tensor"
  bool contains(const std::string& name) const { return find(name) != nullptr; }
  std::vector<std::string> names() const;  // sorted
  size_t size() const { return tensors_.size(); }
  const std::map<std::string, TensorView>& all() const { return tensors_; }

 private:
  std::map<std::string, TensorView> tensors_;
  std::vector<Blob> blobs_;
};

}  // namespace basalt::io
