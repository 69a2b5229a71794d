#include "xferscope/buffer.hpp"

#include <cuda_runtime_api.h>

#include <cstdlib>
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

void* aligned_host(std::size_t bytes, MemoryKind kind) {
  void* p = std::aligned_alloc(kPageBytes, round_up(bytes, kPageBytes));
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

void free_memory(MemoryKind kind, void* host, void* device) noexcept {
  switch (kind) {
    case MemoryKind::pageable: std::free(host); break;
    case MemoryKind::pinned:
    case MemoryKind::write_combined:
    case MemoryKind::mapped:
      if (host != nullptr) cudaFreeHost(host);
      break;
    case MemoryKind::registered:
      if (host != nullptr) {
        cudaHostUnregister(host);
        std::free(host);
      }
      break;
    case MemoryKind::device:
      if (device != nullptr) cudaFree(device);
      break;
  }
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
    case MemoryKind::device: return "device";
  }
  return "unknown";
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
  for (const Kept& b : freed) free_memory(b.kind, b.host, b.device_pointer);
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
    case MemoryKind::registered: {
      buffer.host_ = aligned_host(bytes, kind);
      status = cudaHostRegister(buffer.host_, round_up(bytes, kPageBytes),
                                cudaHostRegisterPortable | cudaHostRegisterMapped);
      if (status != cudaSuccess) {
        std::free(buffer.host_);
        buffer.host_ = nullptr;
        allocation_failed(kind, bytes, status);
      }
      status = cudaHostGetDevicePointer(&buffer.device_, buffer.host_, 0);
      if (status != cudaSuccess) allocation_failed(kind, bytes, status);
      break;
    }
    case MemoryKind::device:
      status = cudaMalloc(&buffer.device_, bytes);
      if (status != cudaSuccess) allocation_failed(kind, bytes, status);
      break;
  }
  return buffer;
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
      if (over) free_memory(oldest.kind, oldest.host, oldest.device_pointer);
      return;
    }
  }
  free_memory(kind_, host_, device_);
  host_ = nullptr;
  device_ = nullptr;
  size_ = 0;
}

}  // namespace xferscope
