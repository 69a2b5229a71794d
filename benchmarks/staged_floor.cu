// Issue 49, the staged copy of 1 GiB against pinned memory (goal 0.95): its floor on this host.
// Built and run on the GPU machine: nvcc -O2 -std=c++17 -o /tmp/f benchmarks/staged_floor.cu
// -lpthread Measures the host side alone (T threads copying a 1 GiB pageable buffer through
// per-thread recycled pinned chunks, as the staged copy does), the DMA alone, and the two at once
// (each's rate while the other runs).
#include <cuda_runtime.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "staged_common.hpp"
using clk = std::chrono::steady_clock;
// host side: thread t copies its chunks c = t, t+T, ... between `page` and its own `bufs` slots
static double host_side(int T, size_t chunk, int slots, bool up, bool nt, char* page, char* stage) {
  std::vector<std::thread> th;
  size_t count = N / chunk;
  auto a = clk::now();
  for (int t = 0; t < T; ++t)
    th.emplace_back([=] {
      int s = 0;
      for (size_t c = t; c < count; c += T, s = (s + 1) % slots) {
        char* buf = stage + (size_t(t) * slots + s) * chunk;
        if (up)
          memcpy(buf, page + c * chunk, chunk);
        else if (nt)
          nt_copy(page + c * chunk, buf, chunk);
        else
          memcpy(page + c * chunk, buf, chunk);
      }
    });
  for (auto& x : th) x.join();
  return N / std::chrono::duration<double>(clk::now() - a).count() / 1e9;
}
int main() {
  char* page = (char*)aligned_alloc(4096, N);
  for (size_t i = 0; i < N; i += 8) *(uint64_t*)(page + i) = i * 0x9E3779B97F4A7C15ull;
  char *pin, *stage, *dev;
  CK(cudaHostAlloc(&pin, N, 0));
  memcpy(pin, page, N);
  CK(cudaHostAlloc(&stage, size_t(16) * 3 * (16 << 20), 0));
  memset(stage, 1, size_t(16) * 3 * (16 << 20));
  CK(cudaMalloc(&dev, N));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  auto dma = [&](bool up) {
    cudaEventRecord(e0, s);
    if (up)
      cudaMemcpyAsync(dev, pin, N, cudaMemcpyHostToDevice, s);
    else
      cudaMemcpyAsync(pin, dev, N, cudaMemcpyDeviceToHost, s);
    cudaEventRecord(e1, s);
  };
  auto dma_rate = [&] {
    CK(cudaEventSynchronize(e1));
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    return N / (ms / 1e3) / 1e9;
  };
  for (int up = 1; up >= 0; --up) {
    double best = 0;
    for (int r = 0; r < 3; ++r) {
      dma(up);
      best = std::max(best, dma_rate());
    }
    printf("{\"dir\":\"%s\",\"what\":\"dma_alone\",\"gbps\":%.2f}\n", up ? "up" : "down", best);
    // chunked DMA alone: 4 MiB chunks over 12 streams
    std::vector<cudaStream_t> ss(12);
    for (auto& x : ss) cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking);
    for (int r = 0; r < 2; ++r) {
      cudaDeviceSynchronize();
      auto a = clk::now();
      for (size_t c = 0; c < N / (4 << 20); ++c) {
        size_t o = c * (4 << 20);
        if (up)
          cudaMemcpyAsync(dev + o, stage + (c % 24) * (4 << 20), 4 << 20, cudaMemcpyHostToDevice,
                          ss[c % 12]);
        else
          cudaMemcpyAsync(stage + (c % 24) * (4 << 20), dev + o, 4 << 20, cudaMemcpyDeviceToHost,
                          ss[c % 12]);
      }
      cudaDeviceSynchronize();
      if (r)
        printf("{\"dir\":\"%s\",\"what\":\"dma_4MiB_chunks_12_streams\",\"gbps\":%.2f}\n",
               up ? "up" : "down", N / std::chrono::duration<double>(clk::now() - a).count() / 1e9);
    }
    for (int T : {1, 4, 8, 11, 12, 16})
      for (size_t chunk : {size_t(2) << 20, size_t(4) << 20})
        for (int nt = 0; nt <= (up ? 0 : 1); ++nt) {
          int slots = up ? 2 : 3;
          double alone = 0, hb = 0, db = 0;
          for (int r = 0; r < 3; ++r)
            alone = std::max(alone, host_side(T, chunk, slots, up, nt, page, stage));
          for (int r = 0; r < 3; ++r) {
            cudaDeviceSynchronize();
            dma(up);
            double h = host_side(T, chunk, slots, up, nt, page, stage);
            double d = dma_rate();
            if (std::min(h, d) > std::min(hb, db)) {
              hb = h;
              db = d;
            }
          }
          printf(
              "{\"dir\":\"%s\",\"threads\":%d,\"chunk_MiB\":%zu,\"nt\":%d,\"host_alone\":%.2f,"
              "\"host_with_dma\":%.2f,\"dma_with_host\":%.2f}\n",
              up ? "up" : "down", T, chunk >> 20, nt, alone, hb, db);
        }
  }
  // DRAM: pageable to pageable, 16 threads
  char* page2 = (char*)aligned_alloc(4096, N);
  memset(page2, 0, N);
  for (int T : {8, 16}) {
    double best = 0;
    for (int r = 0; r < 3; ++r) {
      std::vector<std::thread> th;
      auto a = clk::now();
      for (int t = 0; t < T; ++t)
        th.emplace_back([=] {
          size_t sl = N / T;
          memcpy(page2 + t * sl, page + t * sl, sl);
        });
      for (auto& x : th) x.join();
      best = std::max(best, N / std::chrono::duration<double>(clk::now() - a).count() / 1e9);
    }
    printf("{\"what\":\"pageable_memcpy\",\"threads\":%d,\"gbps\":%.2f}\n", T, best);
  }
  return 0;
}
