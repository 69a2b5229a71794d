// The plain loop xferscope's API-time latency is compared against: N synchronous cudaMemcpy
// calls of one size between pinned host memory and the GPU, timed with a steady clock, repeated
// for several trials. Prints the per-call time of the best and the median trial in seconds.
//
//   memcpy_loop BYTES CALLS TRIALS [h2d|d2h]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda_check.hpp"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s BYTES CALLS TRIALS [h2d|d2h]\n", argv[0]);
    return 2;
  }
  const std::size_t bytes = std::strtoull(argv[1], nullptr, 10);
  const long calls = std::strtol(argv[2], nullptr, 10);
  const int trials = std::atoi(argv[3]);
  const bool h2d = argc < 5 || std::strcmp(argv[4], "d2h") != 0;
  void* host = nullptr;
  void* device = nullptr;
  CHECK(cudaHostAlloc(&host, bytes, cudaHostAllocDefault));
  CHECK(cudaMalloc(&device, bytes));
  std::memset(host, 0x5a, bytes);
  void* dst = h2d ? device : host;
  const void* src = h2d ? host : device;
  const cudaMemcpyKind kind = h2d ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
  for (long i = 0; i < calls; ++i) CHECK(cudaMemcpy(dst, src, bytes, kind));  // warm-up
  std::vector<double> per_call;
  for (int t = 0; t < trials; ++t) {
    const auto begin = std::chrono::steady_clock::now();
    for (long i = 0; i < calls; ++i) CHECK(cudaMemcpy(dst, src, bytes, kind));
    const auto end = std::chrono::steady_clock::now();
    per_call.push_back(std::chrono::duration<double>(end - begin).count() / calls);
  }
  std::sort(per_call.begin(), per_call.end());
  std::printf("%.9e %.9e\n", per_call.front(), per_call[per_call.size() / 2]);
  CHECK(cudaFree(device));
  CHECK(cudaFreeHost(host));
  return 0;
}
