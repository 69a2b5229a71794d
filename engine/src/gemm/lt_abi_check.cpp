// Built only where cublasLt.h is found beside the toolkit (CMakeLists.txt): every name, value,
// layout and entry point lt_abi.hpp declares must be cublasLt.h's, or the build fails here.
#include <cublasLt.h>

#include <cstddef>
#include <type_traits>

#include "gemm/lt_abi.hpp"

namespace ours = xferscope::gemm;

static_assert(ours::kCublasMajor == CUBLAS_VER_MAJOR, "cuBLAS's major is not CUDA's");

#define XFS_SAME_VALUE(name) \
  static_assert(static_cast<long>(ours::name) == static_cast<long>(::name), #name)
XFS_SAME_VALUE(CUBLAS_STATUS_SUCCESS);
XFS_SAME_VALUE(CUBLAS_STATUS_NOT_INITIALIZED);
XFS_SAME_VALUE(CUBLAS_STATUS_ALLOC_FAILED);
XFS_SAME_VALUE(CUBLAS_STATUS_INVALID_VALUE);
XFS_SAME_VALUE(CUBLAS_STATUS_ARCH_MISMATCH);
XFS_SAME_VALUE(CUBLAS_STATUS_MAPPING_ERROR);
XFS_SAME_VALUE(CUBLAS_STATUS_EXECUTION_FAILED);
XFS_SAME_VALUE(CUBLAS_STATUS_INTERNAL_ERROR);
XFS_SAME_VALUE(CUBLAS_STATUS_NOT_SUPPORTED);
XFS_SAME_VALUE(CUBLAS_OP_N);
XFS_SAME_VALUE(CUBLAS_OP_T);
XFS_SAME_VALUE(CUBLAS_COMPUTE_32F);
XFS_SAME_VALUE(CUBLAS_COMPUTE_64F);
XFS_SAME_VALUE(CUBLAS_COMPUTE_32F_FAST_TF32);
XFS_SAME_VALUE(CUBLASLT_MATMUL_DESC_TRANSA);
XFS_SAME_VALUE(CUBLASLT_MATMUL_DESC_TRANSB);
XFS_SAME_VALUE(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER);
XFS_SAME_VALUE(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER);
XFS_SAME_VALUE(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES);
XFS_SAME_VALUE(CUBLASLT_ALGO_CONFIG_ID);
XFS_SAME_VALUE(CUBLASLT_ALGO_CONFIG_TILE_ID);
XFS_SAME_VALUE(CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
XFS_SAME_VALUE(CUBLASLT_ALGO_CONFIG_STAGES_ID);
#undef XFS_SAME_VALUE

#define XFS_SAME_LAYOUT(type)                                                    \
  static_assert(sizeof(ours::type) == sizeof(::type), #type " differs in size"); \
  static_assert(alignof(ours::type) == alignof(::type), #type " differs in alignment")
XFS_SAME_LAYOUT(cublasStatus_t);
XFS_SAME_LAYOUT(cublasOperation_t);
XFS_SAME_LAYOUT(cublasComputeType_t);
XFS_SAME_LAYOUT(cublasLtMatmulDescAttributes_t);
XFS_SAME_LAYOUT(cublasLtMatmulPreferenceAttributes_t);
XFS_SAME_LAYOUT(cublasLtMatmulAlgoConfigAttributes_t);
XFS_SAME_LAYOUT(cublasLtMatrixLayoutOpaque_t);
XFS_SAME_LAYOUT(cublasLtMatmulAlgo_t);
XFS_SAME_LAYOUT(cublasLtMatmulDescOpaque_t);
XFS_SAME_LAYOUT(cublasLtMatmulPreferenceOpaque_t);
XFS_SAME_LAYOUT(cublasLtMatmulHeuristicResult_t);
#undef XFS_SAME_LAYOUT

#define XFS_SAME_OFFSET(type, field) \
  static_assert(offsetof(ours::type, field) == offsetof(::type, field), #type "." #field)
XFS_SAME_OFFSET(cublasLtMatmulHeuristicResult_t, algo);
XFS_SAME_OFFSET(cublasLtMatmulHeuristicResult_t, workspaceSize);
XFS_SAME_OFFSET(cublasLtMatmulHeuristicResult_t, state);
XFS_SAME_OFFSET(cublasLtMatmulHeuristicResult_t, wavesCount);
XFS_SAME_OFFSET(cublasLtMatmulHeuristicResult_t, reserved);
#undef XFS_SAME_OFFSET

// An entry point's type with cublasLt.h's types replaced by ours, so the two can be compared.
template <typename T>
struct Ours {
  using type = T;
};
template <typename T>
struct Ours<T*> {
  using type = typename Ours<T>::type*;
};
template <typename T>
struct Ours<const T> {
  using type = const typename Ours<T>::type;
};
#define XFS_MAPS(theirs)       \
  template <>                  \
  struct Ours<::theirs> {      \
    using type = ours::theirs; \
  }
XFS_MAPS(cublasStatus_t);
XFS_MAPS(cublasComputeType_t);
XFS_MAPS(cublasLtMatmulDescAttributes_t);
XFS_MAPS(cublasLtMatmulPreferenceAttributes_t);
XFS_MAPS(cublasLtMatmulAlgoConfigAttributes_t);
XFS_MAPS(cublasLtContext);
XFS_MAPS(cublasLtMatrixLayoutOpaque_t);
XFS_MAPS(cublasLtMatmulDescOpaque_t);
XFS_MAPS(cublasLtMatmulPreferenceOpaque_t);
XFS_MAPS(cublasLtMatmulHeuristicResult_t);
XFS_MAPS(cublasLtMatmulAlgo_t);
#undef XFS_MAPS
template <typename R, typename... A>
struct Ours<R(A...)> {
  using type = typename Ours<R>::type(typename Ours<A>::type...);
};

#define XFS_SAME_ENTRY(alias, function)                                                  \
  static_assert(std::is_same_v<Ours<std::remove_pointer_t<decltype(&::function)>>::type, \
                               ours::lt_api::alias>,                                     \
                #function " differs from lt_abi.hpp's " #alias)
XFS_SAME_ENTRY(Create, cublasLtCreate);
XFS_SAME_ENTRY(Destroy, cublasLtDestroy);
XFS_SAME_ENTRY(GetVersion, cublasLtGetVersion);
XFS_SAME_ENTRY(DescCreate, cublasLtMatmulDescCreate);
XFS_SAME_ENTRY(DescDestroy, cublasLtMatmulDescDestroy);
XFS_SAME_ENTRY(DescSet, cublasLtMatmulDescSetAttribute);
XFS_SAME_ENTRY(LayoutCreate, cublasLtMatrixLayoutCreate);
XFS_SAME_ENTRY(LayoutDestroy, cublasLtMatrixLayoutDestroy);
XFS_SAME_ENTRY(PreferenceCreate, cublasLtMatmulPreferenceCreate);
XFS_SAME_ENTRY(PreferenceDestroy, cublasLtMatmulPreferenceDestroy);
XFS_SAME_ENTRY(PreferenceSet, cublasLtMatmulPreferenceSetAttribute);
XFS_SAME_ENTRY(Heuristic, cublasLtMatmulAlgoGetHeuristic);
XFS_SAME_ENTRY(AlgoGet, cublasLtMatmulAlgoConfigGetAttribute);
XFS_SAME_ENTRY(Matmul, cublasLtMatmul);
#undef XFS_SAME_ENTRY
