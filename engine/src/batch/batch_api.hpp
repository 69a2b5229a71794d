// One cudaMemcpyBatchAsync of a batch's pieces, as both the batch study (batch.cpp) and
// copy_many's copier (many.cpp) make it: the method names the source access order.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "xferscope/error.hpp"

namespace xferscope::batch {

// batch-stream, batch-call, batch-any: all pieces one way, each end host memory or `device`'s.
inline void batch_api_copy(const std::string& method, bool from_host, bool to_host, int device,
                           void* const* destinations, const void* const* sources,
                           const std::size_t* sizes, std::size_t count, cudaStream_t stream) {
  cudaMemcpyAttributes attr{};
  attr.srcAccessOrder = method == "batch-call"  ? cudaMemcpySrcAccessOrderDuringApiCall
                        : method == "batch-any" ? cudaMemcpySrcAccessOrderAny
                                                : cudaMemcpySrcAccessOrderStream;
  attr.srcLocHint.type = from_host ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
  attr.srcLocHint.id = from_host ? 0 : device;
  attr.dstLocHint.type = to_host ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
  attr.dstLocHint.id = to_host ? 0 : device;
  std::size_t index = 0;
  XFS_CUDA_CALL(
      cudaMemcpyBatchAsync(destinations, sources, sizes, count, &attr, &index, 1, stream));
}

}  // namespace xferscope::batch
