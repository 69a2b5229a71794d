#include "xferscope/overlap.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels.hpp"
#include "xferscope/buffer.hpp"
#include "xferscope/detail/handles.hpp"
#include "xferscope/error.hpp"
#include "xferscope/pattern.hpp"

namespace xferscope {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point begin) {
  return std::chrono::duration<double>(Clock::now() - begin).count();
}

template <typename F>
double median_of_5(F&& once) {
  std::array<double, 5> t{once(), once(), once(), once(), once()};
  std::sort(t.begin(), t.end());
  return t[2];
}

template <typename F>
double median_of_3(F&& once) {
  std::array<double, 3> t{once(), once(), once()};
  std::sort(t.begin(), t.end());
  return t[1];
}

// The CPU's part of a readback: read every word, as an application consuming the data would.
std::uint64_t checksum(const void* data, std::size_t bytes) {
  const auto* words = static_cast<const std::uint64_t*>(data);
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < bytes / 8; ++i) sum = sum * 31 + words[i];
  return sum;
}

// Streams and events on one device, destroyed on every exit path (a constructor that throws
// halfway included).
struct StreamSet {
  std::vector<detail::Event> events;
  std::vector<detail::Stream> streams;  // last, so they are drained before the events go
  StreamSet(int streams_wanted, int events_wanted, bool timing) {
    for (int i = 0; i < streams_wanted; ++i) streams.push_back(detail::Stream::create());
    for (int i = 0; i < events_wanted; ++i) {
      events.push_back(detail::Event::create(timing ? cudaEventDefault : cudaEventDisableTiming));
    }
  }
};

float elapsed(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  XFS_CUDA_CALL(cudaEventElapsedTime(&ms, a, b));
  return ms * 1e-3f;
}

}  // namespace

RotationResult rotate_buffers(int device, bool upload, int buffers, std::size_t chunk_bytes,
                              int chunks) {
  if (buffers < 1 || chunks < 1 || chunk_bytes < 8) {
    throw UsageError("rotating buffers need at least 1 buffer, 1 chunk and 8 bytes a chunk");
  }
  XFS_CUDA_CALL(cudaSetDevice(device));
  // The device side holds as many chunk slots as there are buffers, so every chunk in flight
  // has a place of its own.
  const int slots = std::max(buffers, 2);
  Buffer area = Buffer::allocate(MemoryKind::device, chunk_bytes * slots, device);
  std::vector<Buffer> host;
  for (int b = 0; b < buffers; ++b) {
    host.push_back(Buffer::allocate(MemoryKind::pinned, chunk_bytes, device));
  }
  XFS_CUDA_CALL(cudaSetDevice(device));
  StreamSet set(1, buffers, false);
  cudaStream_t stream = set.streams[0];
  auto slot = [&](int chunk) {
    return static_cast<char*>(area.device()) + (chunk % slots) * chunk_bytes;
  };

  // Each device slot holds its own pattern, and its checksum is known beforehand.
  std::vector<std::uint64_t> expected(slots);
  for (int s = 0; s < slots; ++s) {
    kernels::fill(slot(s), chunk_bytes, 100 + s, false, stream);
    fill_host(host[0].host(), chunk_bytes, 100 + s, false);
    expected[s] = checksum(host[0].host(), chunk_bytes);
  }
  XFS_CUDA_CALL(cudaStreamSynchronize(stream));

  auto copy = [&](int chunk, int b) {
    if (upload) {
      XFS_CUDA_CALL(cudaMemcpyAsync(slot(chunk), host[b].host(), chunk_bytes,
                                    cudaMemcpyHostToDevice, stream));
    } else {
      XFS_CUDA_CALL(cudaMemcpyAsync(host[b].host(), slot(chunk), chunk_bytes,
                                    cudaMemcpyDeviceToHost, stream));
    }
    XFS_CUDA_CALL(cudaEventRecord(set.events[b], stream));
  };
  auto produce = [&](int chunk, int b) {
    fill_host(host[b].host(), chunk_bytes, 100 + chunk % slots, false);
  };

  RotationResult r;
  copy(0, 0);  // warm-up
  XFS_CUDA_CALL(cudaStreamSynchronize(stream));
  const auto begin = Clock::now();
  if (upload) {
    for (int i = 0; i < chunks; ++i) {
      const int b = i % buffers;
      const auto waited = Clock::now();
      XFS_CUDA_CALL(cudaEventSynchronize(set.events[b]));
      r.wait_s += since(waited);
      produce(i, b);
      copy(i, b);
    }
    XFS_CUDA_CALL(cudaStreamSynchronize(stream));
  } else {
    for (int i = 0; i < std::min(buffers, chunks); ++i) copy(i, i);
    for (int i = 0; i < chunks; ++i) {
      const int b = i % buffers;
      const auto waited = Clock::now();
      XFS_CUDA_CALL(cudaEventSynchronize(set.events[b]));
      r.wait_s += since(waited);
      if (checksum(host[b].host(), chunk_bytes) != expected[i % slots]) ++r.mismatched_chunks;
      if (i + buffers < chunks) copy(i + buffers, b);
    }
  }
  r.total_s = since(begin);
  if (upload) {  // every slot now holds the last chunk written to it
    for (int s = 0; s < std::min(slots, chunks); ++s) {
      XFS_CUDA_CALL(cudaMemcpy(host[0].host(), slot(s), chunk_bytes, cudaMemcpyDeviceToHost));
      if (checksum(host[0].host(), chunk_bytes) != expected[s]) ++r.mismatched_chunks;
    }
  }

  // Each side alone, measured after the stream so the CPU runs at the clock the stream ran at
  // (measured first, a cold core made the CPU's share look slower than in the stream).
  r.copy_s = median_of_5([&] {
    const auto begin = Clock::now();
    copy(0, 0);
    XFS_CUDA_CALL(cudaStreamSynchronize(stream));
    return since(begin);
  });
  r.consume_s = median_of_5([&] {
    const auto begin = Clock::now();
    if (upload) {
      produce(0, 0);
    } else {
      volatile std::uint64_t keep = checksum(host[0].host(), chunk_bytes);
      (void)keep;
    }
    return since(begin);
  });

  return r;
}

