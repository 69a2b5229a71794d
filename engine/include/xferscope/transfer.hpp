// One measured configuration: a direction, a host memory kind and a copy mechanism on one GPU
// (or between two), with the buffers it needs, its two timing loops and its verification.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "xferscope/buffer.hpp"
#include "xferscope/detail/handles.hpp"
#include "xferscope/staged.hpp"

namespace xferscope {

enum class Direction {
  h2d,         // host to device
  d2h,         // device to host
  d2d,         // device to device, one GPU
  round_trip,  // host to device, then back into a second host buffer (NetPIPE's ping-pong)
  p2p,         // device memory of one GPU to device memory of another
};

enum class Mechanism {
  memcpy,  // synchronous cudaMemcpy on the legacy default stream
  async,   // cudaMemcpyAsync on a stream: the copy engines
  kernel,  // a copy kernel run by the SMs (of the source GPU, writing to the peer for p2p)
  staged,  // pageable memory through xferscope's pinned staging pool and host threads
  driver,  // the driver API's synchronous cuMemcpyHtoD / DtoH / DtoD (NetPIPE's cuMemcpy module)
  driver_async,  // cuMemcpyHtoDAsync / DtoHAsync / DtoDAsync on a stream
};

enum class Timing {
  api,     // host steady clock around N calls that complete: what an application sees
  device,  // CUDA events around N copies, held behind the blocking kernel where possible
};

// Every value of each, in the order the tool lists them.
inline constexpr Direction kAllDirections[] = {Direction::h2d, Direction::d2h, Direction::d2d,
                                               Direction::round_trip, Direction::p2p};
inline constexpr Mechanism kAllMechanisms[] = {Mechanism::memcpy, Mechanism::async,
                                               Mechanism::kernel, Mechanism::staged,
                                               Mechanism::driver, Mechanism::driver_async};
inline constexpr Timing kAllTimings[] = {Timing::api, Timing::device};

std::string_view to_string(Direction direction);
std::string_view to_string(Mechanism mechanism);
std::string_view to_string(Timing timing);
Direction direction_from_string(std::string_view name);
Mechanism mechanism_from_string(std::string_view name);
Timing timing_from_string(std::string_view name);

struct TransferSpec {
  int device = 0;
  Direction direction = Direction::h2d;
  MemoryKind host_memory = MemoryKind::pinned;  // device for d2d and p2p
  Mechanism mechanism = Mechanism::memcpy;
  std::size_t capacity = 0;  // the largest size that will be copied
  // Buffers are at least this large, and successive copies move through them, so that small
  // copies do not keep hitting data the GPU L2 or the CPU caches still hold.
  std::size_t rotation_bytes = 0;
  // false: every copy reuses the same place, so its data may sit in the caches (warm).
  bool rotate = true;
  int peer = -1;            // p2p: the destination GPU
  bool peer_access = true;  // p2p: enable direct peer access (false: disable it, both ways)
  int staged_threads = 0;   // staged: host threads (0: chosen)
  std::size_t staged_chunk_bytes = 0;  // staged: chunk size (0: chosen)
  // staged: copies under this many bytes are one plain cudaMemcpy (0: every copy staged)
  std::size_t staged_direct_below = StagedCopier::kDirectBelow;
  // Every copy starts this many bytes past its page-aligned place in host memory and in device
  // memory (0..Limits::most_offset): the cost of misaligned buffers.
  std::size_t host_offset = 0;
  std::size_t device_offset = 0;
};

struct TrialTiming {
  double seconds = 0;  // all iterations together
  std::int64_t iterations = 0;
  int copies_per_iteration = 1;
  bool blocking_kernel = false;     // copies were held behind the blocking kernel
  bool blocking_timed_out = false;  // the blocking kernel gave up waiting: the figure is suspect
  std::size_t footprint_bytes = 0;  // distinct bytes the copies touched in one buffer
};

// One asynchronous copy with CPU work between issuing it and waiting for it (seed 000's
// asynchronous readback, Table 1).
struct OverlapSample {
  double issue_s = 0;  // blocked in the call that issues the copy
  double work_s = 0;   // the CPU work done meanwhile
  double wait_s = 0;   // blocked waiting for the copy after the work
  double total_s = 0;
};

struct Verification {
  bool ok = false;
  std::size_t bytes_checked = 0;
  std::uint64_t mismatched_bytes = 0;
  std::int64_t first_mismatch = -1;  // byte offset, -1 when none
};

class Transfer {
 public:
  // Refuses (UsageError) what cases.hpp's refusal() refuses, before allocating anything.
  explicit Transfer(const TransferSpec& spec);
  ~Transfer();
  Transfer(const Transfer&) = delete;
  Transfer& operator=(const Transfer&) = delete;

  const TransferSpec& spec() const noexcept { return spec_; }
  int copies_per_iteration() const noexcept { return static_cast<int>(legs_.size()); }
  // Whether device timing can hold the copies behind the blocking kernel (cases.hpp).
  bool blocks_for_device_timing() const noexcept;

