// Random GEMM inputs in every element type, and the double-precision check of sampled outputs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "gemm/kernels.hpp"
#include "xferscope/error.hpp"
#include "xferscope/pattern.hpp"

namespace xferscope::gemm::kernels {

namespace {

// The value element `index` holds: uniform in [-1, 1) from the pattern, rounded to the type.
__device__ double generate(Type type, std::uint64_t seed, std::uint64_t index) {
  const double u = static_cast<double>(pattern_word(seed, index) >> 11) * 0x1.0p-53 * 2.0 - 1.0;
  switch (type) {
    case Type::f64: return u;
    case Type::f32: return static_cast<double>(static_cast<float>(u));
    case Type::f16: return static_cast<double>(__half2float(__float2half(static_cast<float>(u))));
    case Type::bf16:
      return static_cast<double>(__bfloat162float(__float2bfloat16(static_cast<float>(u))));
    case Type::e4m3:
      return static_cast<double>(static_cast<float>(__nv_fp8_e4m3(static_cast<float>(u))));
  }
  return 0.0;
}

__device__ void store(void* data, Type type, std::size_t i, double v) {
  switch (type) {
    case Type::f64: static_cast<double*>(data)[i] = v; break;
    case Type::f32: static_cast<float*>(data)[i] = static_cast<float>(v); break;
    case Type::f16: static_cast<__half*>(data)[i] = __float2half(static_cast<float>(v)); break;
    case Type::bf16:
      static_cast<__nv_bfloat16*>(data)[i] = __float2bfloat16(static_cast<float>(v));
      break;
    case Type::e4m3:
      static_cast<__nv_fp8_e4m3*>(data)[i] = __nv_fp8_e4m3(static_cast<float>(v));
      break;
  }
}

__device__ double load(const void* data, Type type, std::size_t i) {
  switch (type) {
    case Type::f64: return static_cast<const double*>(data)[i];
    case Type::f32: return static_cast<const float*>(data)[i];
    case Type::f16: return __half2float(static_cast<const __half*>(data)[i]);
    case Type::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[i]);
    case Type::e4m3: return static_cast<float>(static_cast<const __nv_fp8_e4m3*>(data)[i]);
  }
  return 0.0;
}

__global__ void fill_kernel(void* data, std::size_t count, Type type, std::uint64_t seed) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride) {
    store(data, type, i, generate(type, seed, i));
  }
}

__global__ void check_kernel(CheckArgs g, int samples, double* out) {
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= samples) return;
  std::int64_t row, column;
  if (s == 0) {
    row = 0, column = 0;
  } else if (s == 1) {
    row = g.m - 1, column = g.n - 1;
  } else {
    const std::uint64_t h = pattern_word(g.sample_seed, static_cast<std::uint64_t>(s));
    row = static_cast<std::int64_t>((h & 0xFFFFFFFFull) % static_cast<std::uint64_t>(g.m));
    column = static_cast<std::int64_t>((h >> 32) % static_cast<std::uint64_t>(g.n));
  }
  double sum = 0.0, magnitude = 0.0;
  for (std::int64_t p = 0; p < g.k; ++p) {
    const std::size_t ai = g.trans_a ? p + row * g.k : row + p * g.m;
    const std::size_t bi = g.trans_b ? column + p * g.n : p + column * g.k;
    const double a = load(g.a, g.input, ai), b = load(g.b, g.input, bi);
    sum += a * b;
    magnitude += fabs(a * b);
  }
  const std::size_t ci = static_cast<std::size_t>(row + column * g.m);
  const double c0 = g.beta != 0.0 ? generate(g.output, g.c_seed, ci) : 0.0;
  const double reference = g.alpha * sum + g.beta * c0;
  out[4 * s + 0] = fabs(load(g.c, g.output, ci) - reference);
  out[4 * s + 1] = fabs(g.alpha) * magnitude + fabs(g.beta * c0);
  out[4 * s + 2] = static_cast<double>(row);
  out[4 * s + 3] = static_cast<double>(column);
}

__global__ void corrupt_kernel(void* c, Type output, std::int64_t index, double amount) {
  store(c, output, static_cast<std::size_t>(index), load(c, output, index) + amount);
}

}  // namespace

int type_bytes(Type t) {
  switch (t) {
    case Type::f64: return 8;
    case Type::f32: return 4;
    case Type::f16:
    case Type::bf16: return 2;
    case Type::e4m3: return 1;
  }
  return 0;
}

void fill(void* data, std::size_t count, Type type, std::uint64_t seed, cudaStream_t stream) {
  fill_kernel<<<1024, 256, 0, stream>>>(data, count, type, seed);
  XFS_CUDA_CALL(cudaGetLastError());
}

void check(const CheckArgs& args, int samples, double* out, cudaStream_t stream) {
  check_kernel<<<(samples + 63) / 64, 64, 0, stream>>>(args, samples, out);
  XFS_CUDA_CALL(cudaGetLastError());
}

void corrupt(void* c, Type output, std::int64_t index, double amount, cudaStream_t stream) {
  corrupt_kernel<<<1, 1, 0, stream>>>(c, output, index, amount);
  XFS_CUDA_CALL(cudaGetLastError());
}

}  // namespace xferscope::gemm::kernels
