// Owning buffers of every memory kind the engine measures.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace xferscope {

enum class MemoryKind {
  pageable,        // aligned malloc: the driver stages it through its own pinned buffers
  pinned,          // cudaHostAlloc: page-locked, DMA-able
  write_combined,  // cudaHostAlloc(WriteCombined): fast for the GPU to read, slow for the CPU
  registered,      // aligned malloc, then cudaHostRegister: pinned in place
  mapped,          // cudaHostAlloc(Mapped): pinned, with a device pointer kernels can use
  thp,             // pageable, 2 MiB aligned and advised into transparent huge pages (madvise)
  hugetlb,         // pageable from the reserved huge pages (mmap MAP_HUGETLB)
  readonly,        // aligned malloc, registered read-only (cudaHostRegisterReadOnly): h2d only
  portable,        // cudaHostAlloc(Portable) made while another GPU is current, where there is one
  system,          // malloc memory read in place by the GPU (HMM or ATS: pageableMemoryAccess)
  managed,         // cudaMallocManaged, preferred on the host and prefetched there
  device,          // cudaMalloc
};

// Every kind, in the order the tool lists them: host kinds, then device memory.
inline constexpr MemoryKind kAllMemoryKinds[] = {
    MemoryKind::pageable, MemoryKind::pinned, MemoryKind::write_combined, MemoryKind::registered,
    MemoryKind::mapped,   MemoryKind::thp,    MemoryKind::hugetlb,        MemoryKind::readonly,
    MemoryKind::portable, MemoryKind::system, MemoryKind::managed,        MemoryKind::device};

// Host memory the driver stages itself in a copy, as it does malloc memory: a copy of it
// returns when it is done, so it cannot wait behind the blocking kernel.
bool staged_by_driver(MemoryKind kind) noexcept;
// Memory a GPU thread reads by its address (SM copies, pointer chases); system memory only on
// a GPU with pageable memory access (a waiver says so elsewhere).
bool gpu_addressable(MemoryKind kind) noexcept;
// The names of the kinds `keep` accepts, in kAllMemoryKinds' order, joined by ", " (for
// messages that say what is accepted).
std::string memory_kinds(bool (*keep)(MemoryKind) noexcept);
// The size of one huge page of hugetlb memory (the kernel's default, 2 MiB on x86).
inline constexpr std::size_t kHugePageBytes = 2u << 20;

std::string_view to_string(MemoryKind kind);
MemoryKind memory_kind_from_string(std::string_view name);

// While on, a released buffer of 64 MiB or more is kept (the last 8 of them)
// and handed to the next allocation of the same kind, GPU and size instead of being freed:
// `xferscope run` measures many curves over the same 1 GiB buffers, and allocating and freeing
// 1 GiB of pinned memory took 0.83 s on an H100 host. Turning it off frees every kept buffer.
// Returns how many buffers were handed out again since the last call.
std::size_t keep_buffers(bool on);

class Buffer {
 public:
  // Allocates `bytes` of `kind` on (or for) `device`; throws AllocationError on failure.
  static Buffer allocate(MemoryKind kind, std::size_t bytes, int device);

  Buffer() = default;
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  MemoryKind kind() const noexcept { return kind_; }
  int device_index() const noexcept { return device_index_; }  // the GPU it was allocated for
  std::size_t size() const noexcept { return size_; }
  bool on_device() const noexcept { return kind_ == MemoryKind::device; }
  // The address the CPU uses; nullptr for device memory.
  void* host() const noexcept { return host_; }
  // The address the GPU uses: device memory, or host memory mapped into the device's address
  // space; nullptr for pageable memory, which the GPU cannot address.
  void* device() const noexcept { return device_; }
  // The address a thread of GPU `gpu` reads: device(), or UsageError naming the kind where the
  // GPU has none (system memory on a GPU without pageable memory access).
  void* gpu_address(int gpu) const;
  // The address copies use (host address for host kinds, device address otherwise).
  void* data() const noexcept { return on_device() ? device_ : host_; }

 private:
  void release() noexcept;

  MemoryKind kind_ = MemoryKind::pageable;
  int device_index_ = 0;
  std::size_t size_ = 0;
  void* host_ = nullptr;
  void* device_ = nullptr;
};

}  // namespace xferscope
