// A pageable copy that beats the driver's: host threads copy chunks between pageable memory and
// a small pool of pinned buffers while the copy engines move the previous chunks, so host memcpy
// and DMA overlap and several cores share the memcpy.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "xferscope/buffer.hpp"

namespace xferscope {

struct StagedPlan {
  int threads = 0;
  std::size_t chunk_bytes = 0;
  int buffers_per_thread = 3;
  // Copies smaller than this are one plain cudaMemcpy on the calling thread: below it, handing
  // the copy to the threads costs more than they save (on an H200 the staged copy took 36 us
  // for 1 byte against cudaMemcpy's 5 us, and first won at 1-4 MiB).
  std::size_t direct_below = 0;
  double single_thread_copy_bps = 0;  // measured host memcpy rate of one thread
  double target_bps = 0;              // the rate the threads are sized to feed
  std::string explanation;            // why these numbers, in a sentence a person can read
};

// Reads `count` ranges of the open file `fd` (sizes[i] bytes at file_offsets[i]) and keeps
// nothing: the reads and errors of StagedCopier::read_to_device, for the simulated engine.
void read_ranges(int fd, const std::uint64_t* file_offsets, const std::size_t* sizes,
                 std::size_t count);

class StagedCopier {
 public:
  // The default direct_below. `xferscope batch --calibrate` on an H200 measured the staged copy
  // ahead from 1 MiB (up: 8.6 GB/s against one cudaMemcpy's 7.0; down: 11.1 against 10.3) and
  // behind at 512 KiB (6.3 against 6.6 up); the 2 MiB used before lost 1.6x at 2 MiB up.
  static constexpr std::size_t kDirectBelow = 1 << 20;

  // threads or chunk_bytes 0: chosen from a short measurement of this host's memcpy rate so
  // the threads together feed `target_bps` (0: a PCIe Gen5 x16 link's 63 GB/s). Copies below
  // `direct_below` bytes are plain cudaMemcpy calls (0: every copy of pageable memory is
  // staged).
  StagedCopier(int device, int threads = 0, std::size_t chunk_bytes = 0, double target_bps = 0,
               std::size_t direct_below = kDirectBelow);
  ~StagedCopier();
  StagedCopier(const StagedCopier&) = delete;
  StagedCopier& operator=(const StagedCopier&) = delete;

  const StagedPlan& plan() const noexcept { return plan_; }
  // Both return once every byte has arrived. Any alignment, any size; safe to call from
  // several threads (the copies then run one after another). A copy smaller than threads x
  // chunk_bytes is cut into smaller chunks, down to 256 KiB, so every thread takes part; one
  // smaller than plan().direct_below, or whose host side is already pinned (cudaHostAlloc,
  // cudaHostRegister), is a plain cudaMemcpy on the calling thread. A worker's error is thrown
  // here with its type (CudaError, AllocationError, ...).
  void to_device(void* device_destination, const void* host_source, std::size_t bytes);
  void to_host(void* host_destination, const void* device_source, std::size_t bytes);
  // Many host pieces at once (copy_many's staged method): `count` pieces of sizes[i] bytes at
  // host[i], piece i at offsets[i] of a device range (rising, not overlapping; gaps between
  // pieces are padding, moved but not read), gathered into it or scattered from it. The threads
  // fill (or empty) each chunk of staging from whichever pieces it spans, so a batch of small
  // pieces moves in as few large DMAs as one large copy. Always staged, whatever the total or
  // the host memory's kind.
  void gather_to_device(void* device_destination, const void* const* host_sources,
                        const std::size_t* sizes, const std::size_t* offsets, std::size_t count);
  void scatter_to_host(void* const* host_destinations, const void* device_source,
                       const std::size_t* sizes, const std::size_t* offsets, std::size_t count);
  // Ranges of an open file to the GPU (a checkpoint's tensors): range i, sizes[i] bytes at
  // file_offsets[i] of `fd`, to offsets[i] of a device range (rising, not overlapping), read
  // by the threads with pread straight into the pinned chunks while the copy engine moves the
  // chunks before. No page of the file is mapped, so none faults inside a DMA. A failed read,
  // or a file that ends early, is a ReadError. `readers` (0: every thread): that many threads
  // read, each in chunks as large as the pinned chunks of all the threads allow (up to
  // kFileChunkMost), for a file mostly not in the page cache: a disk serves a few large
  // requests in order faster than many small ones.
  void read_to_device(int fd, void* device_destination, const std::uint64_t* file_offsets,
                      const std::size_t* sizes, const std::size_t* offsets, std::size_t count,
                      int readers = 0);
  static constexpr std::size_t kFileChunkMost = 64 << 20;

 private:
  struct Worker;
  struct Job {
    bool upload = true;
    char* device = nullptr;  // the contiguous device range
    // the host side: `pieces` ranges, piece i at host[i] with sizes[i] bytes, at offset
    // starts[i] of the device range (one piece for to_device and to_host)
    const std::uintptr_t* host = nullptr;
    const std::size_t* sizes = nullptr;
    const std::size_t* starts = nullptr;
    std::size_t pieces = 0;
    std::size_t bytes = 0;  // the device range's length: the last piece's end
    std::size_t chunk = 0;  // this copy's chunk size, at most plan_.chunk_bytes
    int fd = -1;            // an open file whose offsets `host` holds (uploads); -1: memory
    int readers = 0;        // threads taking part (0: all), each chunk in the slab (a file's)
  };

  // one contiguous host range: a plain cudaMemcpy when small or already pinned, else staged
  void single(bool upload, char* device, std::uintptr_t host, std::size_t bytes);
  void run(Job job);     // staged by the threads; returns when every byte has arrived
  void work(int index);  // a worker thread's loop
  void stop() noexcept;  // ends and joins the worker threads
  void copy_chunks(Worker& worker, int index, const Job& job);

  int device_;
  StagedPlan plan_;
  // Every worker's staging buffers, one pinned allocation (freed after the workers, whose
  // streams are drained first): 24 allocations of 4 MiB and their frees took 0.2 s of each of
  // `run`'s two staged curves on an H100, and one of the same size is kept between them while
  // the engine keeps buffers (keep_buffers).
  Buffer slab_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;
  std::mutex calls_;  // one copy at a time: callers from several threads queue here
  std::mutex mutex_;  // guards the job hand-over to the workers
  std::condition_variable wake_;
  std::condition_variable done_;
  Job job_;
  std::size_t generation_ = 0;  // bumped for each job
  int finished_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;  // the first worker error of the current job
};

// Host memcpy into ordinary (pageable) memory with streaming stores that bypass the caches, so
// a large destination is not read in before it is written over. Falls back to memcpy.
void copy_streaming(void* destination, const void* source, std::size_t bytes);

}  // namespace xferscope
