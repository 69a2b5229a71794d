// Launchers for the engine's device code (kernels.cu). Internal to the engine.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace xferscope::kernels {

// Copies `bytes` from `source` to `destination` with the SMs; either side may be device memory
// or host memory mapped into the device's address space. 16-byte vectors when both are aligned.
void copy(void* destination, const void* source, std::size_t bytes, int sm_count,
          cudaStream_t stream);

// Spins until *release becomes non-zero or `timeout_ns` passes (then sets *timed_out).
void block_stream(const volatile std::int32_t* release, std::int32_t* timed_out,
                  std::uint64_t timeout_ns, cudaStream_t stream);

// Writes the pattern (or its complement) into device-addressable memory.
void fill(void* destination, std::size_t bytes, std::uint64_t seed, bool complement,
          cudaStream_t stream);

// Counts the bytes of `data` that differ from the pattern's bytes from `pattern_offset` on, and
// the offset of the first one. `data` is 8-byte aligned. `counters` is device memory for two
// values: [mismatched bytes, first mismatch offset]; it is initialised here.
void compare(const void* data, std::size_t bytes, std::uint64_t seed, std::size_t pattern_offset,
             unsigned long long* counters, cudaStream_t stream);

// data[i] = f(data[i]) where f is `work` dependent fused multiply-adds: a kernel whose cost per
// byte is a knob, for transfer-bound and compute-bound pipelines alike.
void compute(float* data, std::size_t count, int work, int sm_count, cudaStream_t stream);

}  // namespace xferscope::kernels
