// The pseudo-random pattern sources are filled with. It is defined per 8-byte word (little
// endian) so that host code and device kernels produce and check the very same bytes, and any
// byte of it can be recomputed from its offset alone.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define XFS_HOST_DEVICE __host__ __device__
#else
#define XFS_HOST_DEVICE
#endif

namespace xferscope {

// splitmix64 of the word index: cheap, and no two neighbouring words or seeds look alike.
XFS_HOST_DEVICE inline std::uint64_t pattern_word(std::uint64_t seed, std::uint64_t index) {
  std::uint64_t z = seed + (index + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

XFS_HOST_DEVICE inline std::uint8_t pattern_byte(std::uint64_t seed, std::uint64_t offset) {
  return static_cast<std::uint8_t>(pattern_word(seed, offset / 8) >> (8 * (offset % 8)));
}

// Writes the pattern (or its bitwise complement, a poison no correct copy can leave behind)
// into host memory, on several threads for large buffers.
void fill_host(void* destination, std::size_t bytes, std::uint64_t seed, bool complement);

}  // namespace xferscope
