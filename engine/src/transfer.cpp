#include "xferscope/transfer.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <utility>

#include "kernels.hpp"
#include "xferscope/cases.hpp"
#include "xferscope/cpu_work.hpp"
#include "xferscope/detail/driver.hpp"
#include "xferscope/device.hpp"
#include "xferscope/error.hpp"
#include "xferscope/numa.hpp"
#include "xferscope/pattern.hpp"

namespace xferscope {

namespace {

constexpr cudaStream_t kLegacyStream = nullptr;

std::size_t round_up(std::size_t value, std::size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

template <typename Enum, std::size_t N>
Enum from_string(std::string_view name, const Enum (&values)[N], const char* what) {
  std::string accepted;
  for (Enum value : values) {
    if (to_string(value) == name) return value;
    accepted += (accepted.empty() ? "" : ", ") + std::string(to_string(value));
  }
  throw UsageError("unknown " + std::string(what) + " '" + std::string(name) +
                   "' (accepted: " + accepted + ")");
}

volatile std::int32_t* control_word(const Buffer& control, int index) {
  return static_cast<volatile std::int32_t*>(control.host()) + index;
}

}  // namespace

std::string_view to_string(Direction direction) {
  switch (direction) {
    case Direction::h2d: return "h2d";
    case Direction::d2h: return "d2h";
    case Direction::d2d: return "d2d";
    case Direction::round_trip: return "roundtrip";
    case Direction::p2p: return "p2p";
  }
  return "unknown";
}

std::string_view to_string(Mechanism mechanism) {
  switch (mechanism) {
    case Mechanism::memcpy: return "memcpy";
    case Mechanism::async: return "async";
    case Mechanism::kernel: return "kernel";
    case Mechanism::staged: return "staged";
    case Mechanism::driver: return "driver";
    case Mechanism::driver_async: return "driver-async";
  }
  return "unknown";
}

std::string_view to_string(Timing timing) { return timing == Timing::api ? "api" : "device"; }

Direction direction_from_string(std::string_view name) {
  return from_string(name, kAllDirections, "direction");
}

Mechanism mechanism_from_string(std::string_view name) {
  return from_string(name, kAllMechanisms, "mechanism");
}

Timing timing_from_string(std::string_view name) {
  return from_string(name, kAllTimings, "timing");
}

Transfer::Transfer(const TransferSpec& spec) : spec_(spec) {
  if (spec.capacity == 0) throw UsageError("a transfer needs a capacity of at least one byte");
  const bool peer_to_peer = spec.direction == Direction::p2p;
  const bool host_side = spec.direction != Direction::d2d && !peer_to_peer;
  const std::string refused =
      refusal(spec.direction, spec.host_memory, spec.mechanism, std::nullopt, spec.peer_access);
  if (!refused.empty()) throw UsageError(refused);
  if (peer_to_peer) {
    int count = 0;
    XFS_CUDA_CALL(cudaGetDeviceCount(&count));
    if (spec.peer < 0 || spec.peer >= count || spec.peer == spec.device) {
      throw UsageError("a p2p transfer needs a peer GPU other than its own, from 0 to " +
                       std::to_string(count - 1));
    }
    set_peer_access();
  }
  XFS_CUDA_CALL(cudaSetDevice(spec.device));
  XFS_CUDA_CALL(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, spec.device));

