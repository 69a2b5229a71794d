// xferscope._engine's NCCL part (pairs.hpp): a unique id, a communicator handle, pair timings.
#include "xferscope/pairs.hpp"

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "handle.hpp"
#include "xferscope/error.hpp"

namespace nb = nanobind;
using namespace nb::literals;
namespace pairs = xferscope::pairs;
using PairHandle = xferscope::bindings::Handle<pairs::PairComm>;

namespace {}  // namespace

void bind_pairs(nb::module_& m) {
  nb::exception<pairs::NcclError>(m, "NcclError", PyExc_RuntimeError);
  m.def(
      "nccl_unique_id",
      [](const std::string& library) {
        std::vector<std::uint8_t> id = pairs::unique_id(library);
        return nb::bytes(reinterpret_cast<const char*>(id.data()), id.size());
      },
      "library"_a = "", "A new NCCL unique id (128 bytes), for rank 0 to hand to every rank.");
  m.def("nccl_version", &pairs::nccl_version, "library"_a = "");
  nb::class_<PairHandle>(m, "PairComm", "An NCCL communicator over the fleet's ranks.")
      .def(
          "__init__",
          [](PairHandle* h, const nb::bytes& id, int ranks, int rank, int device,
             std::size_t capacity, const std::string& library) {
            std::vector<std::uint8_t> raw(static_cast<const std::uint8_t*>(id.data()),
                                          static_cast<const std::uint8_t*>(id.data()) + id.size());
            new (h) PairHandle("NCCL communicator", nullptr, raw, ranks, rank, device, capacity,
                               library);
          },
          "id"_a, "ranks"_a, "rank"_a, "device"_a, "capacity"_a, "library"_a = "")
      .def(
          "stream",
          [](PairHandle& h, int from, int to, std::size_t bytes, std::int64_t iterations) {
            pairs::PairComm& c = h.get();
            nb::gil_scoped_release release;
            return c.stream(from, to, bytes, iterations).seconds;
          },
          "source"_a, "destination"_a, "bytes"_a, "iterations"_a,
          "Seconds of `iterations` messages from one rank to another (0 off the pair).")
      .def(
          "ping_pong",
          [](PairHandle& h, int a, int b, std::size_t bytes, std::int64_t iterations) {
            pairs::PairComm& c = h.get();
            nb::gil_scoped_release release;
            return c.ping_pong(a, b, bytes, iterations).seconds;
          },
          "a"_a, "b"_a, "bytes"_a, "iterations"_a)
      .def(
          "mismatches",
          [](PairHandle& h, std::size_t bytes) {
            pairs::PairComm& c = h.get();
            nb::gil_scoped_release release;
            return c.mismatches(bytes);
          },
          "bytes"_a)
      .def("close", &PairHandle::close);
}
