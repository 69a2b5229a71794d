// The batch methods' GPU kernels: copies over a table of (source, destination, bytes), one
// block per copy, 16-byte words where both ends allow it, else bytes.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "batch/kernels.hpp"
#include "xferscope/error.hpp"

namespace xferscope::batch::kernels {

namespace {

__global__ void copy_table(const Piece* pieces, std::size_t count) {
  for (std::size_t p = blockIdx.x; p < count; p += gridDim.x) {
    const Piece piece = pieces[p];
    const auto* src = static_cast<const unsigned char*>(piece.src);
    auto* dst = static_cast<unsigned char*>(piece.dst);
    const bool wide =
        ((reinterpret_cast<std::uintptr_t>(src) | reinterpret_cast<std::uintptr_t>(dst)) & 15) == 0;
    std::size_t done = 0;
    if (wide) {
      const std::size_t words = piece.bytes / 16;
      const auto* s = reinterpret_cast<const uint4*>(src);
      auto* d = reinterpret_cast<uint4*>(dst);
      for (std::size_t i = threadIdx.x; i < words; i += blockDim.x) d[i] = s[i];
      done = words * 16;
    }
    for (std::size_t i = done + threadIdx.x; i < piece.bytes; i += blockDim.x) dst[i] = src[i];
  }
}

}  // namespace

void copy(const Piece* pieces, std::size_t count, cudaStream_t stream) {
  if (count == 0) return;
  const unsigned blocks = static_cast<unsigned>(count < 65535 ? count : 65535);
  copy_table<<<blocks, 256, 0, stream>>>(pieces, count);
  XFS_CUDA_CALL(cudaGetLastError());
}

}  // namespace xferscope::batch::kernels
