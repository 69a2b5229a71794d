// The rules of valid measurements: which combinations of direction, memory, mechanism and
// timing the engine measures, and the limits of its timing loops. The one place they are
// decided: the engine checks every transfer here, and the Python case table, the options and
// the simulated engine ask the same functions through the bindings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "xferscope/buffer.hpp"
#include "xferscope/transfer.hpp"

namespace xferscope {

// Why the engine cannot measure this combination, or "" when it can. `timing` absent: only the
// checks that do not depend on it (a transfer is made before it is timed). `peer_access`
// matters for p2p only. For host transfers `memory` is the host memory kind; d2d and p2p copy
// device memory.
std::string refusal(Direction direction, MemoryKind memory, Mechanism mechanism,
                    std::optional<Timing> timing, bool peer_access);

// Whether device timing holds the copies behind the blocking kernel: only asynchronous copies
// (copy engines or SMs) that the host does not drive itself. Synchronous calls, pageable memory
// and peer copies without peer access are staged by the calling thread, which then cannot
// return to release the kernel (seen on two H200s: a timeout).
bool blocks_for_device_timing(Direction direction, MemoryKind memory, Mechanism mechanism,
                              bool peer_access) noexcept;

// Limits of the timing loops, exported to Python so no one retypes them.
struct Limits {
  // Copies held behind one blocking kernel at most: a stream's queue is finite, and past it the
  // host would block while enqueuing and the kernel would wait for nothing.
  static constexpr std::int64_t most_held_copies = 128;
  // Smaller copies are latency-bound and always reuse one place (they carry the cache-resident
  // label instead): on an H200, rotated pinned H2D copies of 4-16 KiB took 0.3-1.2 us longer,
  // and from 64 KiB on rotation cost pinned copies nothing.
  static constexpr std::size_t min_rotated_bytes = 64 << 10;
  static constexpr std::size_t slot_alignment = 4096;  // rotated copies start page-aligned
  static constexpr std::size_t cache_line = 64;
  // A transfer's copies may start this many bytes past the page-aligned place at most (host and
  // device side apart): the alignment study's offsets 0..4095.
  static constexpr std::size_t most_offset = 4095;
  // The blocking kernel gives up after this long, so a host that never releases it cannot hang
  // the GPU; a trial that hits it is marked blocking_timed_out.
  static constexpr std::uint64_t blocking_timeout_ns = 5'000'000'000ull;
  // The data pattern's seed when none is given: every command and handle starts from it, so a
  // run can be repeated byte for byte.
  static constexpr std::uint64_t default_seed = 0x5EED;
};

}  // namespace xferscope
