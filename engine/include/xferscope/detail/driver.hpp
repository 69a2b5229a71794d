// The CUDA driver API's copies (cuMemcpyHtoD, ...), found through the runtime at run time: the
// engine links no driver library, so it still imports on a machine without one.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

namespace xferscope::detail {

struct DriverCopies {
  CUresult (*htod)(CUdeviceptr, const void*, size_t) = nullptr;
  CUresult (*dtoh)(void*, CUdeviceptr, size_t) = nullptr;
  CUresult (*dtod)(CUdeviceptr, CUdeviceptr, size_t) = nullptr;
  CUresult (*htod_async)(CUdeviceptr, const void*, size_t, CUstream) = nullptr;
  CUresult (*dtoh_async)(void*, CUdeviceptr, size_t, CUstream) = nullptr;
  CUresult (*dtod_async)(CUdeviceptr, CUdeviceptr, size_t, CUstream) = nullptr;
};

// The driver's copy entry points (CudaError when the driver lacks one).
const DriverCopies& driver_copies();

// Throws CudaError for a failed driver call (CUresult and cudaError_t share the values of the
// errors a copy can meet: invalid value 1, out of memory 2, illegal address 700, ...).
void throw_driver_error(CUresult code, const char* expression, const char* file, int line);

}  // namespace xferscope::detail

#define XFS_DRIVER_CALL(expression)                                                          \
  do {                                                                                       \
    const CUresult xfs_result_ = (expression);                                               \
    if (xfs_result_ != CUDA_SUCCESS) {                                                       \
      ::xferscope::detail::throw_driver_error(xfs_result_, #expression, __FILE__, __LINE__); \
    }                                                                                        \
  } while (false)
