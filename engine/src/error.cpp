#include "xferscope/error.hpp"

namespace xferscope {

namespace {
std::string describe(cudaError_t code, const char* expression, const char* file, int line) {
  return std::string(cudaGetErrorName(code)) + ": " + cudaGetErrorString(code) + " (" + expression +
         " at " + file + ":" + std::to_string(line) + ")";
}
}  // namespace

CudaError::CudaError(cudaError_t code, const char* expression, const char* file, int line)
    : std::runtime_error(describe(code, expression, file, line)), code_(code) {}

AllocationError::AllocationError(const std::string& kind, std::size_t bytes,
                                 const std::string& reason)
    : std::runtime_error("cannot allocate " + std::to_string(bytes) + " bytes of " + kind +
                         " memory: " + reason),
      kind_(kind),
      bytes_(bytes) {}

namespace detail {
void throw_cuda_error(cudaError_t code, const char* expression, const char* file, int line) {
  cudaGetLastError();  // clear a non-sticky error so later calls start clean
  throw CudaError(code, expression, file, line);
}
}  // namespace detail

}  // namespace xferscope
