// The batch methods' GPU copy kernel (kernels.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace xferscope::batch::kernels {

struct Piece {
  const void* src;
  void* dst;
  std::size_t bytes;
};

// Every piece of the device-resident table, one block per piece (scatter, gather, and the SM
// copy over mapped host memory), in 16-byte words where both ends are equally misaligned.
void copy(const Piece* pieces, std::size_t count, cudaStream_t stream);

// A table's pieces are at most this long, so one large copy spreads over many blocks (one block
// moves a few GB/s).
constexpr std::size_t kPartBytes = std::size_t{1} << 20;

// Table entries for one copy: cut into parts of at most kPartBytes (an empty copy: none).
inline std::size_t parts(std::size_t bytes) { return (bytes + kPartBytes - 1) / kPartBytes; }

// Appends the entries of one copy of `bytes` from src to dst. Parts start kPartBytes apart, a
// multiple of 16, so each keeps the copy's alignment.
inline void add(std::vector<Piece>& table, const void* src, void* dst, std::size_t bytes) {
  for (std::size_t at = 0; at < bytes; at += kPartBytes) {
    table.push_back({static_cast<const char*>(src) + at, static_cast<char*>(dst) + at,
                     bytes - at < kPartBytes ? bytes - at : kPartBytes});
  }
}

// Where a piece goes in a packed staging buffer whose base is 16-byte aligned: the first offset
// at or after `end` that is as far past 16 bytes as `other`, the address at the piece's other
// end, so the kernel moves it in 16-byte words (packed tightly, pieces of odd sizes would go
// byte by byte). Adds at most 15 bytes per piece.
inline std::size_t packed_at(std::size_t end, const void* other) {
  return end + ((reinterpret_cast<std::uintptr_t>(other) - end) & 15);
}

}  // namespace xferscope::batch::kernels
