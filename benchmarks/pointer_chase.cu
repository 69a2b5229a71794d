// The plain CUDA pointer chase xferscope's GPU-side latency is to be compared against (issue 34):
// one GPU thread follows a chain of pointers through a buffer, each read depending on the one
// before, so the time per read is the latency of one read of that memory as the GPU sees it.
// The chain visits every STRIDE-th place of the buffer in a random order (a seeded shuffle), so
// neither caches nor prefetchers learn it once the buffer is larger than the caches. Timed with
// CUDA events around the whole chase after one untimed pass; prints one JSON line per trial set.
//
//   pointer_chase MEMORY BYTES STRIDE READS TRIALS [PEER]
//     MEMORY: device, pinned (mapped, read over PCIe), managed (prefetched to the GPU), peer
//     (device memory of GPU PEER, read by GPU 0 with peer access on)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "cuda_check.hpp"

// Follows `reads` pointers from `start`; the last one is written out so nothing is elided.
__global__ void chase(const std::uintptr_t* start, long long reads, std::uintptr_t* out) {
  const std::uintptr_t* p = start;
  for (long long i = 0; i < reads; ++i) p = reinterpret_cast<const std::uintptr_t*>(*p);
  *out = reinterpret_cast<std::uintptr_t>(p);
}

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s device|pinned|managed|peer BYTES STRIDE READS TRIALS [PEER]\n",
                 argv[0]);
    return 2;
  }
  const char* memory = argv[1];
  const std::size_t bytes = std::strtoull(argv[2], nullptr, 10);
  const std::size_t stride = std::strtoull(argv[3], nullptr, 10);
  const long long reads = std::strtoll(argv[4], nullptr, 10);
  const int trials = std::atoi(argv[5]);
  const int peer = argc > 6 ? std::atoi(argv[6]) : 1;
  if (stride < sizeof(std::uintptr_t) || stride % sizeof(std::uintptr_t) || bytes < 2 * stride ||
      reads < 1 || trials < 1) {
    std::fprintf(stderr,
                 "need STRIDE a multiple of 8, BYTES at least two strides, READS and "
                 "TRIALS at least 1\n");
    return 2;
  }
  const std::size_t slots = bytes / stride;
  const char* kinds[] = {"device", "pinned", "managed", "peer"};
  if (std::none_of(std::begin(kinds), std::end(kinds),
                   [&](const char* k) { return std::strcmp(k, memory) == 0; })) {
    std::fprintf(stderr, "unknown memory '%s' (device, pinned, managed, peer)\n", memory);
    return 2;
  }

  // the buffer, where the GPU reads it (`base`), and where the host writes the chain (`host`)
  char* base = nullptr;
  char* host = nullptr;
  std::vector<char> staging;
  CHECK(cudaSetDevice(0));
  if (std::strcmp(memory, "pinned") == 0) {
    CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host), bytes, cudaHostAllocMapped));
    CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&base), host, 0));
  } else if (std::strcmp(memory, "managed") == 0) {
    CHECK(cudaMallocManaged(reinterpret_cast<void**>(&base), bytes));
    host = base;
  } else {  // device or peer
    const bool remote = std::strcmp(memory, "peer") == 0;
    if (remote) {
      int access = 0;
      CHECK(cudaDeviceCanAccessPeer(&access, 0, peer));
      if (!access) {
        std::fprintf(stderr, "GPU 0 cannot access GPU %d's memory\n", peer);
        return 1;
      }
      CHECK(cudaDeviceEnablePeerAccess(peer, 0));
      CHECK(cudaSetDevice(peer));
    }
    CHECK(cudaMalloc(reinterpret_cast<void**>(&base), bytes));
    CHECK(cudaSetDevice(0));
    staging.resize(bytes);
    host = staging.data();
  }

  // one cycle through every slot in a seeded random order, as device addresses
  std::vector<std::size_t> order(slots);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin() + 1, order.end(), std::mt19937_64(42));
  for (std::size_t i = 0; i < slots; ++i) {
    const std::size_t from = order[i] * stride;
    const std::size_t to = order[(i + 1) % slots] * stride;
    const auto target = reinterpret_cast<std::uintptr_t>(base + to);
    std::memcpy(host + from, &target, sizeof target);
  }
  if (!staging.empty()) CHECK(cudaMemcpy(base, host, bytes, cudaMemcpyHostToDevice));
  if (std::strcmp(memory, "managed") == 0) {
    CHECK(cudaMemPrefetchAsync(base, bytes, cudaMemLocation{cudaMemLocationTypeDevice, 0}, 0));
    CHECK(cudaDeviceSynchronize());
  }

  std::uintptr_t* out = nullptr;
  CHECK(cudaMalloc(reinterpret_cast<void**>(&out), sizeof *out));
  const auto* start = reinterpret_cast<const std::uintptr_t*>(base);
  chase<<<1, 1>>>(start, std::min<long long>(reads, static_cast<long long>(slots)), out);  // warm
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  cudaEvent_t begin, end;
  CHECK(cudaEventCreate(&begin));
  CHECK(cudaEventCreate(&end));
  std::vector<double> ns(trials);
  for (int t = 0; t < trials; ++t) {
    CHECK(cudaEventRecord(begin));
    chase<<<1, 1>>>(start, reads, out);
    CHECK(cudaEventRecord(end));
    CHECK(cudaEventSynchronize(end));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, begin, end));
    ns[t] = static_cast<double>(ms) * 1e6 / static_cast<double>(reads);
  }
  std::vector<double> sorted = ns;
  std::sort(sorted.begin(), sorted.end());
  std::printf(
      "{\"memory\": \"%s\", \"bytes\": %zu, \"stride\": %zu, \"reads\": %lld, "
      "\"ns_per_read\": [",
      memory, bytes, stride, reads);
  for (int t = 0; t < trials; ++t) std::printf("%s%.2f", t ? ", " : "", ns[t]);
  std::printf("], \"median_ns\": %.2f}\n", sorted[sorted.size() / 2]);
  return 0;
}
