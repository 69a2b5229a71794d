// The 2D study's strided copy kernel (rows.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace xferscope::pitch::kernels {

// `rows` rows of `width` bytes from `source` (rows `source_pitch` apart) to `destination` (rows
// `destination_pitch` apart), both device memory, in 16-, 4- or 1-byte words as alignment
// allows.
void copy_rows(void* destination, std::size_t destination_pitch, const void* source,
               std::size_t source_pitch, std::size_t width, std::size_t rows, int sm_count,
               cudaStream_t stream);

}  // namespace xferscope::pitch::kernels
