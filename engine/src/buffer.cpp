#include "xferscope/buffer.hpp"

#include <cuda_runtime_api.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "xferscope/error.hpp"

namespace xferscope {

namespace {

constexpr std::size_t kPageBytes = 4096;

std::size_t round_up(std::size_t value, std::size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

void* aligned_host(std::size_t bytes, MemoryKind kind, std::size_t alignment = kPageBytes) {
  void* p = std::aligned_alloc(alignment, round_up(bytes, alignment));
  if (p == nullptr) {
    throw AllocationError(std::string(to_string(kind)), bytes, "aligned_alloc returned null");
  }
  return p;
}

// Released buffers kept for the next allocation of the same kind, GPU and size (keep_buffers).
struct Kept {
  MemoryKind kind;
  int device;
  std::size_t bytes;
  void* host;
  void* device_pointer;
};
constexpr std::size_t kKeptLeast = 64 << 20;  // smaller buffers are cheap to allocate
constexpr std::size_t kKeptCount = 8;
struct Keeper {
  std::mutex lock;
  bool on = false;
  std::size_t reused = 0;
  std::vector<Kept> kept;
};
Keeper& keeper() {
  static auto* k = new Keeper;  // never destroyed: buffers may be released during exit
  return *k;
}

void free_memory(MemoryKind kind, void* host, void* device, std::size_t bytes) noexcept {
  switch (kind) {
    case MemoryKind::pageable:
    case MemoryKind::thp:
    case MemoryKind::system: std::free(host); break;
    case MemoryKind::hugetlb:
      if (host != nullptr) munmap(host, round_up(bytes, kHugePageBytes));
      break;
    case MemoryKind::pinned:
    case MemoryKind::write_combined:
    case MemoryKind::mapped:
    case MemoryKind::portable:
      if (host != nullptr) cudaFreeHost(host);
      break;
    case MemoryKind::registered:
    case MemoryKind::readonly:
      if (host != nullptr) {
        cudaHostUnregister(host);
        std::free(host);
      }
      break;
    case MemoryKind::managed:
    case MemoryKind::device:
      if (device != nullptr) cudaFree(device);
      break;
  }
}

[[noreturn]] void host_failed(MemoryKind kind, std::size_t bytes, const std::string& call) {
  throw AllocationError(std::string(to_string(kind)), bytes, call + ": " + std::strerror(errno));
}

[[noreturn]] void allocation_failed(MemoryKind kind, std::size_t bytes, cudaError_t status) {
  cudaGetLastError();
  throw AllocationError(std::string(to_string(kind)), bytes,
                        std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status));
}

}  // namespace

std::string_view to_string(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::pageable: return "pageable";
    case MemoryKind::pinned: return "pinned";
    case MemoryKind::write_combined: return "wc";
    case MemoryKind::registered: return "registered";
    case MemoryKind::mapped: return "mapped";
    case MemoryKind::thp: return "thp";
    case MemoryKind::hugetlb: return "hugetlb";
    case MemoryKind::readonly: return "readonly";
    case MemoryKind::portable: return "portable";
    case MemoryKind::system: return "system";
    case MemoryKind::managed: return "managed";
    case MemoryKind::device: return "device";
  }
  return "unknown";
}

bool staged_by_driver(MemoryKind kind) noexcept {
  return kind == MemoryKind::pageable || kind == MemoryKind::thp || kind == MemoryKind::hugetlb ||
         kind == MemoryKind::system;
}

bool gpu_addressable(MemoryKind kind) noexcept {
  return !staged_by_driver(kind) || kind == MemoryKind::system;
}

std::string memory_kinds(bool (*keep)(MemoryKind) noexcept) {
  std::string names;
  for (MemoryKind kind : kAllMemoryKinds) {
    if (keep(kind)) names += (names.empty() ? "" : ", ") + std::string(to_string(kind));
  }
  return names;
}

MemoryKind memory_kind_from_string(std::string_view name) {
  std::string accepted;
  for (MemoryKind kind : kAllMemoryKinds) {
    if (to_string(kind) == name) return kind;
    accepted += (accepted.empty() ? "" : ", ") + std::string(to_string(kind));
  }
  throw UsageError("unknown memory kind '" + std::string(name) + "' (accepted: " + accepted + ")");
}