  if (spec.host_offset > Limits::most_offset || spec.device_offset > Limits::most_offset) {
    throw UsageError("a copy's offset is 0.." + std::to_string(Limits::most_offset) + " bytes");
  }
  // Room for the offset past the last place a copy can start.
  const std::size_t size =
      std::max(spec.capacity, spec.rotation_bytes) + std::max(spec.host_offset, spec.device_offset);
  const MemoryKind host = host_side ? spec.host_memory : MemoryKind::device;
  auto add = [&](MemoryKind kind, int device) -> Buffer* {
    buffers_.push_back(Buffer::allocate(kind, size, device));
    return &buffers_.back();
  };
  const int gpu = spec.device;
  buffers_.reserve(3);  // legs_ keep pointers into buffers_
  switch (spec.direction) {
    case Direction::h2d:
      legs_.push_back({add(host, gpu), add(MemoryKind::device, gpu), cudaMemcpyHostToDevice});
      break;
    case Direction::d2h: {
      Buffer* device = add(MemoryKind::device, gpu);
      legs_.push_back({device, add(host, gpu), cudaMemcpyDeviceToHost});
      break;
    }
    case Direction::d2d: {
      Buffer* source = add(MemoryKind::device, gpu);
      legs_.push_back({source, add(MemoryKind::device, gpu), cudaMemcpyDeviceToDevice});
      break;
    }
    case Direction::round_trip: {
      Buffer* source = add(host, gpu);
      Buffer* middle = add(MemoryKind::device, gpu);
      legs_.push_back({source, middle, cudaMemcpyHostToDevice});
      legs_.push_back({middle, add(host, gpu), cudaMemcpyDeviceToHost});
      break;
    }
    case Direction::p2p: {
      Buffer* source = add(MemoryKind::device, gpu);
      legs_.push_back({source, add(MemoryKind::device, spec.peer), cudaMemcpyDeviceToDevice});
      break;
    }
  }
  if (spec.mechanism == Mechanism::kernel) {
    for (const Buffer& b : buffers_) b.gpu_address(gpu);  // an SM copy reads every buffer
  }
  control_ = Buffer::allocate(MemoryKind::mapped, 2 * sizeof(std::int32_t), gpu);
  XFS_CUDA_CALL(cudaSetDevice(gpu));  // allocation on a peer leaves that GPU current
  // Synchronous copies run on the legacy default stream, and so does all the engine's own work
  // for them (fill, poison, compare): once a kernel has run on another stream, every synchronous
  // cudaMemcpy on the legacy stream costs about 1.1 us more (5.5 -> 6.6 us for 4 bytes on an
  // H200, driver 580), a cost of the engine's setup and not of the copy.
  if (spec.mechanism != Mechanism::memcpy && spec.mechanism != Mechanism::driver) {
    stream_ = detail::Stream::create();
  }
  if (spec.mechanism == Mechanism::driver || spec.mechanism == Mechanism::driver_async) {
    detail::driver_copies();  // a driver without the entry points fails here, not mid-sweep
  }
  start_ = detail::Event::create();
  stop_ = detail::Event::create();
  if (spec.mechanism == Mechanism::staged) {
    staged_ = std::make_unique<StagedCopier>(gpu, spec.staged_threads, spec.staged_chunk_bytes, 0.0,
                                             spec.staged_direct_below);
    XFS_CUDA_CALL(cudaSetDevice(gpu));
  }
  fill(Limits::default_seed);
}

// The members free the staged copier, the events, the stream and the buffers, in that order.
Transfer::~Transfer() {
  cudaSetDevice(spec_.device);
  cudaStreamSynchronize(kLegacyStream);
}

// Peer access is a setting of the two GPUs' contexts, not of this transfer: it is set both ways
// as asked and stays so until another transfer sets it again.
void Transfer::set_peer_access() {
  for (const auto& [from, to] :
       {std::pair{spec_.device, spec_.peer}, std::pair{spec_.peer, spec_.device}}) {
    if (spec_.peer_access) {
      enable_peer_access(from, to);
    } else {
      XFS_CUDA_CALL(cudaSetDevice(from));
      const cudaError_t status = cudaDeviceDisablePeerAccess(to);
      if (status == cudaErrorPeerAccessNotEnabled) {
        cudaGetLastError();
      } else {
        XFS_CUDA_CALL(status);
      }
    }
  }
  XFS_CUDA_CALL(cudaSetDevice(spec_.device));
}

bool Transfer::blocks_for_device_timing() const noexcept {
  return xferscope::blocks_for_device_timing(spec_.direction, spec_.host_memory, spec_.mechanism,
                                             spec_.peer_access);
}

cudaStream_t Transfer::work_stream(const Buffer& buffer) const {
  return buffer.device_index() == spec_.device ? stream_ : kLegacyStream;
}

void Transfer::fill(std::uint64_t seed) {
  if (filled_ && seed == seed_) return;
  seed_ = seed;
  filled_ = false;  // until every buffer is filled
  const Buffer* source = legs_.front().source;
  for (Buffer& buffer : buffers_) {
    const std::uint64_t buffer_seed = (&buffer == source) ? seed : ~seed;
    if (buffer.on_device()) {
      XFS_CUDA_CALL(cudaSetDevice(buffer.device_index()));
      kernels::fill(buffer.device(), buffer.size(), buffer_seed, false, work_stream(buffer));
      wait(work_stream(buffer));
    } else {
      fill_host(buffer.host(), buffer.size(), buffer_seed, false);
    }
  }
  XFS_CUDA_CALL(cudaSetDevice(spec_.device));
  filled_ = true;
}

void Transfer::check_bytes(std::size_t bytes) const {
  if (bytes == 0 || bytes > spec_.capacity) {
    throw UsageError("size " + std::to_string(bytes) + " is outside this transfer's 1.." +
                     std::to_string(spec_.capacity) + " bytes");
  }
}

std::size_t Transfer::misalignment(const Buffer& buffer) const noexcept {
  return buffer.on_device() ? spec_.device_offset : spec_.host_offset;
}

std::size_t Transfer::slots(std::size_t bytes) const {
  if (!spec_.rotate || bytes < Limits::min_rotated_bytes) return 1;
  const std::size_t size =
      legs_.front().source->size() - std::max(spec_.host_offset, spec_.device_offset);
  return (size - bytes) / round_up(bytes, Limits::slot_alignment) + 1;
}

std::size_t Transfer::next_offset(std::size_t bytes) {
  return (cursor_++ % slots(bytes)) * round_up(bytes, Limits::slot_alignment);
}

void Transfer::run_iteration(std::size_t bytes, std::size_t offset, cudaStream_t stream) {
  for (const Leg& leg : legs_) {
    const std::size_t to_offset = offset + misalignment(*leg.destination);
    const std::size_t from_offset = offset + misalignment(*leg.source);
    char* destination = static_cast<char*>(leg.destination->data()) + to_offset;
    const char* source = static_cast<const char*>(leg.source->data()) + from_offset;
    const int to = leg.destination->device_index();
    const int from = leg.source->device_index();
    if (fail_next_copy_) {
      fail_next_copy_ = false;
      XFS_CUDA_CALL(cudaMemcpyAsync(nullptr, source, bytes, leg.kind, stream));
    }
    switch (spec_.mechanism) {
      case Mechanism::memcpy:
        XFS_CUDA_CALL(cudaMemcpy(destination, source, bytes, leg.kind));
        break;
      case Mechanism::async:
        if (from != to) {
          XFS_CUDA_CALL(cudaMemcpyPeerAsync(destination, to, source, from, bytes, stream));
        } else {
          XFS_CUDA_CALL(cudaMemcpyAsync(destination, source, bytes, leg.kind, stream));
        }
        break;
      case Mechanism::kernel:
        kernels::copy(static_cast<char*>(leg.destination->device()) + to_offset,
                      static_cast<const char*>(leg.source->device()) + from_offset, bytes,
                      sm_count_, stream);
        break;
      case Mechanism::staged:
        if (leg.kind == cudaMemcpyHostToDevice) {
          staged_->to_device(destination, source, bytes);
        } else {
          staged_->to_host(destination, source, bytes);
        }
        break;
      case Mechanism::driver:
      case Mechanism::driver_async:
        driver_copy(leg.kind, destination, source, bytes, stream);
        break;
    }
  }
}

// The driver API's copy for this leg: synchronous, or on `stream` for driver-async.
void Transfer::driver_copy(cudaMemcpyKind kind, char* destination, const char* source,
                           std::size_t bytes, cudaStream_t stream) {
  const detail::DriverCopies& d = detail::driver_copies();
  const auto to = reinterpret_cast<CUdeviceptr>(destination);
  const auto from = reinterpret_cast<CUdeviceptr>(source);
  const auto s = reinterpret_cast<CUstream>(stream);
  if (spec_.mechanism == Mechanism::driver) {
    if (kind == cudaMemcpyHostToDevice) XFS_DRIVER_CALL(d.htod(to, source, bytes));
    if (kind == cudaMemcpyDeviceToHost) XFS_DRIVER_CALL(d.dtoh(destination, from, bytes));
    if (kind == cudaMemcpyDeviceToDevice) XFS_DRIVER_CALL(d.dtod(to, from, bytes));
  } else {
    if (kind == cudaMemcpyHostToDevice) XFS_DRIVER_CALL(d.htod_async(to, source, bytes, s));
    if (kind == cudaMemcpyDeviceToHost) XFS_DRIVER_CALL(d.dtoh_async(destination, from, bytes, s));
    if (kind == cudaMemcpyDeviceToDevice) XFS_DRIVER_CALL(d.dtod_async(to, from, bytes, s));
  }
}

void Transfer::wait(cudaStream_t stream) { XFS_CUDA_CALL(cudaStreamSynchronize(stream)); }

TrialTiming Transfer::time(Timing timing, std::size_t bytes, std::int64_t iterations) {
  check_bytes(bytes);
  if (iterations < 1) throw UsageError("a trial needs at least one iteration");
  const std::string refused =
      refusal(spec_.direction, spec_.host_memory, spec_.mechanism, timing, spec_.peer_access);
  if (!refused.empty()) throw UsageError(refused);
  XFS_CUDA_CALL(cudaSetDevice(spec_.device));
  TrialTiming result =
      timing == Timing::api ? time_api(bytes, iterations) : time_device(bytes, iterations);
  result.iterations = iterations;
  result.copies_per_iteration = copies_per_iteration();
  result.footprint_bytes =
      std::min<std::size_t>(slots(bytes), static_cast<std::size_t>(iterations)) *
      round_up(bytes, Limits::cache_line);
  return result;
}

// NetPIPE's method: a host steady clock around N calls, each of which completes before the
// next starts (cudaMemcpy does; the async and kernel mechanisms synchronise their stream).
TrialTiming Transfer::time_api(std::size_t bytes, std::int64_t iterations) {
  const bool synchronous = spec_.mechanism == Mechanism::memcpy ||
                           spec_.mechanism == Mechanism::staged ||
                           spec_.mechanism == Mechanism::driver;
  const auto begin = std::chrono::steady_clock::now();
  for (std::int64_t i = 0; i < iterations; ++i) {
    run_iteration(bytes, next_offset(bytes), stream_);
    if (!synchronous) wait(stream_);
  }
  // cudaMemcpy may return before a device-to-device copy or a small pageable upload is done.
  if (synchronous) wait(stream_);
  const auto end = std::chrono::steady_clock::now();
  TrialTiming result;
  result.seconds = std::chrono::duration<double>(end - begin).count();
  return result;
}

// CUDA events around the copies. Where the copies are asynchronous to the host they are queued
// behind the blocking kernel in batches, so the events see back-to-back device work only.
TrialTiming Transfer::time_device(std::size_t bytes, std::int64_t iterations) {
  TrialTiming result;
  result.blocking_kernel = blocks_for_device_timing();
  if (!result.blocking_kernel) {
    XFS_CUDA_CALL(cudaEventRecord(start_, stream_));
    for (std::int64_t i = 0; i < iterations; ++i) {
      run_iteration(bytes, next_offset(bytes), stream_);
    }
    XFS_CUDA_CALL(cudaEventRecord(stop_, stream_));
    XFS_CUDA_CALL(cudaEventSynchronize(stop_));
    float ms = 0;
    XFS_CUDA_CALL(cudaEventElapsedTime(&ms, start_, stop_));
    result.seconds = static_cast<double>(ms) * 1e-3;
    return result;
  }
  const std::int64_t per_batch =
      std::max<std::int64_t>(1, Limits::most_held_copies / copies_per_iteration());
  for (std::int64_t done = 0; done < iterations;) {
    const std::int64_t batch = std::min(per_batch, iterations - done);
    queue_held(bytes, batch);
    release_held();
    bool timed_out = false;
    result.seconds += held_seconds(timed_out);
    result.blocking_timed_out = result.blocking_timed_out || timed_out;
    done += batch;
  }
  return result;
}

OverlapSample Transfer::overlap_cpu(std::size_t bytes, double work_s) {
  check_bytes(bytes);
  XFS_CUDA_CALL(cudaSetDevice(spec_.device));
  const std::uint64_t work = cpu_work_for(work_s);
  using clock = std::chrono::steady_clock;
  auto seconds = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  const auto issued = clock::now();
  run_iteration(bytes, next_offset(bytes), stream_);
  const auto working = clock::now();
  do_cpu_work(work);
  const auto waiting = clock::now();
  wait(stream_);
  const auto done = clock::now();
  OverlapSample sample;
  sample.issue_s = seconds(issued, working);
  sample.work_s = seconds(working, waiting);
  sample.wait_s = seconds(waiting, done);
  sample.total_s = seconds(issued, done);
  return sample;
}

void Transfer::queue_held(std::size_t bytes, std::int64_t iterations) {
  check_bytes(bytes);
  if (!blocks_for_device_timing()) {
    throw UsageError("only asynchronous copies of non-pageable memory can be held");
  }
  XFS_CUDA_CALL(cudaSetDevice(spec_.device));
  volatile std::int32_t* release = control_word(control_, 0);
  volatile std::int32_t* timed_out = control_word(control_, 1);
  auto* device_words = static_cast<std::int32_t*>(control_.device());
  *release = 0;
  *timed_out = 0;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  kernels::block_stream(device_words, device_words + 1, Limits::blocking_timeout_ns, stream_);
  try {
    XFS_CUDA_CALL(cudaEventRecord(start_, stream_));
    for (std::int64_t i = 0; i < iterations; ++i) {
      run_iteration(bytes, next_offset(bytes), stream_);
    }
    XFS_CUDA_CALL(cudaEventRecord(stop_, stream_));
  } catch (...) {
    release_held();                  // the kernel lets go now, not at its timeout
    cudaStreamSynchronize(stream_);  // and what was queued drains before the error goes up
    cudaGetLastError();
    throw;
  }
}

void Transfer::release_held() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  *control_word(control_, 0) = 1;
}

