// What the staged-copy probes (staged_floor.cu, staged_pipeline.cu) share: a CUDA check that
// ends the program from any thread, 1 GiB, and the streaming-store copy (as the staged copy's
// copy_streaming makes its readbacks: 64 bytes a step, the destination's cache lines not read).
#pragma once

#include <cuda_runtime.h>
#include <immintrin.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>

#define CK(x)                                        \
  do {                                               \
    cudaError_t e = (x);                             \
    if (e) {                                         \
      printf("%s: %s\n", #x, cudaGetErrorString(e)); \
      exit(1);                                       \
    }                                                \
  } while (0)

static const size_t N = size_t(1) << 30;

static void nt_copy(char* d, const char* s, size_t n) {
  size_t b = n / 64;
  for (size_t i = 0; i < b; ++i) {
    __m128i a0 = _mm_loadu_si128((const __m128i*)s), a1 = _mm_loadu_si128((const __m128i*)s + 1),
            a2 = _mm_loadu_si128((const __m128i*)s + 2),
            a3 = _mm_loadu_si128((const __m128i*)s + 3);
    _mm_stream_si128((__m128i*)d, a0);
    _mm_stream_si128((__m128i*)d + 1, a1);
    _mm_stream_si128((__m128i*)d + 2, a2);
    _mm_stream_si128((__m128i*)d + 3, a3);
    s += 64;
    d += 64;
  }
  _mm_sfence();
}
