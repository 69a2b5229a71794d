// Device code of the GEMM study (gemm/kernels.cu): random inputs in each element type, and the
// double-precision check of sampled outputs. Internal to the engine.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace xferscope::gemm::kernels {

enum class Type { f64, f32, f16, bf16, e4m3 };

int type_bytes(Type t);

// Fills `count` elements with values uniform in [-1, 1) from `seed`, rounded to the type.
void fill(void* data, std::size_t count, Type type, std::uint64_t seed, cudaStream_t stream);

// For `samples` output positions (the corners first, then pseudo-random ones from `seed`):
// [|C - reference|, sum |alpha a b| + |beta c0|, row, column] each, into `out` (device memory,
// 4 * samples doubles). A, B and the output are column-major as cuBLAS has them; c0, the C
// the GEMM added, is regenerated from `c_seed` as fill wrote it.
struct CheckArgs {
  const void* a;
  const void* b;
  const void* c;
  Type input, output;
  std::int64_t m, n, k;
  bool trans_a, trans_b;
  double alpha, beta;
  std::uint64_t a_seed, b_seed, c_seed, sample_seed;
};
void check(const CheckArgs& args, int samples, double* out, cudaStream_t stream);

// Adds `amount` to output element `index` (a fault the check must find).
void corrupt(void* c, Type output, std::int64_t index, double amount, cudaStream_t stream);

}  // namespace xferscope::gemm::kernels
