// cuBLASLt's entry points, loaded at run time (its header gives the types; the library is
// opened on first use). Internal to the engine.
#pragma once

#include <cublasLt.h>

#include <string>

namespace xferscope::gemm {

struct Lt {
  decltype(&cublasLtCreate) create;
  decltype(&cublasLtDestroy) destroy;
  decltype(&cublasLtGetVersion) get_version;
  decltype(&cublasLtMatmulDescCreate) desc_create;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set;
  decltype(&cublasLtMatrixLayoutCreate) layout_create;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy;
  decltype(&cublasLtMatmulPreferenceCreate) preference_create;
  decltype(&cublasLtMatmulPreferenceDestroy) preference_destroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) preference_set;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
  decltype(&cublasLtMatmulAlgoConfigGetAttribute) algo_get;
  decltype(&cublasLtMatmul) matmul;
  std::string path;  // the file loaded
};

// The entry points; throws BlasError naming the library and how to get it.
const Lt& lt();

// Throws BlasError naming the call and cuBLAS's status when `status` is not success.
void check(cublasStatus_t status, const char* call);

}  // namespace xferscope::gemm
