// A CUDA C++ processing loop: each step the host writes a few new rows into a 32 MiB float input
// buffer (as a sensor would), copies it to the GPU with cudaMemcpy, runs a filter kernel of a few
// milliseconds on it (chains of FMAs per element, grid-stride) and copies the 32 MiB result back
// with cudaMemcpy.
// Cause: both host buffers come from malloc (pageable), so the driver stages every copy through
// its own buffer a chunk at a time while the host waits. --fixed: the same buffers from
// cudaMallocHost (pinned), the same cudaMemcpy calls and nothing else changed. --resident: the
// input uploaded once before the loop and the result kept on the GPU, the same kernels.
// Prints one JSON line as corpus.py's Loop.report does, then checks a few elements of the last
// result against the host's own arithmetic (exit status 1 and a message where one is wrong).
//   memcpy_loop [--steps N] [--fixed] [--resident]
//   built with nvcc -O2 -g -lineinfo -arch=sm_90 -o memcpy_loop memcpy_loop.cu

// cause: pageable_copies
// fix: the host buffers from cudaMallocHost (pinned) instead of malloc, the same cudaMemcpy calls
// step: STEP
// resident: yes
// gpus: 1
// needs: nvcc

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "corpus.hpp"

constexpr std::size_t kRow = 4096, kRows = 2048, kN = kRow * kRows;  // 32 MiB of float
constexpr std::size_t kBytes = kN * sizeof(float);
constexpr std::size_t kFresh = 16;  // rows written anew each step
constexpr int kIters = 4096;        // FMA rounds per element (4 chains each)

// The filter, the same on both sides: four chains of FMAs from the element, summed.
__host__ __device__ inline float filter(float x) {
  float a = x, b = 0.5f * x, c = 1.0f - x, d = 0.25f + x;
  for (int k = 0; k < kIters; ++k) {
    a = fmaf(a, 0.9999f, 1.0e-4f);
    b = fmaf(b, 0.9998f, 2.0e-4f);
    c = fmaf(c, 0.9997f, 3.0e-4f);
    d = fmaf(d, 0.9996f, 4.0e-4f);
  }
  return a + b + c + d;
}

__global__ void run_filter(const float* in, float* out, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x)
    out[i] = filter(in[i]);
}

// xorshift floats in [0, 1): the host's new data
std::uint64_t state = 0x9E3779B97F4A7C15ull;
void fill(float* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    p[i] = static_cast<float>(state >> 40) * (1.0f / 16777216.0f);
  }
}

int main(int argc, char** argv) {
  const corpus::Options o = corpus::options(argc, argv, 200);
  const int steps = o.steps;
  const bool fixed = o.fixed, resident = o.resident;
  float *input = nullptr, *result = nullptr;
  if (fixed) {
    CHECK(cudaMallocHost(&input, kBytes));
    CHECK(cudaMallocHost(&result, kBytes));
  } else {
    input = static_cast<float*>(std::malloc(kBytes));
    result = static_cast<float*>(std::malloc(kBytes));
    if (!input || !result) return 2;
  }
  fill(input, kN);
  std::memset(result, 0, kBytes);
  float *d_in = nullptr, *d_out = nullptr;
  CHECK(cudaMalloc(&d_in, kBytes));
  CHECK(cudaMalloc(&d_out, kBytes));
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const unsigned blocks = 8 * sms, threads = 256;
  if (resident) CHECK(cudaMemcpy(d_in, input, kBytes, cudaMemcpyHostToDevice));
  constexpr int kChecked = 6;
  const std::size_t checked[kChecked] = {0, 1, kRow + 3, kFresh * kRow, kN / 2 + 7, kN - 1};
  float sampled[kChecked];  // the input of the elements checked, as last uploaded

  auto step = [&] {  // the host's new rows, the copy in, the kernel, the copy out
    fill(input, kFresh * kRow);
    if (!resident) CHECK(cudaMemcpy(d_in, input, kBytes, cudaMemcpyHostToDevice));  // STEP
    run_filter<<<blocks, threads>>>(d_in, d_out, kN);
    CHECK(cudaGetLastError());
    if (!resident) CHECK(cudaMemcpy(result, d_out, kBytes, cudaMemcpyDeviceToHost));  // STEP
  };
  if (resident)
    for (int j = 0; j < kChecked; ++j) sampled[j] = input[checked[j]];
  corpus::Loop loop;
  loop.run([&](int) { step(); }, 3, steps);  // 3 warm-up steps
  loop.report("memcpy_loop", o);

  if (resident) {
    CHECK(cudaMemcpy(result, d_out, kBytes, cudaMemcpyDeviceToHost));
  } else {
    for (int j = 0; j < kChecked; ++j) sampled[j] = input[checked[j]];
  }
  for (int j = 0; j < kChecked; ++j) {
    const float want = filter(sampled[j]), got = result[checked[j]];
    if (!(std::fabs(got - want) <= 1e-5f * std::fabs(want) + 1e-6f)) {
      std::fprintf(stderr, "wrong result at %zu: %.9g, want %.9g\n", checked[j], got, want);
      return 1;
    }
  }
  if (fixed) {
    CHECK(cudaFreeHost(input));
    CHECK(cudaFreeHost(result));
  } else {
    std::free(input);
    std::free(result);
  }
  CHECK(cudaFree(d_in));
  CHECK(cudaFree(d_out));
  return 0;
}
