// The batch methods' GPU kernels: copies over a table of (source, destination, bytes), one
// block per copy, 16-byte words where both ends are equally misaligned (after a head of bytes up
// to the next 16-byte boundary), else bytes.
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
    const auto s_at = reinterpret_cast<std::uintptr_t>(src);
    const auto d_at = reinterpret_cast<std::uintptr_t>(dst);
    std::size_t done = 0;
    if (((s_at ^ d_at) & 15) == 0) {
      const std::size_t head_bytes = (16 - (d_at & 15)) & 15;
      const std::size_t head = head_bytes < piece.bytes ? head_bytes : piece.bytes;
      if (threadIdx.x < head) dst[threadIdx.x] = src[threadIdx.x];
      const std::size_t words = (piece.bytes - head) / 16;
      const auto* s = reinterpret_cast<const uint4*>(src + head);
      auto* d = reinterpret_cast<uint4*>(dst + head);
      for (std::size_t i = threadIdx.x; i < words; i += blockDim.x) d[i] = s[i];
      done = head + words * 16;
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
