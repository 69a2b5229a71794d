// The state of one GEMM (Gemm::Impl): its descriptors, buffers, streams and tiles, with the
// methods gemm.cpp (set-up, launches, buffers) and algorithm.cpp (the heuristic and tuning) define.
// Internal to the engine.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gemm/kernels.hpp"
#include "gemm/lt.hpp"
#include "xferscope/detail/handles.hpp"
#include "xferscope/gemm.hpp"

namespace xferscope::gemm {

inline constexpr std::size_t kWorkspaceBytes = 32u << 20;

struct Types {
  kernels::Type input, output;
  cudaDataType_t a, c;
  cublasComputeType_t compute;
  cudaDataType_t scale;
};

struct Gemm::Impl {
  const Lt& l;
  GemmSpec s;
  Types t;
  int copies;
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a_layout = nullptr, b_layout = nullptr, c_layout = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  cublasLtMatmulHeuristicResult_t heuristic{};
  int rank = 0, candidates = 0;   // the algorithm kept: its place in the list, how many were timed
  double tuned_s = 0;             // GPU seconds of the candidates' GEMMs timed to choose it
  std::vector<void*> a, b, c, d;  // one per copy; D = alpha op(A) op(B) + beta C, C unchanged
  void* workspace = nullptr;
  float* scales = nullptr;  // fp8: the scales of A and B (1.0)
  double* check_out = nullptr;
  detail::Stream stream;
  detail::Event start, stop;

  // Host copies of A, B and of the downloaded C, one set per memory kind, made on first use.
  struct HostSet {
    void* a = nullptr;
    void* b = nullptr;
    void* d = nullptr;
    bool pinned = false;
  };
  HostSet host[2];  // [pageable, pinned]
  // Column tiles of op(B) and C: their width, layouts and algorithm, per distinct width.
  struct Tile {
    std::int64_t width = 0;
    cublasLtMatrixLayout_t b = nullptr, c = nullptr;
    cublasLtMatmulHeuristicResult_t algo{};
  };
  std::vector<Tile> tiles;
  std::vector<detail::Stream> streams;
  // A workspace per stream: cuBLASLt's split-K kernels keep counters in theirs, and two GEMMs
  // sharing one at once can spin forever (seen: fp32 4096 in 8 tiles over 3 streams hung).
  std::vector<void*> stream_workspaces;
  detail::Event a_ready;
  std::vector<detail::Event> tiles_done;  // per stream: its tiles of an iteration are done
  // time_padded: the small shape's own A, B and C, and the shape they were made for
  void* small[3] = {nullptr, nullptr, nullptr};
  std::int64_t small_shape[3] = {0, 0, 0};

  Impl(const GemmSpec& spec, int copies_);

  std::size_t elements_a() const { return static_cast<std::size_t>(s.m) * s.k; }
  std::size_t elements_b() const { return static_cast<std::size_t>(s.k) * s.n; }
  std::size_t elements_c() const { return static_cast<std::size_t>(s.m) * s.n; }
  std::uint64_t seed_of(char which, int copy) const {
    return s.seed ^ (static_cast<std::uint64_t>(which) << 56) ^ static_cast<std::uint64_t>(copy);
  }

  void allocate(void*& p, std::size_t bytes, const char* what);
  // The buffers, descriptors and layouts, then the algorithm (choose_algorithm).
  void setup();
  // algorithm.cpp: the heuristic's list for the GEMM's layouts, and the one of its algorithms
  // kept in `heuristic` (the first that runs, or the tuning's choice), with rank, candidates and
  // tuned_s. Leaves the stream synchronized.
  void choose_algorithm();
  void release() noexcept;

  cublasStatus_t launch(int copy);
  void run(int copy) { check(launch(copy), "cublasLtMatmul"); }

  std::size_t bytes_a() const { return elements_a() * kernels::type_bytes(t.input); }
  std::size_t bytes_b() const { return elements_b() * kernels::type_bytes(t.input); }
  std::size_t bytes_d() const { return elements_c() * kernels::type_bytes(t.output); }

  void* host_alloc(std::size_t bytes, bool pinned_memory);
  // Host A and B hold the device's copy 0, so uploading them leaves the verified result as is.
  HostSet& host_set(bool pinned_memory);

  cublasStatus_t launch_tile(const Tile& tile, std::int64_t first_column, cudaStream_t on,
                             void* space);
  // The tiles of `count` columns each (the last one narrower), with their layouts and
  // algorithms; and `count_streams` streams.
  void prepare_tiles(int count, int count_streams);
};

}  // namespace xferscope::gemm