  // Fills the sources with the pattern of `seed` and the other buffers with another pattern.
  // Nothing to do when the sources already hold it: copies never write a source, and every
  // verification poisons its destination first (opening fills with the default seed, and a
  // sweep then asks for its own: 1 GiB of host memory filled once, not twice).
  void fill(std::uint64_t seed);
  // Runs `iterations` iterations of `bytes` and returns their total time.
  TrialTiming time(Timing timing, std::size_t bytes, std::int64_t iterations);
  // Poisons the destination, copies `bytes` once with the configured mechanism and compares
  // the destination with the pattern on the GPU. `inject_fault` flips one destination byte
  // before the comparison, to prove that a corrupted copy is caught.
  Verification verify(std::size_t bytes, bool inject_fault = false);

  // Issues one iteration of `bytes` without waiting, does `work_s` seconds of calibrated CPU
  // work, then waits for the copy.
  OverlapSample overlap_cpu(std::size_t bytes, double work_s);
  // The staged copier of a staged transfer, nullptr otherwise.
  const StagedCopier* staged() const noexcept { return staged_.get(); }
  // The NUMA node the host buffer's first page is on (numa.hpp), -1 when the kernel does not
  // say or the transfer moves device memory only.
  int host_node() const noexcept;

  // The three steps of a held, event-timed batch, public so several transfers can run at once
  // (time_concurrently): queue `iterations` behind a blocking kernel, let them go, and wait for
  // their device time in seconds. If queueing fails, the kernel is let go and the stream
  // drained before the error goes up, so it never spins on to its timeout.
  void queue_held(std::size_t bytes, std::int64_t iterations);
  void release_held();
  double held_seconds(bool& timed_out);

  // For tests of the error paths: the next copy this transfer issues fails with a real CUDA
  // error (cudaMemcpyAsync with a null destination: cudaErrorInvalidValue).
  void inject_copy_failure() noexcept { fail_next_copy_ = true; }

 private:
  struct Leg {
    Buffer* source;
    Buffer* destination;
    // Stated rather than cudaMemcpyDefault, which makes the driver look both pointers up on
    // every call: about a microsecond that a real application does not pay.
    cudaMemcpyKind kind;
  };

  void check_bytes(std::size_t bytes) const;
  std::size_t slots(std::size_t bytes) const;  // places a copy of `bytes` rotates through
  // How far past its place a copy in `buffer` starts: the host or the device offset.
  std::size_t misalignment(const Buffer& buffer) const noexcept;
  std::size_t next_offset(std::size_t bytes);
  void run_iteration(std::size_t bytes, std::size_t offset, cudaStream_t stream);
  void wait(cudaStream_t stream);
  void driver_copy(cudaMemcpyKind kind, char* destination, const char* source, std::size_t bytes,
                   cudaStream_t stream);
  TrialTiming time_api(std::size_t bytes, std::int64_t iterations);
  TrialTiming time_device(std::size_t bytes, std::int64_t iterations);
  // The stream the engine's own work on `buffer` runs on: this transfer's stream on its GPU,
  // the legacy stream of the peer GPU for a p2p destination.
  cudaStream_t work_stream(const Buffer& buffer) const;
  void set_peer_access();
  void poison(Buffer& buffer, std::size_t bytes);
  void flip_byte(Buffer& buffer, std::size_t offset);

  TransferSpec spec_;
  int sm_count_ = 0;
  std::uint64_t seed_ = 0;
  bool filled_ = false;       // the sources hold the pattern of seed_
  std::uint64_t cursor_ = 0;  // rotation position, kept across trials
  std::vector<Buffer> buffers_;
  std::vector<Leg> legs_;
  Buffer control_;  // mapped host words: [release, timed_out] for the blocking kernel
  // verify()'s device buffers, made at its first need and kept: allocating and freeing them at
  // every size took 0.3 s of an H100 `run --quick`'s curves
  static void kept_on(Buffer& buffer, std::size_t bytes, int device);
  Buffer verify_counters_;  // [mismatches, first mismatch]
  Buffer verify_staging_;   // a host or misaligned destination, copied here to be checked
  detail::Stream stream_;   // the legacy default stream for the memcpy mechanism
  detail::Event start_;
  detail::Event stop_;
  std::unique_ptr<StagedCopier> staged_;
  bool fail_next_copy_ = false;
};

// Runs `iterations` iterations of `bytes` on every transfer at once: each queues its copies
// behind its own blocking kernel, all are released together, and each stream's device time is
// returned in order. Every transfer must block for device timing, and `iterations` times its
// copies per iteration must fit under Limits::most_held_copies.
std::vector<double> time_concurrently(const std::vector<Transfer*>& transfers, std::size_t bytes,
                                      std::int64_t iterations, bool& timed_out);

}  // namespace xferscope
