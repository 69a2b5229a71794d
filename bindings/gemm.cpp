// xferscope._engine's GEMM part (gemm.hpp): the precisions, the rules, a GEMM handle, and its
// verification as a read-only class the simulated engine builds too.
#include "xferscope/gemm.hpp"

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <memory>
#include <string>

#include "handle.hpp"
#include "xferscope/error.hpp"

namespace nb = nanobind;
using namespace nb::literals;
namespace gemm = xferscope::gemm;
using GemmHandle = xferscope::bindings::Handle<gemm::Gemm>;

namespace {

gemm::GemmSpec spec_of(int device, const std::string& precision, std::int64_t m, std::int64_t n,
                       std::int64_t k, bool trans_a, bool trans_b, double alpha, double beta,
                       std::uint64_t seed, std::size_t rotation_bytes, int tune = 0,
                       int rank = -1) {
  gemm::GemmSpec s;
  s.device = device;
  s.precision = precision;
  s.m = m, s.n = n, s.k = k;
  s.trans_a = trans_a, s.trans_b = trans_b;
  s.alpha = alpha, s.beta = beta;
  s.seed = seed;
  s.rotation_bytes = rotation_bytes;
  s.tune = tune;
  s.rank = rank;
  return s;
}

}  // namespace

void bind_gemm(nb::module_& m) {
  nb::exception<gemm::BlasError>(m, "BlasError", PyExc_RuntimeError);
  nb::list table;
  for (const auto& p : gemm::precisions()) {
    table.append(nb::make_tuple(std::string(p.name), p.input_bytes, p.output_bytes, p.min_compute,
                                p.tolerance, std::string(p.description)));
  }
  // (name, input bytes, output bytes, least compute capability x10, tolerance, description)
  m.attr("GEMM_PRECISIONS") = nb::tuple(table);
  m.attr("GEMM_TUNING_PASS_S") = gemm::kTuningPassSeconds;
  m.def(
      "gemm_refusal",
      [](const std::string& precision, std::int64_t m_, std::int64_t n, std::int64_t k,
         bool trans_a, bool trans_b, int compute_capability) {
        return gemm::refusal(spec_of(0, precision, m_, n, k, trans_a, trans_b, 1.0, 0.0, 0, 0),
                             compute_capability);
      },
      "precision"_a, "m"_a, "n"_a, "k"_a, "trans_a"_a, "trans_b"_a, "compute_capability"_a = -1,
      "Why the engine cannot run this GEMM, or ''.");
  m.def(
      "gemm_bytes_needed",
      [](const std::string& precision, std::int64_t m_, std::int64_t n, std::int64_t k,
         int copies) {
        return gemm::Gemm::bytes_needed(
            spec_of(0, precision, m_, n, k, false, false, 1.0, 0.0, 0, 0), copies);
      },
      "precision"_a, "m"_a, "n"_a, "k"_a, "copies"_a = 1,
      "Device memory a GEMM holds: A, B, C and D `copies` times, and the workspace.");
  m.def("cublaslt_version", &gemm::cublaslt_version, nb::call_guard<nb::gil_scoped_release>(),
        "cuBLASLt's version, the library loaded (once) if it was not.");

  nb::class_<gemm::GemmVerification>(m, "GemmVerification",
                                     "Sampled outputs against a double-precision reference.")
      .def(
          "__init__",
          [](gemm::GemmVerification* v, bool ok, int samples, int failures, double worst,
             std::int64_t row, std::int64_t column) {
            new (v) gemm::GemmVerification{ok, samples, failures, worst, row, column};
          },
          "ok"_a, "samples"_a, "failures"_a, "worst_error"_a, "worst_row"_a, "worst_column"_a)
      .def_ro("ok", &gemm::GemmVerification::ok)
      .def_ro("samples", &gemm::GemmVerification::samples)
      .def_ro("failures", &gemm::GemmVerification::failures)
      .def_ro("worst_error", &gemm::GemmVerification::worst_error)
      .def_ro("worst_row", &gemm::GemmVerification::worst_row)
      .def_ro("worst_column", &gemm::GemmVerification::worst_column);

  nb::class_<GemmHandle>(m, "Gemm", "One GEMM's matrices, descriptors and algorithm on a GPU.")
      .def(
          "__init__",
          [](GemmHandle* h, int device, const std::string& precision, std::int64_t m_,
             std::int64_t n, std::int64_t k, bool trans_a, bool trans_b, double alpha, double beta,
             std::uint64_t seed, std::size_t rotation_bytes, int tune, int rank) {
            new (h) GemmHandle("GEMM", nullptr,
                               spec_of(device, precision, m_, n, k, trans_a, trans_b, alpha, beta,
                                       seed, rotation_bytes, tune, rank));
          },
          "device"_a, "precision"_a, "m"_a, "n"_a, "k"_a, "trans_a"_a = false, "trans_b"_a = false,
          "alpha"_a = 1.0, "beta"_a = 0.0, "seed"_a = xferscope::Limits::default_seed,
          "rotation_bytes"_a = 0, "tune"_a = 0, "rank"_a = -1)
      .def(
          "time",
          [](GemmHandle& h, std::int64_t iterations) {
            gemm::Gemm& g = h.get();
            nb::gil_scoped_release release;
            return g.time(iterations);
          },
          "iterations"_a, "Seconds of `iterations` GEMMs back to back (CUDA events).")
      .def(
          "time_padded",
          [](GemmHandle& h, std::int64_t m, std::int64_t n, std::int64_t k,
             std::int64_t iterations) {
            gemm::Gemm& g = h.get();
            nb::gil_scoped_release release;
            return g.time_padded(m, n, k, iterations);
          },
          "m"_a, "n"_a, "k"_a, "iterations"_a,
          "Seconds of `iterations` GEMMs of m x n x k padded to this one, the copies in and out "
          "included (CUDA events).")
      .def(
          "verify",
          [](GemmHandle& h, int samples, bool inject_fault) {
            gemm::Gemm& g = h.get();
            nb::gil_scoped_release release;
            return g.verify(samples, inject_fault);
          },
          "samples"_a = 256, "inject_fault"_a = false)
      .def(
          "time_with_transfers",
          [](GemmHandle& h, bool pinned, int tiles, int streams, std::int64_t iterations,
             bool check_delivery) {
            gemm::Gemm& g = h.get();
            gemm::TransferTiming r;
            {
              nb::gil_scoped_release release;
              r = g.time_with_transfers(pinned, tiles, streams, iterations, check_delivery);
            }
            return nb::make_tuple(r.seconds, r.delivered);
          },
          "pinned"_a, "tiles"_a, "streams"_a, "iterations"_a, "check_delivery"_a = true,
          "Seconds of `iterations` uploads, GEMMs and downloads, and whether C arrived whole.")
      .def_prop_ro("algorithm",
                   [](GemmHandle& h) {
                     const gemm::GemmAlgorithm& a = h.get().algorithm();
                     nb::dict d;
                     d["id"] = a.id;
                     d["tile"] = a.tile;
                     d["stages"] = a.stages;
                     d["split_k"] = a.split_k;
                     d["workspace_bytes"] = a.workspace_bytes;
                     d["rank"] = a.rank;
                     d["candidates"] = a.candidates;
                     d["tuned_s"] = a.tuned_s;
                     return d;
                   })
      .def_prop_ro("copies", [](GemmHandle& h) { return h.get().copies(); })
      .def_prop_ro("footprint_bytes", [](GemmHandle& h) { return h.get().footprint_bytes(); })
      .def("close", &GemmHandle::close);
}
