#include "xferscope/staged.hpp"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define XFS_HAVE_SSE2 1
#endif

#include "xferscope/buffer.hpp"
#include "xferscope/detail/handles.hpp"
#include "xferscope/detail/pieces.hpp"
#include "xferscope/error.hpp"

namespace xferscope {

namespace {

constexpr double kGen5x16Bps = 63.0e9;
// Each chunk costs a copy call and a wait (about 10 us): at 1 MiB (19 us of DMA at 55 GB/s)
// that overhead held an H200 to 36 GB/s; at 4 MiB it reached 52 GB/s up and 50 GB/s down.
constexpr std::size_t kDefaultChunk = 4 << 20;
// Threads copying at once share memory bandwidth with each other and with the DMA, so each
// gets about half its solo rate: size for twice the target.
constexpr double kSharing = 2.0;
// Smaller copies are cut into smaller chunks so every thread gets one, but not below this: each
// chunk still costs a call and a wait.
constexpr std::size_t kSmallestChunk = 256 << 10;
constexpr std::size_t kChunkGrain = 64 << 10;
constexpr int kMostThreads = 16;
// Each thread's first chunk is this much smaller, so the copy engine starts after a short
// memcpy rather than a whole chunk's (an H200's 1 GiB readback went from 46 to 48 GB/s).
constexpr std::size_t kRamp = 8;
// Readbacks use three staging buffers per thread, which keeps a chunk queued on the copy engine
// while the thread empties another: on an H200, 1 GiB in 4 MiB chunks read back at 51 GB/s
// with three against 48 with two. Uploads use two: with three they ran at 46 GB/s against 50
// (a larger pool leaves less of the freshly written chunks in the host's caches for the DMA).
constexpr int kBuffersPerThread = 3;
constexpr int kUploadBuffers = 2;

// The best of three 16 MiB memcpys between two heap buffers that do not fit a core's caches.
double measure_memcpy_bps() {
  constexpr std::size_t kBytes = 16 << 20;
  std::vector<char> a(kBytes, 1), b(kBytes, 2);
  double best = 0;
  for (int i = 0; i < 3; ++i) {
    const auto begin = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), kBytes);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    best = std::max(best, static_cast<double>(kBytes) / s);
  }
  return best;
}

std::string describe(const StagedPlan& p, int cores) {
  char text[768];
  int used = std::snprintf(
      text, sizeof text,
      "%d threads: one thread alone copies %.1f GB/s here and about half that when all copy at "
      "once, so %d together feed %.0f GB/s (of %d cores); %zu KiB chunks, large enough that "
      "each chunk's call and wait cost little against its DMA; %d per thread (%.0f MiB of "
      "pinned staging), so the copy engine always has a chunk queued while a thread fills "
      "another",
      p.threads, p.single_thread_copy_bps / 1e9, p.threads, p.target_bps / 1e9, cores,
      p.chunk_bytes >> 10, p.buffers_per_thread,
      static_cast<double>(p.chunk_bytes) * p.buffers_per_thread * p.threads / (1 << 20));
  if (p.direct_below > 0 && used > 0 && used < static_cast<int>(sizeof text)) {
    std::snprintf(text + used, sizeof text - used,
                  "; copies under %zu KiB are one plain cudaMemcpy, which is faster there than "
                  "handing them to the threads",
                  p.direct_below >> 10);
  }
  return text;
}

// `n` bytes of file `fd` from byte `offset` into `into`, however many reads it takes
void read_fully(int fd, char* into, std::size_t n, std::uint64_t offset) {
  while (n > 0) {
    const ssize_t got = ::pread(fd, into, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw ReadError(errno, offset, n);
    if (got == 0) throw ReadError(0, offset, n);
    into += got;
    n -= static_cast<std::size_t>(got);
    offset += static_cast<std::uint64_t>(got);
  }
}

}  // namespace

void copy_streaming(void* destination, const void* source, std::size_t bytes) {
#if XFS_HAVE_SSE2
  auto* d = static_cast<char*>(destination);
  const auto* s = static_cast<const char*>(source);
  const std::size_t head = (16 - (reinterpret_cast<std::uintptr_t>(d) & 15)) & 15;
  if (bytes < 4096 || head >= bytes) {
    std::memcpy(d, s, bytes);
    return;
  }
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  const std::size_t blocks = bytes / 64;
  for (std::size_t i = 0; i < blocks; ++i) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s) + 0);
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s) + 1);
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s) + 2);
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s) + 3);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d) + 0, a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d) + 1, b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d) + 2, c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d) + 3, e);
    s += 64;
    d += 64;
  }
  _mm_sfence();
  std::memcpy(d, s, bytes - blocks * 64);
