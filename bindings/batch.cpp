// xferscope._engine's batch part (batch.hpp): the methods, their refusals, a batch handle.
#include "xferscope/batch.hpp"

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>
#include <vector>

#include "xferscope/error.hpp"

namespace nb = nanobind;
using namespace nb::literals;
namespace batch = xferscope::batch;

namespace {

batch::BatchSpec spec_of(int device, const std::string& direction, const std::string& memory,
                         const std::vector<std::size_t>& sizes, bool scattered,
                         std::uint64_t seed) {
  batch::BatchSpec s;
  s.device = device;
  s.direction = direction;
  s.memory = memory;
  s.sizes = sizes;
  s.scattered = scattered;
  s.seed = seed;
  return s;
}

class BatchHandle {
 public:
  explicit BatchHandle(const batch::BatchSpec& spec) {
    nb::gil_scoped_release release;
    batch_ = std::make_unique<batch::Batch>(spec);
  }
  batch::Batch& get() {
    if (!batch_) throw xferscope::UsageError("this batch is closed");
    return *batch_;
  }
  void close() {
    nb::gil_scoped_release release;
    batch_.reset();
  }

 private:
  std::unique_ptr<batch::Batch> batch_;
};

}  // namespace

void bind_batch(nb::module_& m) {
  m.attr("BATCH_METHODS") = nb::cast(batch::methods());
  m.def(
      "batch_refusal",
      [](const std::string& direction, const std::string& memory,
         const std::vector<std::size_t>& sizes, const std::string& method, int driver_version,
         bool pageable_access) {
        return batch::refusal(spec_of(0, direction, memory, sizes, false, 0), method,
                              driver_version, pageable_access);
      },
      "direction"_a, "memory"_a, "sizes"_a, "method"_a, "driver_version"_a, "pageable_access"_a,
      "Why this batch cannot be made by `method` on a machine with this driver (and GPU access to "
      "pageable memory or not), or ''.");
  nb::class_<BatchHandle>(m, "Batch", "N copies between host memory and a GPU, by several methods.")
      .def(
          "__init__",
          [](BatchHandle* h, int device, const std::string& direction, const std::string& memory,
             const std::vector<std::size_t>& sizes, bool scattered, std::uint64_t seed) {
            new (h) BatchHandle(spec_of(device, direction, memory, sizes, scattered, seed));
          },
          "device"_a, "direction"_a, "memory"_a, "sizes"_a, "scattered"_a = false,
          "seed"_a = 0x5EED)
      .def(
          "time",
          [](BatchHandle& h, const std::string& method, std::int64_t iterations) {
            batch::Batch& b = h.get();
            batch::BatchTiming t;
            {
              nb::gil_scoped_release release;
              t = b.time(method, iterations);
            }
            return nb::make_tuple(t.host_s, t.device_s);
          },
          "method"_a, "iterations"_a, "(host seconds, device seconds) per batch.")
      .def(
          "verify",
          [](BatchHandle& h, const std::string& method) {
            batch::Batch& b = h.get();
            nb::gil_scoped_release release;
            return b.verify(method);
          },
          "method"_a, "Copies that arrived wrong in one batch by `method`.")
      .def_prop_ro("bytes", [](BatchHandle& h) { return h.get().bytes(); })
      .def("close", &BatchHandle::close);
}