double Transfer::held_seconds(bool& timed_out) {
  XFS_CUDA_CALL(cudaEventSynchronize(stop_));
  float ms = 0;
  XFS_CUDA_CALL(cudaEventElapsedTime(&ms, start_, stop_));
  timed_out = *control_word(control_, 1) != 0;
  return static_cast<double>(ms) * 1e-3;
}

void Transfer::poison(Buffer& buffer, std::size_t bytes) {
  if (buffer.on_device()) {
    XFS_CUDA_CALL(cudaSetDevice(buffer.device_index()));
    kernels::fill(buffer.device(), bytes, seed_, true, work_stream(buffer));
    wait(work_stream(buffer));
    XFS_CUDA_CALL(cudaSetDevice(spec_.device));
  } else {
    fill_host(buffer.host(), bytes, seed_, true);
  }
}

// Copies here go on stream_, the stream the comparison runs on: a synchronous cudaMemcpy from
// pageable memory may return before its data lands, and would race with the comparison.
void Transfer::flip_byte(Buffer& buffer, std::size_t offset) {
  if (buffer.on_device()) {
    unsigned char value = 0;
    char* address = static_cast<char*>(buffer.device()) + offset;
    XFS_CUDA_CALL(cudaMemcpyAsync(&value, address, 1, cudaMemcpyDeviceToHost, stream_));
    wait(stream_);
    value ^= 0xffu;
    XFS_CUDA_CALL(cudaMemcpyAsync(address, &value, 1, cudaMemcpyHostToDevice, stream_));
    wait(stream_);
  } else {
    static_cast<volatile unsigned char*>(buffer.host())[offset] ^= 0xffu;
  }
}