#else
  std::memcpy(destination, source, bytes);
#endif
}

// One worker's own stream, staging buffers and events: workers never share a CUDA object, so
// they need no locks while copying. Each is freed with the worker, whatever happens.
struct StagedCopier::Worker {
  std::vector<char*> staging;        // slices of the copier's slab
  std::vector<detail::Event> ready;  // a buffer's DMA is done
  detail::Stream stream;             // last, so it is drained before the rest is freed
};

StagedCopier::StagedCopier(int device, int threads, std::size_t chunk_bytes, double target_bps,
                           std::size_t direct_below)
    : device_(device) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  plan_.target_bps = target_bps > 0 ? target_bps : kGen5x16Bps;
  plan_.single_thread_copy_bps = measure_memcpy_bps();
  plan_.threads = threads > 0
                      ? threads
                      : std::clamp(static_cast<int>(std::ceil(kSharing * plan_.target_bps /
                                                              plan_.single_thread_copy_bps)),
                                   2, std::min(cores, kMostThreads));
  plan_.chunk_bytes = chunk_bytes > 0 ? chunk_bytes : kDefaultChunk;
  plan_.buffers_per_thread = kBuffersPerThread;
  plan_.direct_below = direct_below;
  plan_.explanation = describe(plan_, cores);

  XFS_CUDA_CALL(cudaSetDevice(device));
  const std::size_t per_thread = static_cast<std::size_t>(plan_.buffers_per_thread);
  slab_ = Buffer::allocate(MemoryKind::pinned,
                           plan_.chunk_bytes * per_thread * static_cast<std::size_t>(plan_.threads),
                           device);
  char* next = static_cast<char*>(slab_.host());
  for (int t = 0; t < plan_.threads; ++t) {
    auto worker = std::make_unique<Worker>();
    worker->stream = detail::Stream::create();
    for (std::size_t b = 0; b < per_thread; ++b) {
      worker->staging.push_back(next);
      next += plan_.chunk_bytes;
      worker->ready.push_back(detail::Event::create(cudaEventDisableTiming));
    }
    workers_.push_back(std::move(worker));
  }
  try {
    for (int t = 0; t < plan_.threads; ++t) threads_.emplace_back(&StagedCopier::work, this, t);
  } catch (...) {
    stop();  // the threads already started end before the workers they use are freed
    throw;
  }
}

void StagedCopier::stop() noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& thread : threads_) thread.join();
  threads_.clear();
}

StagedCopier::~StagedCopier() {
  stop();
  cudaSetDevice(device_);  // the workers' streams, events and buffers go with workers_
}

void StagedCopier::to_device(void* device_destination, const void* host_source, std::size_t bytes) {
  single(true, static_cast<char*>(device_destination),
         reinterpret_cast<std::uintptr_t>(host_source), bytes);
}

void StagedCopier::to_host(void* host_destination, const void* device_source, std::size_t bytes) {
  single(false, static_cast<char*>(const_cast<void*>(device_source)),
         reinterpret_cast<std::uintptr_t>(host_destination), bytes);
}

namespace {

// Whether the caller's host range is already page-locked (cudaHostAlloc or cudaHostRegister):
// then the copy engines read or write it directly, and staging it would only add a host copy.
bool already_pinned(const char* host, std::size_t bytes) {
  for (const char* p : {host, host + bytes - 1}) {
    cudaPointerAttributes a = {};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    if (a.type != cudaMemoryTypeHost) return false;
  }
  return true;
}

// The device range that pieces at `offsets` span: where the furthest one ends.
std::size_t span_of(const std::size_t* sizes, const std::size_t* offsets, std::size_t count) {
  std::size_t end = 0;
  for (std::size_t i = 0; i < count; ++i) end = std::max(end, offsets[i] + sizes[i]);
  return end;
}

}  // namespace

