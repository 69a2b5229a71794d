// Issue 49, the staged copy of 1 GiB against pinned memory (goal 0.95): the staged copy's pipeline
// (T threads, each filling or emptying its own pinned chunks while the copy engine moves the
// chunks before) rebuilt with its schedule as options, to find which schedule makes 1 GiB closest
// to pinned memory's rate. Also the DMA alone in chunks (4-16 MiB, one stream or 12).
// mode 0: today's schedule (each thread's first chunk an eighth); 1: chunks growing by g from
// 256 KiB at the start; 2: shrinking at the end; 3: both. shared: one stream for every thread.
// Built and run on the GPU machine:
//   nvcc -O2 -std=c++17 -o /tmp/p benchmarks/staged_pipeline.cu -lpthread && /tmp/p > out.jsonl
#include <cuda_runtime.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "staged_common.hpp"
using clk = std::chrono::steady_clock;
static const size_t G = 64 << 10;
struct Cfg {
  int T;
  size_t chunk;
  int slots;
  int mode;
  double g;
  size_t s0;
  bool shared;
};
// mode 0: current (each thread's first chunk chunk/8); 1: geometric ramp at start; 2: at end;
// 3: both
static std::vector<size_t> schedule(const Cfg& c) {
  std::vector<size_t> ramp;
  if (c.mode)
    for (double s = c.s0; s < c.chunk; s *= c.g)
      ramp.push_back(std::min(c.chunk, (size_t(s) + G - 1) / G * G));
  std::vector<size_t> out;
  size_t left = N;
  auto take = [&](size_t s) {
    s = std::min(s, left);
    if (s) out.push_back(s);
    left -= s;
  };
  if (c.mode == 0) {
    size_t h = std::max(c.chunk / 8, G);
    for (int t = 0; t < c.T; ++t) take(h);
  }
  size_t rampsum = 0;
  for (auto s : ramp) rampsum += s;
  if (c.mode & 1)
    for (auto s : ramp) take(s);
  size_t tail = (c.mode & 2) ? rampsum : 0;
  while (left > tail) take(std::min(c.chunk, left - tail));
  if (c.mode & 2)
    for (auto it = ramp.rbegin(); it != ramp.rend(); ++it) take(*it);
  if (left) out.back() += left;
  return out;
}
static double run(const Cfg& c, bool up, char* page, char* dev, char* stage,
                  std::vector<cudaStream_t>& ss, std::vector<cudaEvent_t>& ev) {
  auto sizes = schedule(c);
  std::vector<size_t> off(sizes.size());
  size_t o = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    off[i] = o;
    o += sizes[i];
  }
  std::mutex m;
  cudaDeviceSynchronize();
  auto a = clk::now();
  std::vector<std::thread> th;
  for (int t = 0; t < c.T; ++t)
    th.emplace_back([&, t] {
      cudaStream_t s = c.shared ? ss[0] : ss[t];
      auto buf = [&](int k) { return stage + (size_t(t) * c.slots + k) * c.chunk; };
      auto evt = [&](int k) { return ev[t * 4 + k]; };
      size_t n = sizes.size();
      if (up) {
        int k = 0;
        for (size_t i = t; i < n; i += c.T, k = (k + 1) % c.slots) {
          cudaEventSynchronize(evt(k));
          memcpy(buf(k), page + off[i], sizes[i]);
          if (c.shared) m.lock();
          cudaMemcpyAsync(dev + off[i], buf(k), sizes[i], cudaMemcpyHostToDevice, s);
          cudaEventRecord(evt(k), s);
          if (c.shared) m.unlock();
        }
      } else {
        auto q = [&](size_t i, int k) {
          if (c.shared) m.lock();
          cudaMemcpyAsync(buf(k), dev + off[i], sizes[i], cudaMemcpyDeviceToHost, s);
          cudaEventRecord(evt(k), s);
          if (c.shared) m.unlock();
        };
        int k = 0;
        size_t i = t;
        if (i < n) q(i, 0);
        for (; i < n; i += c.T, k = (k + 1) % c.slots) {
          if (i + c.T < n) q(i + c.T, (k + 1) % c.slots);
          cudaEventSynchronize(evt(k));
          nt_copy(page + off[i], buf(k), sizes[i]);
        }
      }
      cudaStreamSynchronize(s);
    });
  for (auto& x : th) x.join();
  cudaDeviceSynchronize();
  return N / std::chrono::duration<double>(clk::now() - a).count() / 1e9;
}
int main(int argc, char** argv) {
  char* page = (char*)aligned_alloc(4096, N);
  for (size_t i = 0; i < N; i += 8) *(uint64_t*)(page + i) = i * 0x9E3779B97F4A7C15ull;
  char *pin, *stage, *dev;
  CK(cudaHostAlloc(&pin, N, 0));
  memcpy(pin, page, N);
  size_t stage_bytes = size_t(16) * 3 * (8 << 20);
  CK(cudaHostAlloc(&stage, stage_bytes, 0));
  memset(stage, 1, stage_bytes);
  CK(cudaMalloc(&dev, N));
  std::vector<cudaStream_t> ss(16);
  for (auto& x : ss) cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking);
  std::vector<cudaEvent_t> ev(64);
  for (auto& x : ev) cudaEventCreateWithFlags(&x, cudaEventDisableTiming);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int up = 1; up >= 0; --up) {
    std::vector<double> pinned;
    for (int r = 0; r < 5; ++r) {
      cudaDeviceSynchronize();
      auto a = clk::now();
      if (up)
        cudaMemcpy(dev, pin, N, cudaMemcpyHostToDevice);
      else
        cudaMemcpy(pin, dev, N, cudaMemcpyDeviceToHost);
      pinned.push_back(N / std::chrono::duration<double>(clk::now() - a).count() / 1e9);
    }
    std::sort(pinned.begin(), pinned.end());
    printf("{\"dir\":\"%s\",\"what\":\"pinned\",\"median\":%.2f}\n", up ? "up" : "down", pinned[2]);
    // chunked DMA alone: one stream vs 12, chunk sizes
    for (size_t ch : {size_t(4) << 20, size_t(8) << 20, size_t(16) << 20})
      for (int ns : {1, 12}) {
        cudaDeviceSynchronize();
        auto a = clk::now();
        for (size_t c = 0; c < N / ch; ++c) {
          char* h = pin + c * ch;
          if (up)
            cudaMemcpyAsync(dev + c * ch, h, ch, cudaMemcpyHostToDevice, ss[c % ns]);
          else
            cudaMemcpyAsync(h, dev + c * ch, ch, cudaMemcpyDeviceToHost, ss[c % ns]);
        }
        cudaDeviceSynchronize();
        printf(
            "{\"dir\":\"%s\",\"what\":\"chunked_dma\",\"chunk_MiB\":%zu,\"streams\":%d,\"gbps\":%."
            "2f}\n",
            up ? "up" : "down", ch >> 20, ns,
            N / std::chrono::duration<double>(clk::now() - a).count() / 1e9);
      }
    std::vector<Cfg> cfgs;
    for (int T : {11, 12, 14})
      for (size_t ch : {size_t(4) << 20, size_t(8) << 20})
        for (int mode : {0, 1, 2, 3})
          for (double g : {1.05, 1.1, 1.2})
            for (int sh = 0; sh <= 1; ++sh) {
              if (mode == 0 && g != 1.05) continue;
              if (T == 14 && (sh || ch != (size_t(4) << 20))) continue;
              cfgs.push_back({T, ch, up ? 2 : 3, mode, g, 256 << 10, bool(sh)});
            }
    for (auto& c : cfgs) {
      std::vector<double> r;
      run(c, up, page, dev, stage, ss, ev);
      for (int i = 0; i < 5; ++i) r.push_back(run(c, up, page, dev, stage, ss, ev));
      std::sort(r.begin(), r.end());
      printf(
          "{\"dir\":\"%s\",\"T\":%d,\"chunk_MiB\":%zu,\"mode\":%d,\"g\":%.2f,\"shared\":%d,"
          "\"chunks\":%zu,\"median\":%.2f,\"best\":%.2f,\"vs_pinned\":%.3f}\n",
          up ? "up" : "down", c.T, c.chunk >> 20, c.mode, c.g, int(c.shared), schedule(c).size(),
          r[2], r[4], r[2] / pinned[2]);
      fflush(stdout);
    }
  }
  // verify the last readback landed: page vs device for a slice
  return 0;
}
