// Asynchrony beyond one copy: a stream of copies through N rotating pinned buffers while the
// CPU produces or consumes them (seed 000's pixel buffer objects in rotation), and H2D, kernel
// and D2H pipelined over K streams.
#pragma once

#include <cstddef>

namespace xferscope {

struct RotationResult {
  double total_s = 0;         // the whole stream of chunks
  double copy_s = 0;          // one chunk's copy alone (median of 3)
  double consume_s = 0;       // the CPU's work on one chunk alone (median of 3)
  double wait_s = 0;          // time the CPU spent waiting for copies
  int mismatched_chunks = 0;  // chunks whose data did not arrive intact
};

// Readback (upload = false): chunks of device memory copied into `buffers` pinned buffers in
// rotation while the CPU checksums the ones that arrived. Upload: the CPU writes each chunk
// into the next free buffer while earlier buffers are copied to the GPU.
RotationResult rotate_buffers(int device, bool upload, int buffers, std::size_t chunk_bytes,
                              int chunks);

struct GpuOverlapResult {
  double h2d_s = 0;  // the stages of the sequential run
  double kernel_s = 0;
  double d2h_s = 0;
  double sequential_s = 0;  // one stream, whole array: H2D, then the kernel, then D2H
  double pipelined_s = 0;   // the array in `chunks` pieces over `streams` streams
  bool verified = false;    // both produced the same bytes
};

// `bytes` of floats (a multiple of 4) through H2D, a kernel of `work` FMAs per element and D2H.
GpuOverlapResult overlap_gpu(int device, std::size_t bytes, int streams, int chunks, int work);

}  // namespace xferscope