GpuOverlapResult overlap_gpu(int device, std::size_t bytes, int streams, int chunks, int work) {
  if (bytes < 4 || bytes % 4 != 0) throw UsageError("the array is floats: a multiple of 4 bytes");
  if (streams < 1 || chunks < 1 || work < 0) {
    throw UsageError("overlap needs at least 1 stream, 1 chunk and no negative work");
  }
  XFS_CUDA_CALL(cudaSetDevice(device));
  int sms = 0;
  XFS_CUDA_CALL(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  Buffer input = Buffer::allocate(MemoryKind::pinned, bytes, device);
  Buffer sequential_out = Buffer::allocate(MemoryKind::pinned, bytes, device);
  Buffer pipelined_out = Buffer::allocate(MemoryKind::pinned, bytes, device);
  Buffer data = Buffer::allocate(MemoryKind::device, bytes, device);
  XFS_CUDA_CALL(cudaSetDevice(device));
  // Values in [0, 1): the kernel's FMAs keep them finite and the output deterministic.
  auto* values = static_cast<float*>(input.host());
  const std::size_t count = bytes / 4;
  for (std::size_t i = 0; i < count; ++i)
    values[i] = static_cast<float>(pattern_word(7, i) >> 40) / (1u << 24);
  std::memset(sequential_out.host(), 0, bytes);
  std::memset(pipelined_out.host(), 0xff, bytes);
  StreamSet set(streams, 4 + streams, true);
  cudaStream_t first = set.streams[0];
  auto* device_data = static_cast<float*>(data.device());

  GpuOverlapResult r;
  auto sequential = [&] {
    const auto& e = set.events;
    XFS_CUDA_CALL(cudaEventRecord(e[0], first));
    XFS_CUDA_CALL(cudaMemcpyAsync(device_data, input.host(), bytes, cudaMemcpyHostToDevice, first));
    XFS_CUDA_CALL(cudaEventRecord(e[1], first));
    kernels::compute(device_data, count, work, sms, first);
    XFS_CUDA_CALL(cudaEventRecord(e[2], first));
    XFS_CUDA_CALL(
        cudaMemcpyAsync(sequential_out.host(), device_data, bytes, cudaMemcpyDeviceToHost, first));
    XFS_CUDA_CALL(cudaEventRecord(e[3], first));
    XFS_CUDA_CALL(cudaEventSynchronize(e[3]));
    r.h2d_s = elapsed(e[0], e[1]);
    r.kernel_s = elapsed(e[1], e[2]);
    r.d2h_s = elapsed(e[2], e[3]);
    return static_cast<double>(elapsed(e[0], e[3]));
  };
  // Chunks go round-robin over the streams; each stream runs H2D, kernel, D2H of its chunks in
  // order, so one chunk's kernel overlaps the next chunk's upload and the previous one's
  // readback on other streams.
  const std::size_t per_chunk = (count + chunks - 1) / chunks;
  auto pipelined = [&] {
    cudaEvent_t start = set.events[0];
    cudaEvent_t stop = set.events[3];
    XFS_CUDA_CALL(cudaEventRecord(start, first));
    for (cudaStream_t s : set.streams) XFS_CUDA_CALL(cudaStreamWaitEvent(s, start, 0));
    for (int c = 0; c < chunks; ++c) {
      const std::size_t begin = c * per_chunk;
      if (begin >= count) break;
      const std::size_t n = std::min(per_chunk, count - begin);
      cudaStream_t s = set.streams[c % streams];
      XFS_CUDA_CALL(
          cudaMemcpyAsync(device_data + begin, values + begin, n * 4, cudaMemcpyHostToDevice, s));
      kernels::compute(device_data + begin, n, work, sms, s);
      XFS_CUDA_CALL(cudaMemcpyAsync(static_cast<float*>(pipelined_out.host()) + begin,
                                    device_data + begin, n * 4, cudaMemcpyDeviceToHost, s));
    }
    for (int k = 1; k < streams; ++k) {
      XFS_CUDA_CALL(cudaEventRecord(set.events[4 + k], set.streams[k]));
      XFS_CUDA_CALL(cudaStreamWaitEvent(first, set.events[4 + k], 0));
    }
    XFS_CUDA_CALL(cudaEventRecord(stop, first));
    XFS_CUDA_CALL(cudaEventSynchronize(stop));
    return static_cast<double>(elapsed(start, stop));
  };
  sequential();  // warm-up: module load, first-touch of the pinned pages
  pipelined();
  r.sequential_s = median_of_3(sequential);
  r.pipelined_s = median_of_3(pipelined);
  r.verified = std::memcmp(sequential_out.host(), pipelined_out.host(), bytes) == 0;
  return r;
}

}  // namespace xferscope
