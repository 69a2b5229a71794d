#include "xferscope/pinning.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include "xferscope/buffer.hpp"
#include "xferscope/error.hpp"
#include "xferscope/pattern.hpp"

namespace xferscope {

namespace {

template <typename F>
double seconds_of(F&& step) {
  const auto begin = std::chrono::steady_clock::now();
  step();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
}

double median_copy(void* device, const void* host, std::size_t bytes) {
  XFS_CUDA_CALL(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));  // warm-up
  std::array<double, 3> times{};
  for (double& t : times) {
    t = seconds_of([&] {
      XFS_CUDA_CALL(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
      XFS_CUDA_CALL(cudaDeviceSynchronize());  // a pageable upload may return before it lands
    });
  }
  std::sort(times.begin(), times.end());
  return times[1];
}

// Owns pageable memory that may be registered; unregisters and frees on any exit.
struct PageableBlock {
  void* data = nullptr;
  bool registered = false;
  ~PageableBlock() {
    if (registered) cudaHostUnregister(data);
    std::free(data);
  }
};

}  // namespace

PinningCosts measure_pinning(int device, std::size_t bytes) {
  constexpr std::size_t kPage = 4096;
  const std::size_t rounded = (bytes + kPage - 1) / kPage * kPage;
  PinningCosts costs;
  Buffer target = Buffer::allocate(MemoryKind::device, bytes, device);

  PageableBlock pageable;
  pageable.data = std::aligned_alloc(kPage, rounded);
  if (pageable.data == nullptr) throw AllocationError("pageable", bytes, "aligned_alloc failed");
  fill_host(pageable.data, bytes, 1, false);  // touched: registering does not fault pages in
  costs.pageable_copy_s = median_copy(target.device(), pageable.data, bytes);

  cudaError_t status = cudaSuccess;
  costs.register_s = seconds_of([&] { status = cudaHostRegister(pageable.data, rounded, 0); });
  if (status != cudaSuccess) {
    cudaGetLastError();
    throw AllocationError("registered", bytes, cudaGetErrorString(status));
  }
  pageable.registered = true;
  costs.registered_copy_s = median_copy(target.device(), pageable.data, bytes);
  costs.unregister_s = seconds_of([&] { XFS_CUDA_CALL(cudaHostUnregister(pageable.data)); });
  pageable.registered = false;

  void* pinned = nullptr;
  costs.host_alloc_s = seconds_of([&] { status = cudaMallocHost(&pinned, bytes); });
  if (status != cudaSuccess) {
    cudaGetLastError();
    throw AllocationError("pinned", bytes, cudaGetErrorString(status));
  }
  try {
    fill_host(pinned, bytes, 2, false);  // touched, so the memcpy below times copying alone
    costs.host_copy_s = seconds_of([&] { std::memcpy(pinned, pageable.data, bytes); });
    costs.pinned_copy_s = median_copy(target.device(), pinned, bytes);
  } catch (...) {
    cudaFreeHost(pinned);
    throw;
  }
  costs.host_free_s = seconds_of([&] { XFS_CUDA_CALL(cudaFreeHost(pinned)); });
  return costs;
}

}  // namespace xferscope