// A device buffer verify() keeps: made on `device` at its first need (freed first when the last
// one was made on another GPU).
void Transfer::kept_on(Buffer& buffer, std::size_t bytes, int device) {
  if (buffer.data() && buffer.device_index() == device) return;
  buffer = Buffer();
  buffer = Buffer::allocate(MemoryKind::device, bytes, device);
}

Verification Transfer::verify(std::size_t bytes, bool inject_fault) {
  check_bytes(bytes);
  XFS_CUDA_CALL(cudaSetDevice(spec_.device));
  // Poisoning every destination with the pattern's complement makes any byte a leg failed to
  // write differ from what is expected.
  for (const Leg& leg : legs_) poison(*leg.destination, bytes + misalignment(*leg.destination));
  run_iteration(bytes, 0, stream_);
  wait(stream_);
  Buffer& result = *legs_.back().destination;
  const std::size_t at = misalignment(result);
  if (inject_fault) flip_byte(result, at + bytes / 2);

  // Host destinations are brought to the GPU with a plain copy and checked there: reading
  // write-combined memory from the CPU would take seconds. A peer's memory is checked on the
  // peer. A misaligned device destination is first copied to an aligned place, so the
  // comparison reads whole words.
  const int checking_device = result.on_device() ? result.device_index() : spec_.device;
  const cudaStream_t stream = checking_device == spec_.device ? stream_ : kLegacyStream;
  const void* checked = static_cast<const char*>(result.data()) + at;
  XFS_CUDA_CALL(cudaSetDevice(checking_device));
  if (!result.on_device() || at % 8 != 0) {
    // as large as the largest copy, so that one serves every size
    kept_on(verify_staging_, spec_.capacity, checking_device);
    XFS_CUDA_CALL(
        cudaMemcpyAsync(verify_staging_.device(), checked, bytes, cudaMemcpyDefault, stream));
    checked = verify_staging_.device();
  }
  kept_on(verify_counters_, 2 * sizeof(unsigned long long), checking_device);
  auto* counter_words = static_cast<unsigned long long*>(verify_counters_.device());
  // The destination holds the pattern from where the first leg read its source.
  kernels::compare(checked, bytes, seed_, misalignment(*legs_.front().source), counter_words,
                   stream);
  unsigned long long host_counters[2] = {0, 0};
  XFS_CUDA_CALL(cudaMemcpyAsync(host_counters, counter_words, sizeof host_counters,
                                cudaMemcpyDeviceToHost, stream));
  wait(stream);
  XFS_CUDA_CALL(cudaSetDevice(spec_.device));

  Verification verification;
  verification.bytes_checked = bytes;
  verification.mismatched_bytes = host_counters[0];
  verification.ok = host_counters[0] == 0;
  verification.first_mismatch = verification.ok ? -1 : static_cast<std::int64_t>(host_counters[1]);
  return verification;
}

