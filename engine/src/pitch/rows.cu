#include <cstdint>

#include "pitch/rows.hpp"
#include "xferscope/error.hpp"

namespace xferscope::pitch::kernels {

namespace {

constexpr unsigned kThreads = 256;

// Every word of every row: word w of row r is element r * words + w of the grid-stride loop.
template <typename Word>
__global__ void copy_rows_kernel(char* __restrict__ dst, std::size_t dst_pitch,
                                 const char* __restrict__ src, std::size_t src_pitch,
                                 std::size_t words, std::size_t rows) {
  const std::size_t total = words * rows;
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += stride) {
    const std::size_t r = i / words;
    const std::size_t w = i - r * words;
    reinterpret_cast<Word*>(dst + r * dst_pitch)[w] =
        reinterpret_cast<const Word*>(src + r * src_pitch)[w];
  }
}

template <typename Word>
void launch(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
            std::size_t width, std::size_t rows, int sm_count, cudaStream_t stream) {
  const std::size_t words = width / sizeof(Word);
  const std::size_t wanted = (words * rows + kThreads - 1) / kThreads;
  const std::size_t most = static_cast<std::size_t>(sm_count > 0 ? sm_count : 1) * 8;
  const unsigned blocks = static_cast<unsigned>(wanted < 1 ? 1 : (wanted > most ? most : wanted));
  copy_rows_kernel<Word><<<blocks, kThreads, 0, stream>>>(
      static_cast<char*>(dst), dst_pitch, static_cast<const char*>(src), src_pitch, words, rows);
  XFS_CUDA_CALL(cudaGetLastError());
}

}  // namespace

void copy_rows(void* destination, std::size_t destination_pitch, const void* source,
               std::size_t source_pitch, std::size_t width, std::size_t rows, int sm_count,
               cudaStream_t stream) {
  const std::uintptr_t all = reinterpret_cast<std::uintptr_t>(destination) |
                             reinterpret_cast<std::uintptr_t>(source) | destination_pitch |
                             source_pitch | width;
  if (all % 16 == 0) {
    launch<uint4>(destination, destination_pitch, source, source_pitch, width, rows, sm_count,
                  stream);
  } else if (all % 4 == 0) {
    launch<std::uint32_t>(destination, destination_pitch, source, source_pitch, width, rows,
                          sm_count, stream);
  } else {
    launch<std::uint8_t>(destination, destination_pitch, source, source_pitch, width, rows,
                         sm_count, stream);
  }
}

}  // namespace xferscope::pitch::kernels
