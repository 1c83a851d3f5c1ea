#include <cuda_runtime.h>

#include "backends/cuda/cuda_device.h"

namespace basalt::cuda {

std::vector<DeviceInfo> cuda_devices() {
  std::vector<DeviceInfo> out;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return out;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    out.push_back({i, p.name, p.major, p.minor, p.multiProcessorCount, p.totalGlobalMem});
  }
  return out;
}

}  // namespace basalt::cuda
