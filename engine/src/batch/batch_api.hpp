// cudaMemcpyBatchAsync of a batch's pieces: in one call, as the batch study (batch.cpp) makes
// it, or in growing groups, as copy_many's copier (many.cpp) does. The method names the source
// access order.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <string>

#include "xferscope/detail/pieces.hpp"
#include "xferscope/error.hpp"

namespace xferscope::batch {

// The loop method's copy kind: each piece's direction named, as PyTorch's copy names it (on an
// H100 a loop of 3-12 pinned pieces of 96 KiB-1 MiB took the same time as with cudaMemcpyDefault,
// to 0.1 us, both ways).
inline cudaMemcpyKind loop_kind(bool from_host, bool to_host) {
  if (from_host) return to_host ? cudaMemcpyHostToHost : cudaMemcpyHostToDevice;
  return to_host ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice;
}

// The loop method: one cudaMemcpyAsync a piece on `stream`, all pieces one way.
inline void loop_copy(bool from_host, bool to_host, void* const* destinations,
                      const void* const* sources, const std::size_t* sizes, std::size_t count,
                      cudaStream_t stream) {
  const cudaMemcpyKind kind = loop_kind(from_host, to_host);
  for (std::size_t i = 0; i < count; ++i)
    XFS_CUDA_CALL(cudaMemcpyAsync(destinations[i], sources[i], sizes[i], kind, stream));
}

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

// copy_many's form: the same pieces in calls of detail::kFirstGroup entries, then twice as many
// each time, so the copy engine starts on the first pieces while the host still hands over the
// rest. The driver takes 0.5-1 us a piece before any copy of a call starts, and each call costs
// more on the way down. On an H200 (copy_many, pinned memory, medians of 7 trials, one call against
// groups): uploads 1024 x 4 KiB 1410 -> 560 us, 1024 x 256 KiB 5385 -> 4912 us, every one of 15
// shapes (64-1024 pieces of 64 B-1 MiB) faster; downloads of 1024 pieces 454 -> 444 us (64 B),
// 5380 -> 4940 us (256 KiB), but of 256 x 64 B 122 -> 216 us and of 64 x 1 MiB 1255 -> 1281 us.
// On an H100 (copy_many with PyTorch tensors, interleaved with PyTorch's loop) one call of 256 x
// 1 MiB down took 5559-5704 us against the loop's 5499-5517, and 1024 grouped 20829 against
// 21921. So grouped: pinned uploads, and pinned downloads of kGroupedDownloadsFrom pieces or
// more, or of kGroupedLargeDownloadsFrom pieces over kLargeDownload bytes on average.
// Pageable memory (not measured grouped) keeps one call.
constexpr std::size_t kGroupedDownloadsFrom = 1024;
constexpr std::size_t kGroupedLargeDownloadsFrom = 256, kLargeDownload = 256 << 10;

inline bool batch_api_grouped(bool upload, bool pinned, std::size_t count, std::size_t bytes) {
  const bool large = count >= kGroupedLargeDownloadsFrom && bytes / count > kLargeDownload;
  return pinned && (upload || count >= kGroupedDownloadsFrom || large);
}

inline void batch_api_copy_grouped(const std::string& method, bool from_host, bool to_host,
                                   int device, void* const* destinations,
                                   const void* const* sources, const std::size_t* sizes,
                                   std::size_t count, cudaStream_t stream) {
  detail::for_each_group(count, [&](std::size_t start, std::size_t n) {
    batch_api_copy(method, from_host, to_host, device, destinations + start, sources + start,
                   sizes + start, n, stream);
  });
}

}  // namespace xferscope::batch
