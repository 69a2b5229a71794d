#include "xferscope/cases.hpp"

namespace xferscope {

namespace {

bool host_side(Direction direction) {
  return direction != Direction::d2d && direction != Direction::p2p;
}

}  // namespace

std::string refusal(Direction direction, MemoryKind memory, Mechanism mechanism,
                    std::optional<Timing> timing, bool peer_access) {
  const bool host = host_side(direction);
  if (host && memory == MemoryKind::device) {
    return "device memory is for d2d and p2p copies; host transfers take " +
           memory_kinds([](MemoryKind kind) noexcept { return kind != MemoryKind::device; });
  }
  if (!host && memory != MemoryKind::device) {
    return "d2d and p2p copies move device memory, not " + std::string(to_string(memory));
  }
  if (mechanism == Mechanism::kernel && !gpu_addressable(memory)) {
    return "the GPU cannot address " + std::string(to_string(memory)) +
           " memory, so there is no SM copy of it";
  }
  if (memory == MemoryKind::readonly && direction != Direction::h2d) {
    return "memory registered read-only is only read by the GPU: h2d copies only";
  }
  if (mechanism == Mechanism::staged && (!host || memory != MemoryKind::pageable)) {
    return "the staged copy moves pageable memory between the host and a GPU";
  }
  if (direction == Direction::p2p && mechanism != Mechanism::async &&
      mechanism != Mechanism::kernel) {
    return "peer copies use the async or kernel mechanism";
  }
  if (direction == Direction::p2p && mechanism == Mechanism::kernel && !peer_access) {
    return "an SM copy to another GPU needs peer access";
  }
  if (timing == Timing::device && mechanism == Mechanism::staged) {
    return "staged copies are driven by host threads, so they have API time only";
  }
  return "";
}

bool blocks_for_device_timing(Direction direction, MemoryKind memory, Mechanism mechanism,
                              bool peer_access) noexcept {
  // managed memory: the driver may move its pages while a copy waits, so none is held either
  const bool pageable =
      host_side(direction) && (staged_by_driver(memory) || memory == MemoryKind::managed);
  const bool through_host = direction == Direction::p2p && !peer_access;
  return (mechanism == Mechanism::async || mechanism == Mechanism::driver_async ||
          mechanism == Mechanism::kernel) &&
         !pageable && !through_host;
}

}  // namespace xferscope
