// Many copies of the caller's own buffers at once (xferscope.copy_many): the batch methods of
// batch.hpp applied to lists of pointers, on one GPU, by a copier that keeps its stream,
// staging and pointer tables between calls (they grow to the largest batch seen).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace xferscope::batch {

// What memory an address lies in, as the CUDA driver sees it.
enum class PointerKind : int { pageable = 0, pinned = 1, device = 2, managed = 3 };

struct PointerInfo {
  PointerKind kind = PointerKind::pageable;
  int device = -1;                 // device and managed memory: the GPU it belongs to
  std::uintptr_t mapped = 0;       // pinned memory: the address a kernel uses (0: not mapped)
  std::uintptr_t range_start = 0;  // the allocation it lies in (0: unknown, pageable)
  std::size_t range_bytes = 0;
};

// Addresses' kinds, asked one at a time: an address in an allocation this classifier has
// already seen is answered from it, so pieces of a few large buffers cost a few driver queries.
class Classifier {
 public:
  PointerInfo of(std::uintptr_t address);

 private:
  std::map<std::uintptr_t, PointerInfo> ranges_;  // allocations seen, by start
};

// The kinds of `count` addresses, by one Classifier.
std::vector<PointerInfo> classify(const std::uintptr_t* addresses, std::size_t count);

// The pinned staging a copier holds for a batch needing `bytes` (pack's data, a kernel's
// table): a power of two from 8 MiB, so that batches of changing sizes stop growing it soon
// (the rule packs batches under 4 MiB: one step holds them with their table). Over 10,000
// calls of changing shapes on an H100 it still grew 2 MiB after 1,000 when it began at 64 KiB.
constexpr std::size_t kStagingLeast = 8 << 20;
// The method a batch asked to go by `method` goes by on the caller's stream `on` (copy's): a
// queued one (loop, batch-*) as it is, any other (pack, staged, kernel: this copier's staging,
// waited for) by the loop, and the batch API by the loop on the legacy default stream, which it
// refuses (handles 0 and 1); `method` itself where `on` < 0 (this copier's stream).
const std::string& method_on_stream(const std::string& method, std::int64_t on);

std::size_t staging_bytes(std::size_t bytes);

class ManyCopier {
 public:
  explicit ManyCopier(int device);
  ~ManyCopier();
  ManyCopier(const ManyCopier&) = delete;
  ManyCopier& operator=(const ManyCopier&) = delete;

  int device() const noexcept { return device_; }
  // Copies piece i: sizes[i] bytes from sources[i] to destinations[i], all host to device
  // (`upload`) or all device to host, by `method` (loop, batch-stream, batch-call, batch-any,
  // pack, staged, kernel); returns once every byte has landed, and the method that made it.
  // `pinned`: the host side is page-locked (kernel needs it, with `mapped_host`: the address
  // each host piece has on the GPU). Calls from several threads run one after another.
  //
  // The staged method's threads and pinned chunks (tens of milliseconds to make) are made on
  // another thread, begun by the first staged batch; until they are ready a staged batch goes
  // by the loop, one cudaMemcpyAsync per piece, as PyTorch's copy makes it, so no call waits
  // for them. If making them failed, the next staged batch raises that error.
  //
  // `wait` false: the loop and batch methods return once their copies are queued on this
  // copier's stream (the caller keeps every buffer as it is until finish()); the other methods
  // (pack, staged, kernel: they share this copier's staging) still return once every byte has
  // landed. A later copy queues after it on the same stream.
  //
  // Where the call waits and goes by the loop, its copies go on the legacy default stream
  // (PyTorch's and CuPy's default stream) unless copies it did not wait for are still queued
  // on this copier's stream: they then follow what the program queued there, as PyTorch's
  // copy_ does, and the program's next work there follows them with no change of stream (a
  // change cost the next copy 0.4-0.6 us on an H100: benchmarks/stream_probe.cu). The batch
  // API refuses the legacy stream, and the other methods share this copier's staging: they go
  // on this copier's stream, which does not wait for work on other streams.
  //
  // `on` >= 0: the caller's stream, a cudaStream_t as an integer (0 the legacy default stream):
  // the copies are queued there and the call returns, nothing waited for; they follow what the
  // program queued there, and what it queues next follows them. Only queued methods go there
  // (method_on_stream); the caller keeps every buffer as it is until the stream has run them.
  std::string copy(const std::string& method, bool upload, const std::uintptr_t* destinations,
                   const std::uintptr_t* sources, const std::size_t* sizes, std::size_t count,
                   bool pinned, const std::uintptr_t* mapped_host, bool wait = true,
                   std::int64_t on = -1);
  // Queues one copy at once, as the loop method makes it: a batch's pieces copied while the
  // rest are still being read (copy_many's early pieces), on the stream a loop copy of the
  // call goes on (`wait`: whether the call, copy() after these, waits). The caller keeps both
  // buffers as they are until finish() or a later copy with `wait` has returned.
  void queue(bool upload, std::uintptr_t destination, std::uintptr_t source, std::size_t size,
             bool wait, std::int64_t on = -1);
  // Ranges of an open file to the GPU through this copier's staged copy (made now where it is
  // not yet): StagedCopier::read_to_device, so a checkpoint's load shares copy_many's pinned
  // chunks and threads (`readers`: as there). Returns once every byte has arrived.
  void read_to_device(int fd, void* device_destination, const std::uint64_t* file_offsets,
                      const std::size_t* sizes, const std::size_t* offsets, std::size_t count,
                      int readers = 0);
  // Returns once every copy this copier queued has landed; raises a queued copy's error.
  void finish();
  // Makes now what the first staged copy would make (its threads, a host memcpy probe and its
  // pinned chunks), or waits for it being made; raises what making it raised.
  void prepare_staged();
  // Whether the staged copy's threads and chunks are made (its batches go staged).
  bool staged_ready() const noexcept;
  // Pinned host memory this copier holds for later calls: its staging, and its staged copy's
  // chunks once made.
  std::size_t pinned_bytes();

 private:
  struct Impl;
  int device_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace xferscope::batch
