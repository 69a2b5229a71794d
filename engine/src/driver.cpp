#include "xferscope/detail/driver.hpp"

#include "xferscope/error.hpp"

namespace xferscope::detail {

namespace {

template <typename F>
void find(F& into, const char* symbol) {
  void* f = nullptr;
  cudaDriverEntryPointQueryResult status{};
  XFS_CUDA_CALL(cudaGetDriverEntryPointByVersion(symbol, &f, 12000, cudaEnableDefault, &status));
  if (status != cudaDriverEntryPointSuccess || !f) {
    throw UsageError(std::string("this CUDA driver has no ") + symbol);
  }
  into = reinterpret_cast<F>(f);
}

}  // namespace

const DriverCopies& driver_copies() {
  static const DriverCopies copies = [] {
    DriverCopies c;
    find(c.htod, "cuMemcpyHtoD");
    find(c.dtoh, "cuMemcpyDtoH");
    find(c.dtod, "cuMemcpyDtoD");
    find(c.htod_async, "cuMemcpyHtoDAsync");
    find(c.dtoh_async, "cuMemcpyDtoHAsync");
    find(c.dtod_async, "cuMemcpyDtoDAsync");
    return c;
  }();
  return copies;
}

void throw_driver_error(CUresult code, const char* expression, const char* file, int line) {
  throw_cuda_error(static_cast<cudaError_t>(code), expression, file, line);
}

}  // namespace xferscope::detail
