// Latency seen from the GPU: one GPU thread follows a chain of pointers through a buffer, each
// read waiting for the one before, so the time per read is what one read of that memory costs
// the GPU (nvbandwidth's host_device_latency_sm; benchmarks/pointer_chase.cu is the plain CUDA
// reference it is checked against).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "xferscope/buffer.hpp"

namespace xferscope {

inline constexpr long long kChaseLap = 4096;
inline constexpr double kChaseTrialS = 0.02;
inline constexpr long long kChaseLeastReads = 1000;
inline constexpr long long kChaseMostReads = 50'000'000;

struct ChaseResult {
  std::vector<double> ns_per_read;  // one per trial
  long long reads = 0;              // dependent reads a trial
  std::size_t slots = 0;            // places the chain visits, every `stride` bytes
  bool verified = false;            // each trial ended at the place the chain predicts
};

// Why this chase of `memory` (on another GPU when `remote`) cannot be made, or "".
std::string chase_refusal(MemoryKind memory, bool remote, std::size_t bytes, std::size_t stride,
                          long long reads, int trials);

// The chain visits every `stride`-th place of `bytes` of `memory` (a host kind the GPU can
// address, or device memory; on GPU `peer`'s memory when peer >= 0, read by `device` with peer
// access on) in a random order drawn from `seed`, so neither caches nor prefetchers learn it
// once the buffer is larger than the caches. One untimed lap (at most `reads` reads), then
// `trials` chases of `reads` reads, each timed by CUDA events. With `reads` 0, the lap of
// kChaseLap reads is timed and `reads` chosen so that a trial takes about kChaseTrialS
// (kChaseLeastReads..kChaseMostReads).
ChaseResult chase(int device, MemoryKind memory, std::size_t bytes, std::size_t stride,
                  long long reads, int trials, int peer, std::uint64_t seed);

}  // namespace xferscope
