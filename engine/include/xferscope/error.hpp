// Typed errors thrown by the engine. The engine never exits or prints: the caller decides.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace xferscope {

// A CUDA runtime call failed. The message carries the expression, the file and line, and the
// CUDA error name and text.
class CudaError : public std::runtime_error {
 public:
  CudaError(cudaError_t code, const char* expression, const char* file, int line);
  cudaError_t code() const noexcept { return code_; }

 private:
  cudaError_t code_;
};

// There is no usable CUDA device (no driver, no GPU, or an index out of range).
class NoDeviceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A size as a person reads it, in binary units: 4 KiB, 1.5 MiB, 64 MiB, 12 B. The one rule for
// every sentence that names a size, the engine's and (through the binding) the Python package's.
std::string format_bytes(double bytes);

// A buffer could not be allocated. Names the memory kind and the size.
class AllocationError : public std::runtime_error {
 public:
  AllocationError(const std::string& kind, std::size_t bytes, const std::string& reason);
  const std::string& kind() const noexcept { return kind_; }
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  std::string kind_;
  std::size_t bytes_;
};

// Reading a file failed (`error`: its errno), or the file ended before the bytes asked for
// (`error` 0: it is shorter than when its layout was read).
class ReadError : public std::runtime_error {
 public:
  ReadError(int error, std::uint64_t offset, std::size_t bytes);
  int error() const noexcept { return error_; }

 private:
  int error_;
};

// A request the engine cannot carry out as asked (an impossible combination, a size over the
// capacity of a transfer).
class UsageError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

namespace detail {
void throw_cuda_error(cudaError_t code, const char* expression, const char* file, int line);
}  // namespace detail

}  // namespace xferscope

// Checks a CUDA runtime call and throws xferscope::CudaError on failure.
#define XFS_CUDA_CALL(expression)                                                          \
  do {                                                                                     \
    const cudaError_t xfs_status_ = (expression);                                          \
    if (xfs_status_ != cudaSuccess) {                                                      \
      ::xferscope::detail::throw_cuda_error(xfs_status_, #expression, __FILE__, __LINE__); \
    }                                                                                      \
  } while (false)