int Transfer::host_node() const noexcept {
  for (const Buffer& b : buffers_) {
    if (!b.on_device() && b.host() != nullptr) return memory_node(b.host());
  }
  return -1;
}

std::vector<double> time_concurrently(const std::vector<Transfer*>& transfers, std::size_t bytes,
                                      std::int64_t iterations, bool& timed_out) {
  for (const Transfer* t : transfers) {
    if (!t->blocks_for_device_timing()) {
      throw UsageError(
          "concurrent streams need asynchronous copies of non-pageable memory (async or kernel "
          "mechanism)");
    }
    if (iterations < 1 || iterations * t->copies_per_iteration() > Limits::most_held_copies) {
      throw UsageError("concurrent streams take 1.." + std::to_string(Limits::most_held_copies) +
                       " copies each");
    }
  }
  std::size_t queued = 0;
  try {
    for (; queued < transfers.size(); ++queued) transfers[queued]->queue_held(bytes, iterations);
  } catch (...) {
    for (std::size_t i = 0; i < queued; ++i) transfers[i]->release_held();
    throw;
  }
  // Released back to back, so every stream starts within a few hundred nanoseconds.
  for (Transfer* t : transfers) t->release_held();
  std::vector<double> seconds;
  timed_out = false;
  for (Transfer* t : transfers) {
    bool stream_timed_out = false;
    seconds.push_back(t->held_seconds(stream_timed_out));
    timed_out = timed_out || stream_timed_out;
  }
  return seconds;
}

}  // namespace xferscope
