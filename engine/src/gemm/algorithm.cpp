// The algorithm of one GEMM (Gemm::Impl::choose_algorithm): the heuristic's list, and the
// tuning that times its candidates forward and backward and keeps one.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>
#include <vector>

#include "gemm/impl.hpp"
#include "gemm/lt.hpp"
#include "xferscope/detail/handles.hpp"
#include "xferscope/error.hpp"
#include "xferscope/gemm.hpp"

namespace xferscope::gemm {

namespace {

// A tuning times backward only the candidates whose forward time is within this of the fastest.
constexpr double kContender = 1.05;
// The heuristic's first choice stays unless another beats it by more than this share over both
// passes. At the power limit an H100's clocks move the rate by several percent from one 10 ms
// pass to the next: with 1%, a tuning of bf16 8192^3 picked ranks 2, 0, 0, 2, 1 in five runs and
// fp16 once rank 7, which then ran at 0.88-0.94 of torch; the first choice ran at 1.00-1.02.
constexpr double kKeepFirst = 0.03;

}  // namespace

void Gemm::Impl::choose_algorithm() {
  // The heuristic's best algorithms in order; the first one cuBLASLt actually runs is kept
  // (a heuristic's choice can still be refused at run time).
  std::vector<cublasLtMatmulHeuristicResult_t> found(8);
  int returned = 0;
  check(l.heuristic(handle, desc, a_layout, b_layout, c_layout, c_layout, preference,
                    static_cast<int>(found.size()), found.data(), &returned),
        "cublasLtMatmulAlgoGetHeuristic");
  if (returned < 1) {
    throw BlasError("cuBLASLt has no algorithm for " + s.precision + " " + std::to_string(s.m) +
                    "x" + std::to_string(s.n) + "x" + std::to_string(s.k));
  }
  auto time_of = [&](int i, int count) {
    heuristic = found[static_cast<std::size_t>(i)];
    XFS_CUDA_CALL(cudaEventRecord(start, stream));
    for (int j = 0; j < count; ++j) check(launch(0), "cublasLtMatmul");
    XFS_CUDA_CALL(cudaEventRecord(stop, stream));
    XFS_CUDA_CALL(cudaEventSynchronize(stop));
    float ms = 0;
    XFS_CUDA_CALL(cudaEventElapsedTime(&ms, start, stop));
    tuned_s += ms / 1e3;
    return static_cast<double>(ms);
  };
  // the algorithms that run, in the heuristic's order; the first launch of each also loads its
  // kernels (lazy module loading)
  std::vector<int> runs;
  cublasStatus_t last = CUBLAS_STATUS_NOT_SUPPORTED;
  if (s.rank >= 0 && s.rank < returned) {  // chosen before: kept if it runs, timed against none
    heuristic = found[static_cast<std::size_t>(s.rank)];
    if (launch(0) == CUBLAS_STATUS_SUCCESS) runs.push_back(s.rank);
  }
  for (int i = 0; i < returned && runs.empty(); ++i) {
    heuristic = found[static_cast<std::size_t>(i)];
    last = launch(0);
    if (last == CUBLAS_STATUS_SUCCESS) runs.push_back(i);
  }
  if (!runs.empty()) {
    last = CUBLAS_STATUS_SUCCESS;
    rank = runs[0];
  }
  if (!runs.empty() && runs[0] != s.rank && s.tune > 1 && returned > runs[0] + 1) {
    // Time each for kTuningPassSeconds (at least one GEMM: an 8192^3 GEMM in fp64 or fp32 takes
    // 18-22 ms on an H100), forward then backward so neither end of the list meets the clocks
    // alone; the heuristic's choice stays unless another beats it by more than kKeepFirst (a
    // short burst flatters some kernels that run slower sustained). The backward pass times only
    // the candidates within kContender of the forward pass's fastest: one slower by more
    // cannot win, as clocks drift by far less within one tuning.
    const double once = time_of(runs[0], 1);
    const int count = std::max(
        1, static_cast<int>(std::min(1000.0, kTuningPassSeconds * 1e3 / std::max(once, 1e-3))));
    std::vector<double> total;
    if (count == 1) {
      // One GEMM outlasts a pass: each candidate's first launch is its forward pass, queued
      // behind the one before without waiting, so that the host loads its kernels while the
      // GPU still runs the GEMM before (a launch to load them first cost 8 GEMMs, 0.16 s, for
      // each of fp64 and fp32 on an H100). One whose launch came after the GPU had drained
      // its queue may hold an idle gap between its events: it is timed again.
      total.push_back(once);
      std::vector<detail::Event> starts, stops;
      std::vector<bool> drained;
      for (int i = runs[0] + 1; i < returned && static_cast<int>(runs.size()) < s.tune; ++i) {
        const std::size_t at = drained.size();  // the events of a refused one are taken again
        if (starts.size() == at) {
          starts.push_back(detail::Event::create());
          stops.push_back(detail::Event::create());
        }
        heuristic = found[static_cast<std::size_t>(i)];
        XFS_CUDA_CALL(cudaEventRecord(starts[at], stream));
        if (launch(0) != CUBLAS_STATUS_SUCCESS) continue;  // refused: its events unused
        const cudaError_t before = at == 0 ? cudaErrorNotReady : cudaEventQuery(stops[at - 1]);
        if (before != cudaSuccess && before != cudaErrorNotReady) XFS_CUDA_CALL(before);
        XFS_CUDA_CALL(cudaEventRecord(stops[at], stream));
        drained.push_back(before == cudaSuccess);
        runs.push_back(i);
      }
      if (!drained.empty()) XFS_CUDA_CALL(cudaEventSynchronize(stops[drained.size() - 1]));
      for (std::size_t j = 0; j < drained.size(); ++j) {
        float ms = 0;
        XFS_CUDA_CALL(cudaEventElapsedTime(&ms, starts[j], stops[j]));
        tuned_s += ms / 1e3;
        total.push_back(drained[j] ? time_of(runs[j + 1], 1) : static_cast<double>(ms));
      }
    } else {
      for (int i = runs[0] + 1; i < returned && static_cast<int>(runs.size()) < s.tune; ++i) {
        heuristic = found[static_cast<std::size_t>(i)];
        if (launch(0) == CUBLAS_STATUS_SUCCESS) runs.push_back(i);
      }
      for (const int r : runs) total.push_back(time_of(r, count));
    }
    if (runs.size() > 1) {
      const double fastest = *std::min_element(total.begin(), total.end());
      std::vector<bool> contender(runs.size());
      for (std::size_t j = 0; j < runs.size(); ++j) {
        contender[j] = total[j] <= kContender * fastest;
      }
      for (std::size_t j = runs.size(); j-- > 0;) {
        if (contender[j]) total[j] += time_of(runs[j], count);
      }
      std::size_t best = 0;
      for (std::size_t j = 0; j < runs.size(); ++j) {
        if (contender[j] && (!contender[best] || total[j] < total[best])) best = j;
      }
      if (contender[0] && total[best] >= (1 - kKeepFirst) * total[0]) best = 0;
      rank = runs[best];
      candidates = static_cast<int>(runs.size());
    }
  }
  heuristic = found[static_cast<std::size_t>(rank)];
  check(last,
        ("cublasLtMatmul (each of the heuristic's " + std::to_string(returned) + " algorithms)")
            .c_str());
  XFS_CUDA_CALL(cudaStreamSynchronize(stream));
}

}  // namespace xferscope::gemm
