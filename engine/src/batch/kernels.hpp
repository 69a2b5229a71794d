// The batch methods' GPU copy kernel (kernels.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace xferscope::batch::kernels {

struct Piece {
  const void* src;
  void* dst;
  std::size_t bytes;
};

// Every piece of the device-resident table, one block per piece (scatter, gather, and the SM
// copy over mapped host memory).
void copy(const Piece* pieces, std::size_t count, cudaStream_t stream);

}  // namespace xferscope::batch::kernels
