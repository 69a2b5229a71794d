#include "xferscope/error.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

namespace xferscope {

std::string format_bytes(double bytes) {
  static const struct {
    const char* unit;
    double factor;
  } units[] = {{"TiB", 0x1p40}, {"GiB", 0x1p30}, {"MiB", 0x1p20}, {"KiB", 0x1p10}};
  char text[64];
  for (const auto& u : units) {
    if (!(bytes >= u.factor)) continue;
    const double value = bytes / u.factor;
    if (value == std::floor(value)) {
      std::snprintf(text, sizeof text, "%.0f %s", value, u.unit);
      return text;
    }
    const int digits = value < 10 ? 2 : value < 100 ? 1 : 0;
    std::snprintf(text, sizeof text, "%.*f", digits, value);
    std::string out = text;
    if (digits) {  // 1.50 -> 1.5, but never 140 -> 14
      out.erase(out.find_last_not_of('0') + 1);
      if (out.back() == '.') out.pop_back();
    }
    return out + " " + u.unit;
  }
  std::snprintf(text, sizeof text, "%.0f B", bytes);
  return text;
}

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
    : std::runtime_error("cannot allocate " + format_bytes(static_cast<double>(bytes)) + " of " +
                         kind + " memory: " + reason),
      kind_(kind),
      bytes_(bytes) {}

ReadError::ReadError(int error, std::uint64_t offset, std::size_t bytes)
    : std::runtime_error(error
                             ? "reading " + format_bytes(static_cast<double>(bytes)) + " at byte " +
                                   std::to_string(offset) + ": " + std::strerror(error)
                             : "the file ends before byte " + std::to_string(offset + bytes) +
                                   ": it is shorter than when its layout was read (it changed)"),
      error_(error) {}

namespace detail {
void throw_cuda_error(cudaError_t code, const char* expression, const char* file, int line) {
  cudaGetLastError();  // clear a non-sticky error so later calls start clean
  throw CudaError(code, expression, file, line);
}
}  // namespace detail

}  // namespace xferscope