std::size_t keep_buffers(bool on) {
  Keeper& k = keeper();
  std::vector<Kept> freed;
  std::size_t reused = 0;
  {
    std::lock_guard<std::mutex> hold(k.lock);
    reused = k.reused;
    k.reused = 0;
    k.on = on;
    if (!on) freed.swap(k.kept);
  }
  for (const Kept& b : freed) free_memory(b.kind, b.host, b.device_pointer, b.bytes);
  return on ? 0 : reused;
}

Buffer Buffer::allocate(MemoryKind kind, std::size_t bytes, int device) {
  if (bytes == 0) throw UsageError("a buffer needs at least one byte");
  XFS_CUDA_CALL(cudaSetDevice(device));
  Buffer buffer;
  buffer.kind_ = kind;
  buffer.size_ = bytes;
  buffer.device_index_ = device;
  if (bytes >= kKeptLeast) {
    Keeper& k = keeper();
    std::lock_guard<std::mutex> hold(k.lock);
    for (auto it = k.kept.begin(); it != k.kept.end(); ++it) {
      if (it->kind == kind && it->device == device && it->bytes == bytes) {
        buffer.host_ = it->host;
        buffer.device_ = it->device_pointer;
        k.kept.erase(it);
        ++k.reused;
        return buffer;
      }
    }
  }
  cudaError_t status = cudaSuccess;
  switch (kind) {
    case MemoryKind::pageable: buffer.host_ = aligned_host(bytes, kind); break;
    case MemoryKind::pinned:
    case MemoryKind::write_combined:
    case MemoryKind::mapped: {
      unsigned flags = cudaHostAllocPortable | cudaHostAllocMapped;
      if (kind == MemoryKind::write_combined) flags |= cudaHostAllocWriteCombined;
      status = cudaHostAlloc(&buffer.host_, bytes, flags);
      if (status != cudaSuccess) allocation_failed(kind, bytes, status);
      status = cudaHostGetDevicePointer(&buffer.device_, buffer.host_, 0);
      if (status != cudaSuccess) allocation_failed(kind, bytes, status);
      break;
    }
    case MemoryKind::registered:
    case MemoryKind::readonly: {
      buffer.host_ = aligned_host(bytes, kind);
      unsigned flags = cudaHostRegisterPortable | cudaHostRegisterMapped;
      if (kind == MemoryKind::readonly) flags |= cudaHostRegisterReadOnly;
      status = cudaHostRegister(buffer.host_, round_up(bytes, kPageBytes), flags);
      if (status != cudaSuccess) {
        std::free(buffer.host_);
        buffer.host_ = nullptr;
        allocation_failed(kind, bytes, status);
      }
      status = cudaHostGetDevicePointer(&buffer.device_, buffer.host_, 0);
      if (status != cudaSuccess) allocation_failed(kind, bytes, status);
      break;
    }
    case MemoryKind::thp: {
      buffer.host_ = aligned_host(bytes, kind, kHugePageBytes);
      if (madvise(buffer.host_, round_up(bytes, kHugePageBytes), MADV_HUGEPAGE) != 0) {
        const int error = errno;
        std::free(buffer.host_);
        buffer.host_ = nullptr;
        errno = error;
        host_failed(kind, bytes, "madvise(MADV_HUGEPAGE)");
      }
      break;
    }
    case MemoryKind::hugetlb: {
      void* p = mmap(nullptr, round_up(bytes, kHugePageBytes), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
      if (p == MAP_FAILED) {
        host_failed(kind, bytes,
                    "mmap(MAP_HUGETLB) (too few huge pages reserved? HugePages_Free in "
                    "/proc/meminfo; sysctl vm.nr_hugepages)");
      }
      buffer.host_ = p;
      break;
    }
    case MemoryKind::portable: {
      // made while another GPU is current, where there is one: the GPU measured uses it as
      // memory pinned by another context
      int count = 1;
      XFS_CUDA_CALL(cudaGetDeviceCount(&count));
      XFS_CUDA_CALL(cudaSetDevice((device + 1) % count));
      status = cudaHostAlloc(&buffer.host_, bytes, cudaHostAllocPortable);
      XFS_CUDA_CALL(cudaSetDevice(device));
      if (status != cudaSuccess) allocation_failed(kind, bytes, status);
      // unified addressing maps it for every GPU; without it there is no device pointer
      if (cudaHostGetDevicePointer(&buffer.device_, buffer.host_, 0) != cudaSuccess) {
        cudaGetLastError();
        buffer.device_ = nullptr;
      }
      break;
    }
    case MemoryKind::system: {
      buffer.host_ = aligned_host(bytes, kind);
      int pageable_access = 0;
      XFS_CUDA_CALL(
          cudaDeviceGetAttribute(&pageable_access, cudaDevAttrPageableMemoryAccess, device));
      buffer.device_ = pageable_access ? buffer.host_ : nullptr;
      break;
    }
    case MemoryKind::managed: {
      status = cudaMallocManaged(&buffer.device_, bytes, cudaMemAttachGlobal);
      if (status != cudaSuccess) allocation_failed(kind, bytes, status);
      buffer.host_ = buffer.device_;
      const cudaMemLocation host{cudaMemLocationTypeHost, 0};
      const cudaMemLocation gpu{cudaMemLocationTypeDevice, device};
      status = cudaMemAdvise(buffer.device_, bytes, cudaMemAdviseSetPreferredLocation, host);
      if (status == cudaSuccess) {
        status = cudaMemAdvise(buffer.device_, bytes, cudaMemAdviseSetAccessedBy, gpu);
      }
      if (status == cudaSuccess) {
        status = cudaMemPrefetchAsync(buffer.device_, bytes, host, 0, nullptr);
      }
      if (status == cudaSuccess) status = cudaDeviceSynchronize();
      if (status != cudaSuccess) {
        cudaFree(buffer.device_);
        buffer.device_ = buffer.host_ = nullptr;
        allocation_failed(kind, bytes, status);
      }
      break;
    }
    case MemoryKind::device:
      status = cudaMalloc(&buffer.device_, bytes);
      if (status != cudaSuccess) allocation_failed(kind, bytes, status);
      break;
  }
  return buffer;
}

void* Buffer::gpu_address(int gpu) const {
  if (device_ == nullptr) {
    throw UsageError("GPU " + std::to_string(gpu) + " cannot read " +
                     std::string(to_string(kind_)) +
                     " memory in place (no pageable memory access: neither HMM nor ATS)");
  }
  return device_;
}

Buffer::Buffer(Buffer&& other) noexcept { *this = std::move(other); }

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    release();
    kind_ = other.kind_;
    size_ = other.size_;
    device_index_ = other.device_index_;
    host_ = std::exchange(other.host_, nullptr);
    device_ = std::exchange(other.device_, nullptr);
    other.size_ = 0;
  }
  return *this;
}

Buffer::~Buffer() { release(); }

// Frees without throwing: a failure to free during unwinding must not hide the first error.
// While keep_buffers is on, a large buffer is kept for the next allocation like it instead.
void Buffer::release() noexcept {
  if ((host_ != nullptr || device_ != nullptr) && size_ >= kKeptLeast) {
    Keeper& k = keeper();
    std::lock_guard<std::mutex> hold(k.lock);
    if (k.on) {
      k.kept.push_back({kind_, device_index_, size_, host_, device_});
      Kept oldest{};
      const bool over = k.kept.size() > kKeptCount;
      if (over) {
        oldest = k.kept.front();
        k.kept.erase(k.kept.begin());
      }
      host_ = nullptr;
      device_ = nullptr;
      size_ = 0;
      if (over) free_memory(oldest.kind, oldest.host, oldest.device_pointer, oldest.bytes);
      return;
    }
  }
  free_memory(kind_, host_, device_, size_);
  host_ = nullptr;
  device_ = nullptr;
  size_ = 0;
}

}  // namespace xferscope
