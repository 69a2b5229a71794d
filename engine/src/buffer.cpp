#include "xferscope/buffer.hpp"

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <string>
#include <utility>

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

Buffer Buffer::allocate(MemoryKind kind, std::size_t bytes, int device) {
  if (bytes == 0) throw UsageError("a buffer needs at least one byte");
  XFS_CUDA_CALL(cudaSetDevice(device));
  Buffer buffer;
  buffer.kind_ = kind;
  buffer.size_ = bytes;
  buffer.device_index_ = device;
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
void Buffer::release() noexcept {
  switch (kind_) {
    case MemoryKind::pageable: std::free(host_); break;
    case MemoryKind::pinned:
    case MemoryKind::write_combined:
    case MemoryKind::mapped:
      if (host_ != nullptr) cudaFreeHost(host_);
      break;
    case MemoryKind::registered:
      if (host_ != nullptr) {
        cudaHostUnregister(host_);
        std::free(host_);
      }
      break;
    case MemoryKind::device:
      if (device_ != nullptr) cudaFree(device_);
      break;
  }
  host_ = nullptr;
  device_ = nullptr;
  size_ = 0;
}

}  // namespace xferscope