void StagedCopier::single(bool upload, char* device, std::uintptr_t host, std::size_t bytes) {
  if (bytes == 0) return;
  // the plain call is faster for small copies (no hand-over) and for pinned memory
  if (bytes < plan_.direct_below || already_pinned(reinterpret_cast<const char*>(host), bytes)) {
    void* h = reinterpret_cast<void*>(host);
    XFS_CUDA_CALL(upload ? cudaMemcpy(device, h, bytes, cudaMemcpyHostToDevice)
                         : cudaMemcpy(h, device, bytes, cudaMemcpyDeviceToHost));
    return;
  }
  const std::size_t start = 0;
  run({upload, device, &host, &bytes, &start, 1, bytes, 0});
}

void StagedCopier::gather_to_device(void* device_destination, const void* const* host_sources,
                                    const std::size_t* sizes, const std::size_t* offsets,
                                    std::size_t count) {
  static_assert(sizeof(std::uintptr_t) == sizeof(void*), "addresses are pointers");
  run({true, static_cast<char*>(device_destination),
       reinterpret_cast<const std::uintptr_t*>(host_sources), sizes, offsets, count,
       span_of(sizes, offsets, count), 0});
}

void StagedCopier::scatter_to_host(void* const* host_destinations, const void* device_source,
                                   const std::size_t* sizes, const std::size_t* offsets,
                                   std::size_t count) {
  run({false, static_cast<char*>(const_cast<void*>(device_source)),
       reinterpret_cast<const std::uintptr_t*>(host_destinations), sizes, offsets, count,
       span_of(sizes, offsets, count), 0});
}

void read_ranges(int fd, const std::uint64_t* file_offsets, const std::size_t* sizes,
                 std::size_t count) {
  constexpr std::size_t kScratch = 1 << 20;
  std::unique_ptr<char[]> scratch(new char[kScratch]);
  for (std::size_t i = 0; i < count; ++i) {
    for (std::size_t at = 0; at < sizes[i]; at += kScratch)
      read_fully(fd, scratch.get(), std::min(kScratch, sizes[i] - at), file_offsets[i] + at);
  }
}

void StagedCopier::read_to_device(int fd, void* device_destination,
                                  const std::uint64_t* file_offsets, const std::size_t* sizes,
                                  const std::size_t* offsets, std::size_t count, int readers) {
  static_assert(sizeof(std::uintptr_t) == sizeof(std::uint64_t), "offsets fit an address");
  Job job{true,
          static_cast<char*>(device_destination),
          reinterpret_cast<const std::uintptr_t*>(file_offsets),
          sizes,
          offsets,
          count,
          span_of(sizes, offsets, count),
          0};
  job.fd = fd;
  job.readers = readers > 0 && readers < plan_.threads ? readers : 0;
  run(job);
}

