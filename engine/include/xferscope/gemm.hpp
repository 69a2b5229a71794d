// GEMM through cuBLASLt (seed 003's study, in today's precisions): C = alpha * op(A) * op(B) +
// beta * C on one GPU, inputs random on the device, timed with CUDA events, verified against a
// double-precision reference on a sample of outputs. cuBLASLt is loaded when the first GEMM is
// made (gemm/lt.cpp), so the engine imports where it is missing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "xferscope/cases.hpp"

namespace xferscope::gemm {

// cuBLASLt cannot be loaded, or it refused a GEMM; the message names the library or the call.
class BlasError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// How long a tuning times each candidate algorithm in one pass (at least one GEMM).
inline constexpr double kTuningPassSeconds = 0.010;

struct PrecisionInfo {
  const char* name;  // fp64, fp32, tf32, fp16, bf16, fp8
  int input_bytes;   // one element of A and B
  int output_bytes;  // one element of C
  int min_compute;   // major * 10 + minor: the least compute capability that has it
  double tolerance;  // |C - reference| <= tolerance * sum |a b| over the dot product
  const char* description;
};
const std::vector<PrecisionInfo>& precisions();

struct GemmSpec {
  int device = 0;
  std::string precision = "fp32";
  std::int64_t m = 1024, n = 1024, k = 1024;
  bool trans_a = false, trans_b = false;  // op(X) = X^T
  double alpha = 1.0, beta = 0.0;
  std::uint64_t seed = Limits::default_seed;
  // Inputs are rotated through copies until they span this many bytes, so a small GEMM does
  // not find its inputs in L2 from the last call; 0: one copy.
  std::size_t rotation_bytes = 0;
  // How many of the heuristic's algorithms to time, keeping the fastest (0 or 1: the first that
  // runs, as the heuristic ranks them). The heuristic's first choice can be slower than the one
  // cublasDgemm picks (seen: FP64 8192^3 on an H200, 0.92 of torch.matmul).
  int tune = 0;
  // The heuristic's algorithm of this rank, untimed, where it runs (a choice an earlier tuning of
  // the same GEMM on the same GPU, driver and cuBLASLt made); -1, or one that does not run: tune.
  int rank = -1;
};

// Why the engine cannot run this GEMM, or "": names, shapes, the precision's layout rules and
// whether the GPU has it (checked against its compute capability).
std::string refusal(const GemmSpec& spec, int compute_capability);

struct GemmVerification {
  bool ok = false;
  int samples = 0;
  int failures = 0;
  double worst_error = 0;  // the largest |C - reference| / sum |a b| among the samples
  std::int64_t worst_row = -1, worst_column = -1;
};

struct GemmAlgorithm {
  int id = -1, tile = -1, stages = -1, split_k = -1;
  std::size_t workspace_bytes = 0;
  int rank = 0;        // its place in the heuristic's list (0: the heuristic's first choice)
  int candidates = 0;  // how many algorithms were timed to choose it (0: none, the first ran)
  double tuned_s = 0;  // GPU seconds of the GEMMs timed to choose it, just before: a warm-up
};

struct TransferTiming {
  double seconds = 0;      // host clock: every upload, GEMM and download of the iterations
  bool delivered = false;  // the C that reached host memory equals the GPU's (when checked)
};

class Gemm {
 public:
  explicit Gemm(const GemmSpec& spec);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // `iterations` GEMMs back to back on the GPU, timed with CUDA events; returns seconds.
  double time(std::int64_t iterations);
  // Recomputes `samples` outputs in double precision and compares; `inject_fault` corrupts one
  // output first (the check must catch it).
  GemmVerification verify(int samples, bool inject_fault = false);
  // Seed 003's GEMM with transfers: each iteration uploads A and B from host memory (`pinned`:
  // cudaMallocHost, else pageable memory), runs the GEMM and downloads C, as one sequence on one
  // stream (`tiles` 1), or with B and C split into `tiles` column tiles over `streams` streams
  // so the copies of one tile overlap the GEMM of another (A goes first). Host clock.
  // `check_delivery` compares the downloaded C with the GPU's afterwards (outside the timing);
  // calibration runs leave it off.
  TransferTiming time_with_transfers(bool pinned, int tiles, int streams, std::int64_t iterations,
                                     bool check_delivery = true);
  // The GEMM of a smaller shape (m, n, k, each at most this GEMM's) run by padding it to this
  // one: each iteration copies the small op(A) and op(B) from their own device buffers into
  // this GEMM's (cudaMemcpy2DAsync), runs this GEMM and copies the small C out of its D, the
  // padding's cost included. CUDA events; returns seconds.
  double time_padded(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t iterations);
  const GemmAlgorithm& algorithm() const { return algorithm_; }
  int copies() const { return copies_; }
  std::size_t footprint_bytes() const;  // device memory held
  static std::size_t bytes_needed(const GemmSpec& spec, int copies);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  GemmAlgorithm algorithm_;
  int copies_ = 1;
};

// cuBLASLt's version (cublasLtGetVersion), loading it if needed; throws BlasError if missing.
std::size_t cublaslt_version();

}  // namespace xferscope::gemm
