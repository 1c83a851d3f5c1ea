// CUDA device discovery. Safe to call on machines without a GPU or driver.
#pragma once
#include <string>
#include <vector>

namespace basalt::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  size_t total_mem = 0;
};

// Devices visible to the CUDA runtime; empty (never an error) when there is no GPU/driver.
std::vector<DeviceInfo> cuda_devices();

}  // namespace basalt::cuda