void StagedCopier::run(Job job) {
  if (job.bytes == 0) return;
  std::lock_guard<std::mutex> one_at_a_time(calls_);
  const std::size_t takers = static_cast<std::size_t>(job.readers ? job.readers : plan_.threads);
  const std::size_t share = (job.bytes + takers - 1) / takers;
  // a few readers' chunks: the slab shared out among them, kUploadBuffers each
  const std::size_t most =
      job.readers ? std::min(slab_.size() / (takers * kUploadBuffers) / kChunkGrain * kChunkGrain,
                             kFileChunkMost)
                  : plan_.chunk_bytes;
  // at least kSmallestChunk, never more than a staging buffer holds (which may be less)
  job.chunk = std::min(
      std::max((share + kChunkGrain - 1) / kChunkGrain * kChunkGrain, kSmallestChunk), most);
  std::unique_lock<std::mutex> lock(mutex_);
  job_ = job;
  finished_ = 0;
  error_ = nullptr;
  ++generation_;
  wake_.notify_all();
  done_.wait(lock, [&] { return finished_ == plan_.threads; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void StagedCopier::work(int index) {
  cudaSetDevice(device_);
  std::size_t seen = 0;
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      job = job_;
    }
    std::exception_ptr error;
    try {
      copy_chunks(*workers_[index], index, job);
    } catch (...) {
      error = std::current_exception();
      // what this thread queued before the error must not still run once the caller has the
      // error back (and may free its buffers)
      if (cudaStreamSynchronize(workers_[index]->stream) != cudaSuccess) cudaGetLastError();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (error && !error_) error_ = error;
      ++finished_;
    }
    done_.notify_all();
  }
}

// Worker `index` of T takes chunks index, index + T, index + 2T, ... and alternates between its
// staging buffers. Uploads: wait until a buffer's previous DMA is done, fill it, queue its DMA.
// Readbacks: queue the DMA of the next chunk before copying the current one out, so the copy
// engine and this thread work at the same time.
void StagedCopier::copy_chunks(Worker& worker, int index, const Job& job) {
  if (job.readers && index >= job.readers) return;  // a few readers: not this thread
  const std::size_t chunk = job.chunk;
  const std::size_t stride = static_cast<std::size_t>(job.readers ? job.readers : plan_.threads);
  // the first chunk of each thread is small, so the copy engine starts early (ramp)
  const std::size_t head = std::min(chunk, std::max<std::size_t>(chunk / kRamp, kChunkGrain));
  const std::size_t head_bytes = std::min(job.bytes, head * stride);
  const std::size_t count =
      (head_bytes + head - 1) / head + (job.bytes - head_bytes + chunk - 1) / chunk;
  auto offset = [&](std::size_t c) {
    return c < stride ? c * head : head_bytes + (c - stride) * chunk;
  };
  auto length = [&](std::size_t c) {
    return std::min(c < stride ? head : chunk, job.bytes - offset(c));
  };
  const int buffers =
      job.upload ? std::min(kUploadBuffers, plan_.buffers_per_thread) : plan_.buffers_per_thread;
  // bytes [at, at + n) of the host side, piece by piece, into staging (up) or out of it (down)
  auto host_part = [&](std::size_t at, std::size_t n, char* staging) {
    detail::for_each_part(job.starts, job.sizes, job.pieces, at, n,
                          [&](std::size_t i, std::size_t inside, std::size_t done, std::size_t m) {
                            if (job.fd >= 0) {  // a file's bytes, read where they lie
                              read_fully(job.fd, staging + done, m, job.host[i] + inside);
                              return;
                            }
                            char* host = reinterpret_cast<char*>(job.host[i]) + inside;
                            if (job.upload) {
                              // cached stores: the copy engine then reads much of the chunk
                              // from the host's caches (streaming stores here held an H200 to
                              // 41 GB/s, against 50 GB/s)
                              std::memcpy(staging + done, host, m);
                            } else {
                              copy_streaming(host, staging + done, m);
                            }
                          });
  };
  // a few readers' buffers lie in the slab one after another, `chunk` each
  auto staging_of = [&](int slot) {
    if (!job.readers) return worker.staging[static_cast<std::size_t>(slot)];
    return static_cast<char*>(slab_.host()) +
           (static_cast<std::size_t>(index * buffers + slot)) * chunk;
  };
  if (job.upload) {
    int slot = 0;
    for (std::size_t c = index; c < count; c += stride, slot = (slot + 1) % buffers) {
      XFS_CUDA_CALL(cudaEventSynchronize(worker.ready[slot]));
      char* staging = staging_of(slot);
      host_part(offset(c), length(c), staging);
      XFS_CUDA_CALL(cudaMemcpyAsync(job.device + offset(c), staging, length(c),
                                    cudaMemcpyHostToDevice, worker.stream));
      XFS_CUDA_CALL(cudaEventRecord(worker.ready[slot], worker.stream));
    }
  } else {
    auto queue = [&](std::size_t c, int slot) {
      XFS_CUDA_CALL(cudaMemcpyAsync(worker.staging[slot], job.device + offset(c), length(c),
                                    cudaMemcpyDeviceToHost, worker.stream));
      XFS_CUDA_CALL(cudaEventRecord(worker.ready[slot], worker.stream));
    };
    std::size_t c = index;
    int slot = 0;
    if (c < count) queue(c, slot);
    for (; c < count; c += stride, slot = (slot + 1) % buffers) {
      if (c + stride < count) queue(c + stride, (slot + 1) % buffers);
      XFS_CUDA_CALL(cudaEventSynchronize(worker.ready[slot]));
      host_part(offset(c), length(c), worker.staging[slot]);
    }
  }
  XFS_CUDA_CALL(cudaStreamSynchronize(worker.stream));
}

}  // namespace xferscope
