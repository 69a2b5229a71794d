// The benchmarks' one way to check a CUDA runtime call in main(): the call and its error on
// stderr, and exit status 1.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>

#define CHECK(call)                                                         \
  do {                                                                      \
    cudaError_t status_ = (call);                                           \
    if (status_ != cudaSuccess) {                                           \
      std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(status_)); \
      return 1;                                                             \
    }                                                                       \
  } while (0)
