#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>

#include "xferscope/chase.hpp"
#include "xferscope/device.hpp"
#include "xferscope/error.hpp"

namespace xferscope {

namespace {

__global__ void follow(const std::uintptr_t* start, long long reads, std::uintptr_t* out) {
  const std::uintptr_t* p = start;
  for (long long i = 0; i < reads; ++i) p = reinterpret_cast<const std::uintptr_t*>(*p);
  *out = reinterpret_cast<std::uintptr_t>(p);
}

struct Events {
  cudaEvent_t begin = nullptr, end = nullptr;
  Events() {
    XFS_CUDA_CALL(cudaEventCreate(&begin));
    XFS_CUDA_CALL(cudaEventCreate(&end));
  }
  ~Events() {
    cudaEventDestroy(begin);
    cudaEventDestroy(end);
  }
};

struct DeviceWord {
  std::uintptr_t* p = nullptr;
  DeviceWord() { XFS_CUDA_CALL(cudaMalloc(&p, sizeof *p)); }
  ~DeviceWord() { cudaFree(p); }
};

}  // namespace

std::string chase_refusal(MemoryKind memory, bool remote, std::size_t bytes, std::size_t stride,
                          long long reads, int trials) {
  if (stride < sizeof(std::uintptr_t) || stride % sizeof(std::uintptr_t) != 0) {
    return "the chase's stride must be a multiple of 8 bytes";
  }
  if (bytes < 2 * stride) return "the chase needs a buffer of two strides or more";
  if (reads < 0 || trials < 1) return "the chase needs reads of 0 or more, trials 1 or more";
  if (!gpu_addressable(memory)) {
    return "a GPU thread cannot read " + std::string(to_string(memory)) +
           " memory (the GPU has no address for it); chase " + memory_kinds(gpu_addressable);
  }
  if (remote && memory != MemoryKind::device) {
    return "a chase through another GPU reads that GPU's device memory";
  }
  return "";
}

ChaseResult chase(int device, MemoryKind memory, std::size_t bytes, std::size_t stride,
                  long long reads, int trials, int peer, std::uint64_t seed) {
  constexpr std::size_t word = sizeof(std::uintptr_t);
  const bool remote = peer >= 0 && peer != device;
  if (const std::string why = chase_refusal(memory, remote, bytes, stride, reads, trials);
      !why.empty()) {
    throw UsageError(why);
  }
  XFS_CUDA_CALL(cudaSetDevice(device));
  if (remote) enable_peer_access(device, peer);
  Buffer buffer = Buffer::allocate(memory, bytes, remote ? peer : device);
  XFS_CUDA_CALL(cudaSetDevice(device));
  auto* base = static_cast<char*>(buffer.gpu_address(device));

  // one cycle through every slot, as addresses the GPU reads
  const std::size_t slots = bytes / stride;
  std::vector<std::size_t> order(slots);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin() + 1, order.end(), std::mt19937_64(seed));
  std::vector<char> staging;
  char* host = static_cast<char*>(buffer.host());
  if (host == nullptr) {
    staging.assign(bytes, 0);
    host = staging.data();
  }
  for (std::size_t i = 0; i < slots; ++i) {
    const auto target = reinterpret_cast<std::uintptr_t>(base + order[(i + 1) % slots] * stride);
    std::memcpy(host + order[i] * stride, &target, word);
  }
  if (!staging.empty()) XFS_CUDA_CALL(cudaMemcpy(base, host, bytes, cudaMemcpyHostToDevice));

  DeviceWord out;
  Events events;
  const auto* start = reinterpret_cast<const std::uintptr_t*>(base);
  // the untimed lap; with reads 0 it is timed, and a trial takes about kChaseTrialS
  const long long lap =
      std::min<long long>(reads > 0 ? reads : kChaseLap, static_cast<long long>(slots));
  XFS_CUDA_CALL(cudaEventRecord(events.begin));
  follow<<<1, 1>>>(start, lap, out.p);
  XFS_CUDA_CALL(cudaGetLastError());
  XFS_CUDA_CALL(cudaEventRecord(events.end));
  XFS_CUDA_CALL(cudaDeviceSynchronize());
  if (reads <= 0) {
    float ms = 0;
    XFS_CUDA_CALL(cudaEventElapsedTime(&ms, events.begin, events.end));
    const double each_s = std::max(static_cast<double>(ms) * 1e-3 / static_cast<double>(lap), 1e-9);
    reads = std::clamp(static_cast<long long>(kChaseTrialS / each_s), kChaseLeastReads,
                       kChaseMostReads);
  }
  const auto expected = reinterpret_cast<std::uintptr_t>(
      base + order[static_cast<std::size_t>(reads % static_cast<long long>(slots))] * stride);
  ChaseResult result;
  result.reads = reads;
  result.slots = slots;
  result.verified = true;
  for (int t = 0; t < trials; ++t) {
    XFS_CUDA_CALL(cudaMemset(out.p, 0, word));
    XFS_CUDA_CALL(cudaEventRecord(events.begin));
    follow<<<1, 1>>>(start, reads, out.p);
    XFS_CUDA_CALL(cudaGetLastError());
    XFS_CUDA_CALL(cudaEventRecord(events.end));
    XFS_CUDA_CALL(cudaEventSynchronize(events.end));
    float ms = 0;
    XFS_CUDA_CALL(cudaEventElapsedTime(&ms, events.begin, events.end));
    result.ns_per_read.push_back(static_cast<double>(ms) * 1e6 / static_cast<double>(reads));
    std::uintptr_t landed = 0;
    XFS_CUDA_CALL(cudaMemcpy(&landed, out.p, word, cudaMemcpyDeviceToHost));
    result.verified = result.verified && landed == expected;
  }
  return result;
}

}  // namespace xferscope
