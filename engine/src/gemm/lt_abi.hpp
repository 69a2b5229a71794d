// The part of cuBLASLt's C ABI the engine uses, declared here as cublasLt.h gives it, with the
// same names, so the engine builds without cuBLAS's header (NVIDIA's toolchain wheels have none;
// the library itself is opened at run time). Where cublasLt.h is found beside the toolkit,
// lt_abi_check.cpp compares every name, value and layout here with it at build time.
#pragma once

#include <cuda_runtime_api.h>
#include <library_types.h>

#include <cstddef>
#include <cstdint>

namespace xferscope::gemm {

// cuBLAS's major version is CUDA's: libcublasLt.so.13 belongs to CUDA 13.
constexpr int kCublasMajor = CUDART_VERSION / 1000;

enum cublasStatus_t {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cublasComputeType_t {
  CUBLAS_COMPUTE_32F = 68,
  CUBLAS_COMPUTE_64F = 70,
  CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
};
enum cublasLtMatmulDescAttributes_t {
  CUBLASLT_MATMUL_DESC_TRANSA = 3,
  CUBLASLT_MATMUL_DESC_TRANSB = 4,
  CUBLASLT_MATMUL_DESC_A_SCALE_POINTER = 17,
  CUBLASLT_MATMUL_DESC_B_SCALE_POINTER = 18,
};
enum cublasLtMatmulPreferenceAttributes_t { CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1 };
enum cublasLtMatmulAlgoConfigAttributes_t {
  CUBLASLT_ALGO_CONFIG_ID = 0,
  CUBLASLT_ALGO_CONFIG_TILE_ID = 1,
  CUBLASLT_ALGO_CONFIG_SPLITK_NUM = 2,
  CUBLASLT_ALGO_CONFIG_STAGES_ID = 6,
};

struct cublasLtContext;
using cublasLtHandle_t = cublasLtContext*;
struct cublasLtMatrixLayoutOpaque_t {
  std::uint64_t data[8];
};
using cublasLtMatrixLayout_t = cublasLtMatrixLayoutOpaque_t*;
struct cublasLtMatmulAlgo_t {
  std::uint64_t data[8];
};
struct cublasLtMatmulDescOpaque_t {
  std::uint64_t data[32];
};
using cublasLtMatmulDesc_t = cublasLtMatmulDescOpaque_t*;
struct cublasLtMatmulPreferenceOpaque_t {
  std::uint64_t data[8];
};
using cublasLtMatmulPreference_t = cublasLtMatmulPreferenceOpaque_t*;
struct cublasLtMatmulHeuristicResult_t {
  cublasLtMatmulAlgo_t algo;
  std::size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
};

// The entry points, as function types (declared, never defined: they are dlsym'ed).
namespace lt_api {
using Create = cublasStatus_t(cublasLtHandle_t*);
using Destroy = cublasStatus_t(cublasLtHandle_t);
using GetVersion = std::size_t();
using DescCreate = cublasStatus_t(cublasLtMatmulDesc_t*, cublasComputeType_t, cudaDataType_t);
using DescDestroy = cublasStatus_t(cublasLtMatmulDesc_t);
using DescSet = cublasStatus_t(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, const void*,
                               std::size_t);
using LayoutCreate = cublasStatus_t(cublasLtMatrixLayout_t*, cudaDataType, std::uint64_t,
                                    std::uint64_t, std::int64_t);
using LayoutDestroy = cublasStatus_t(cublasLtMatrixLayout_t);
using PreferenceCreate = cublasStatus_t(cublasLtMatmulPreference_t*);
using PreferenceDestroy = cublasStatus_t(cublasLtMatmulPreference_t);
using PreferenceSet = cublasStatus_t(cublasLtMatmulPreference_t,
                                     cublasLtMatmulPreferenceAttributes_t, const void*,
                                     std::size_t);
using Heuristic = cublasStatus_t(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
                                 cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                 cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int,
                                 cublasLtMatmulHeuristicResult_t[], int*);
using AlgoGet = cublasStatus_t(const cublasLtMatmulAlgo_t*, cublasLtMatmulAlgoConfigAttributes_t,
                               void*, std::size_t, std::size_t*);
using Matmul = cublasStatus_t(cublasLtHandle_t, cublasLtMatmulDesc_t, const void*, const void*,
                              cublasLtMatrixLayout_t, const void*, cublasLtMatrixLayout_t,
                              const void*, const void*, cublasLtMatrixLayout_t, void*,
                              cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t*, void*,
                              std::size_t, cudaStream_t);
}  // namespace lt_api

}  // namespace xferscope::gemm
