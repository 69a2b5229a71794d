// cuBLASLt's entry points, loaded at run time (lt_abi.hpp gives the types; the library is opened
// on first use). Internal to the engine.
#pragma once

#include <string>

#include "gemm/lt_abi.hpp"

namespace xferscope::gemm {

struct Lt {
  lt_api::Create* create;
  lt_api::Destroy* destroy;
  lt_api::GetVersion* get_version;
  lt_api::DescCreate* desc_create;
  lt_api::DescDestroy* desc_destroy;
  lt_api::DescSet* desc_set;
  lt_api::LayoutCreate* layout_create;
  lt_api::LayoutDestroy* layout_destroy;
  lt_api::PreferenceCreate* preference_create;
  lt_api::PreferenceDestroy* preference_destroy;
  lt_api::PreferenceSet* preference_set;
  lt_api::Heuristic* heuristic;
  lt_api::AlgoGet* algo_get;
  lt_api::Matmul* matmul;
  std::string path;  // the file loaded
};

// The entry points; throws BlasError naming the library and how to get it.
const Lt& lt();

// Throws BlasError naming the call and cuBLAS's status when `status` is not success.
void check(cublasStatus_t status, const char* call);

}  // namespace xferscope::gemm
