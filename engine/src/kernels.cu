#include <algorithm>
#include <climits>

#include "kernels.hpp"
#include "xferscope/error.hpp"
#include "xferscope/pattern.hpp"

namespace xferscope::kernels {

namespace {

constexpr int kCopyThreads = 512;
constexpr int kCopyUnroll = 4;
constexpr int kPatternThreads = 256;
constexpr unsigned kMaxPatternBlocks = 8192;

__device__ std::uint64_t global_timer_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Grid-stride copy. Each thread keeps kCopyUnroll 16-byte loads in flight: over PCIe (mapped
// host memory) the SMs only reach the link's rate with many outstanding reads.
__global__ void copy_kernel(std::uint8_t* __restrict__ dst, const std::uint8_t* __restrict__ src,
                            std::size_t bytes, std::size_t vectors) {
  auto* d = reinterpret_cast<uint4*>(dst);
  const auto* s = reinterpret_cast<const uint4*>(src);
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  for (; i + (kCopyUnroll - 1) * stride < vectors; i += kCopyUnroll * stride) {
    uint4 v[kCopyUnroll];
#pragma unroll
    for (int u = 0; u < kCopyUnroll; ++u) v[u] = s[i + u * stride];
#pragma unroll
    for (int u = 0; u < kCopyUnroll; ++u) d[i + u * stride] = v[u];
  }
  for (; i < vectors; i += stride) d[i] = s[i];
  for (std::size_t j = vectors * 16 + std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; j < bytes;
       j += stride) {
    dst[j] = src[j];
  }
}

// Holds the stream it runs on until the host writes *release, so the work queued behind it
// starts back to back and events around that work time the device alone, without the host's
// enqueue cost (the method of nvbandwidth and nvbench). Sharp edges: the host must never block
// while it enqueues behind this kernel (pageable copies and synchronous calls do, so the engine
// never queues those behind it), and the queue it holds is finite. The timeout turns a stuck
// host into a flagged result instead of a hang.
__global__ void blocking_kernel(const volatile std::int32_t* release, std::int32_t* timed_out,
                                std::uint64_t timeout_ns) {
  const std::uint64_t start = global_timer_ns();
  while (*release == 0) {
    if (global_timer_ns() - start > timeout_ns) {
      *timed_out = 1;
      return;
    }
  }
}

__global__ void fill_kernel(std::uint8_t* dst, std::size_t bytes, std::uint64_t seed,
                            std::uint64_t mask) {
  const std::size_t words = bytes / 8;
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  const std::size_t first = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  auto* out = reinterpret_cast<std::uint64_t*>(dst);
  for (std::size_t i = first; i < words; i += stride) out[i] = pattern_word(seed, i) ^ mask;
  for (std::size_t j = words * 8 + first; j < bytes; j += stride) {
    dst[j] = static_cast<std::uint8_t>(pattern_byte(seed, j) ^ mask);
  }
}

__device__ void record_mismatch(unsigned long long* counters, unsigned long long count,
                                unsigned long long offset) {
  atomicAdd(&counters[0], count);
  atomicMin(&counters[1], offset);
}

// The pattern's 8 bytes from byte `offset` on, as one little-endian word.
__device__ std::uint64_t pattern_at(std::uint64_t seed, std::size_t offset) {
  const unsigned shift = 8 * static_cast<unsigned>(offset % 8);
  const std::uint64_t low = pattern_word(seed, offset / 8);
  if (shift == 0) return low;
  return (low >> shift) | (pattern_word(seed, offset / 8 + 1) << (64 - shift));
}

__global__ void compare_kernel(const std::uint8_t* data, std::size_t bytes, std::uint64_t seed,
                               std::size_t pattern_offset, unsigned long long* counters) {
  const std::size_t words = bytes / 8;
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  const std::size_t first = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const auto* in = reinterpret_cast<const std::uint64_t*>(data);
  for (std::size_t i = first; i < words; i += stride) {
    const std::uint64_t diff = in[i] ^ pattern_at(seed, pattern_offset + i * 8);
    if (diff != 0) {
      unsigned long long count = 0;
      int lowest = 8;
      for (int b = 7; b >= 0; --b) {
        if ((diff >> (8 * b)) & 0xffu) {
          ++count;
          lowest = b;
        }
      }
      record_mismatch(counters, count, i * 8 + lowest);
    }
  }
  for (std::size_t j = words * 8 + first; j < bytes; j += stride) {
    if (data[j] != pattern_byte(seed, pattern_offset + j)) record_mismatch(counters, 1, j);
  }
}

__global__ void compute_kernel(float* data, std::size_t count, int work) {
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count; i += stride) {
    float x = data[i];
    for (int w = 0; w < work; ++w) x = fmaf(x, 0.999f, 0.001f);
    data[i] = x;
  }
}

unsigned pattern_blocks(std::size_t bytes) {
  const std::size_t words = bytes / 8 + 1;
  const std::size_t blocks = (words + kPatternThreads - 1) / kPatternThreads;
  return static_cast<unsigned>(blocks < kMaxPatternBlocks ? blocks : kMaxPatternBlocks);
}

void check_launch() { XFS_CUDA_CALL(cudaGetLastError()); }

}  // namespace

void compute(float* data, std::size_t count, int work, int sm_count, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const std::size_t wanted = (count + kThreads - 1) / kThreads;
  const std::size_t most = static_cast<std::size_t>(sm_count > 0 ? sm_count : 1) * 8;
  const unsigned blocks = static_cast<unsigned>(std::max<std::size_t>(1, std::min(wanted, most)));
  compute_kernel<<<blocks, kThreads, 0, stream>>>(data, count, work);
  check_launch();
}

void copy(void* destination, const void* source, std::size_t bytes, int sm_count,
          cudaStream_t stream) {
  const bool aligned =
      ((reinterpret_cast<std::uintptr_t>(destination) | reinterpret_cast<std::uintptr_t>(source)) &
       15u) == 0;
  const std::size_t vectors = aligned ? bytes / 16 : 0;
  const std::size_t work = (vectors > 0 ? vectors : bytes);
  const std::size_t wanted = (work + kCopyThreads * kCopyUnroll - 1) / (kCopyThreads * kCopyUnroll);
  // Four blocks of 512 threads fill an SM (2048 threads on Volta and newer).
  const std::size_t most = static_cast<std::size_t>(sm_count > 0 ? sm_count : 1) * 4;
  const unsigned blocks = static_cast<unsigned>(wanted < 1 ? 1 : (wanted > most ? most : wanted));
  copy_kernel<<<blocks, kCopyThreads, 0, stream>>>(static_cast<std::uint8_t*>(destination),
                                                   static_cast<const std::uint8_t*>(source), bytes,
                                                   vectors);
  check_launch();
}

void block_stream(const volatile std::int32_t* release, std::int32_t* timed_out,
                  std::uint64_t timeout_ns, cudaStream_t stream) {
  blocking_kernel<<<1, 1, 0, stream>>>(release, timed_out, timeout_ns);
  check_launch();
}

void fill(void* destination, std::size_t bytes, std::uint64_t seed, bool complement,
          cudaStream_t stream) {
  fill_kernel<<<pattern_blocks(bytes), kPatternThreads, 0, stream>>>(
      static_cast<std::uint8_t*>(destination), bytes, seed, complement ? ~0ull : 0ull);
  check_launch();
}

void compare(const void* data, std::size_t bytes, std::uint64_t seed, std::size_t pattern_offset,
             unsigned long long* counters, cudaStream_t stream) {
  const unsigned long long initial[2] = {0ull, ULLONG_MAX};
  XFS_CUDA_CALL(cudaMemcpyAsync(counters, initial, sizeof initial, cudaMemcpyHostToDevice, stream));
  compare_kernel<<<pattern_blocks(bytes), kPatternThreads, 0, stream>>>(
      static_cast<const std::uint8_t*>(data), bytes, seed, pattern_offset, counters);
  check_launch();
}

}  // namespace xferscope::kernels
