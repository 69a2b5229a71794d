// Opens libcublasLt on first use: $XFERSCOPE_LIBCUBLASLT (which xferscope sets to the library
// cuda-pathfinder finds: NVIDIA's wheels, the loader path, the toolkit), then the soname of the
// CUDA major this engine was built with, then the toolkit's default place.
#include "gemm/lt.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <vector>

#include "dynlib.hpp"
#include "xferscope/gemm.hpp"

namespace xferscope::gemm {

namespace {

struct Loaded {
  Lt lt{};
  std::string error;
};

Loaded load() {
  Loaded out;
  const std::string major = std::to_string(kCublasMajor);
  const std::string soname = "libcublasLt.so." + major;
  const char* chosen = std::getenv("XFERSCOPE_LIBCUBLASLT");
  const dynlib::Opened opened = dynlib::open_first(
      {chosen ? chosen : "", soname, "/usr/local/cuda/lib64/" + soname}, RTLD_NOW | RTLD_LOCAL);
  if (!opened.handle) {
    out.error =
        "cannot load " + soname + " (cuBLAS " + major + "); $XFERSCOPE_LIBCUBLASLT names the file";
    return out;
  }
  out.lt.path = opened.path;
  void* handle = opened.handle;
  std::string missing;
  Lt& l = out.lt;
  using dynlib::resolve;
  resolve(l.create, handle, "cublasLtCreate", missing);
  resolve(l.destroy, handle, "cublasLtDestroy", missing);
  resolve(l.get_version, handle, "cublasLtGetVersion", missing);
  resolve(l.desc_create, handle, "cublasLtMatmulDescCreate", missing);
  resolve(l.desc_destroy, handle, "cublasLtMatmulDescDestroy", missing);
  resolve(l.desc_set, handle, "cublasLtMatmulDescSetAttribute", missing);
  resolve(l.layout_create, handle, "cublasLtMatrixLayoutCreate", missing);
  resolve(l.layout_destroy, handle, "cublasLtMatrixLayoutDestroy", missing);
  resolve(l.preference_create, handle, "cublasLtMatmulPreferenceCreate", missing);
  resolve(l.preference_destroy, handle, "cublasLtMatmulPreferenceDestroy", missing);
  resolve(l.preference_set, handle, "cublasLtMatmulPreferenceSetAttribute", missing);
  resolve(l.heuristic, handle, "cublasLtMatmulAlgoGetHeuristic", missing);
  resolve(l.algo_get, handle, "cublasLtMatmulAlgoConfigGetAttribute", missing);
  resolve(l.matmul, handle, "cublasLtMatmul", missing);
  if (!missing.empty()) out.error = out.lt.path + " lacks " + missing;
  return out;
}

}  // namespace

const Lt& lt() {
  static std::once_flag once;
  static Loaded loaded;
  std::call_once(once, [] { loaded = load(); });
  if (!loaded.error.empty()) throw BlasError(loaded.error);
  return loaded.lt;
}

void check(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const int code = static_cast<int>(status);
  const char* name = "CUBLAS_STATUS_?";
  switch (status) {
    case CUBLAS_STATUS_NOT_INITIALIZED: name = "CUBLAS_STATUS_NOT_INITIALIZED"; break;
    case CUBLAS_STATUS_ALLOC_FAILED: name = "CUBLAS_STATUS_ALLOC_FAILED"; break;
    case CUBLAS_STATUS_INVALID_VALUE: name = "CUBLAS_STATUS_INVALID_VALUE"; break;
    case CUBLAS_STATUS_ARCH_MISMATCH: name = "CUBLAS_STATUS_ARCH_MISMATCH"; break;
    case CUBLAS_STATUS_MAPPING_ERROR: name = "CUBLAS_STATUS_MAPPING_ERROR"; break;
    case CUBLAS_STATUS_EXECUTION_FAILED: name = "CUBLAS_STATUS_EXECUTION_FAILED"; break;
    case CUBLAS_STATUS_INTERNAL_ERROR: name = "CUBLAS_STATUS_INTERNAL_ERROR"; break;
    case CUBLAS_STATUS_NOT_SUPPORTED: name = "CUBLAS_STATUS_NOT_SUPPORTED"; break;
    default: break;
  }
  throw BlasError(std::string(call) + " failed: " + name + " (" + std::to_string(code) + ")");
}

std::size_t cublaslt_version() { return lt().get_version(); }

}  // namespace xferscope::gemm
