// xferscope._engine's batch part (batch.hpp, many.hpp): the methods, their refusals, a batch
// handle; pointer kinds and the copier of xferscope.copy_many.
#include "xferscope/batch.hpp"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "handle.hpp"
#include "xferscope/error.hpp"
#include "xferscope/many.hpp"

namespace nb = nanobind;
using namespace nb::literals;
namespace batch = xferscope::batch;
using BatchHandle = xferscope::bindings::Handle<batch::Batch>;
using ManyHandle = xferscope::bindings::Handle<batch::ManyCopier>;
using xferscope::bindings::Addresses;
using xferscope::bindings::array_of;

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

}  // namespace

void bind_batch(nb::module_& m) {
  m.def(
      "classify_pointers",
      [](Addresses addresses) {
        std::vector<batch::PointerInfo> kinds;
        {
          nb::gil_scoped_release release;
          static_assert(sizeof(std::uint64_t) == sizeof(std::uintptr_t));
          kinds = batch::classify(reinterpret_cast<const std::uintptr_t*>(addresses.data()),
                                  addresses.shape(0));
        }
        std::vector<std::int8_t> kind(kinds.size());
        std::vector<std::int32_t> device(kinds.size());
        std::vector<std::uint64_t> mapped(kinds.size());
        for (std::size_t i = 0; i < kinds.size(); ++i) {
          kind[i] = static_cast<std::int8_t>(kinds[i].kind);
          device[i] = kinds[i].device;
          mapped[i] = kinds[i].mapped;
        }
        return nb::make_tuple(array_of(std::move(kind)), array_of(std::move(device)),
                              array_of(std::move(mapped)));
      },
      "addresses"_a,
      "(kind, device, mapped) arrays for the addresses: kind 0 pageable, 1 pinned, 2 device, "
      "3 managed; the GPU of device and managed memory (-1: none); the address pinned memory "
      "has on the GPU (0: none).");
  nb::class_<ManyHandle>(m, "ManyCopier", "Copies many of the caller's buffers at once.")
      .def(
          "__init__",
          [](ManyHandle* h, int device) { new (h) ManyHandle("copier", nullptr, device); },
          "device"_a)
      .def_prop_ro("device", [](ManyHandle& h) { return h.get().device(); })
      .def(
          "copy",
          [](ManyHandle& h, const std::string& method, bool upload, Addresses destinations,
             Addresses sources, Addresses sizes, bool pinned, std::optional<Addresses> mapped) {
            const std::size_t n = destinations.shape(0);
            if (sources.shape(0) != n || sizes.shape(0) != n || (mapped && mapped->shape(0) != n)) {
              throw xferscope::UsageError(
                  "copy_many: the address and size arrays differ in length");
            }
            batch::ManyCopier& c = h.get();
            nb::gil_scoped_release release;
            // measured as asked: the staged copier made first, not the loop while it is made
            if (method == "staged") c.prepare_staged();
            return c.copy(
                method, upload, reinterpret_cast<const std::uintptr_t*>(destinations.data()),
                reinterpret_cast<const std::uintptr_t*>(sources.data()),
                reinterpret_cast<const std::size_t*>(sizes.data()), n, pinned,
                mapped ? reinterpret_cast<const std::uintptr_t*>(mapped->data()) : nullptr);
          },
          "method"_a, "upload"_a, "destinations"_a, "sources"_a, "sizes"_a, "pinned"_a,
          "mapped"_a = nb::none())
      .def(
          "prepare_staged",
          [](ManyHandle& h) {
            batch::ManyCopier& c = h.get();
            nb::gil_scoped_release release;
            c.prepare_staged();
          },
          "Makes the staged copy's threads and pinned chunks now, or waits for their making.")
      .def(
          "read_to_device",
          [](ManyHandle& h, int fd, std::uintptr_t device_destination, Addresses file_offsets,
             Addresses sizes, Addresses offsets, int readers) {
            const std::size_t n = file_offsets.shape(0);
            if (sizes.shape(0) != n || offsets.shape(0) != n)
              throw xferscope::UsageError(
                  "read_to_device: file_offsets, sizes and offsets differ in length");
            batch::ManyCopier& c = h.get();
            nb::gil_scoped_release release;
            static_assert(sizeof(std::size_t) == sizeof(std::uint64_t));
            c.read_to_device(fd, reinterpret_cast<void*>(device_destination), file_offsets.data(),
                             reinterpret_cast<const std::size_t*>(sizes.data()),
                             reinterpret_cast<const std::size_t*>(offsets.data()), n, readers);
          },
          "fd"_a, "device_destination"_a, "file_offsets"_a, "sizes"_a, "offsets"_a, "readers"_a = 0,
          "Ranges of the open file `fd` read with pread into the staged copy's pinned chunks "
          "and copied to offsets of the device range; ReadError for a failed or short read. "
          "readers (0: every thread): that many threads read, in larger chunks (a cold file).")
      .def(
          "staged_ready", [](ManyHandle& h) { return h.get().staged_ready(); },
          "Whether the staged copy's threads and chunks are made (its batches go staged).")
      .def(
          "finish",
          [](ManyHandle& h) {
            batch::ManyCopier& c = h.get();
            nb::gil_scoped_release release;
            c.finish();
          },
          "Returns once every copy this copier queued without waiting has landed.")
      .def(
          "pinned_bytes", [](ManyHandle& h) { return h.get().pinned_bytes(); },
          "Pinned host memory this copier holds for later calls.")
      .def("close", &ManyHandle::close);

  m.attr("BATCH_METHODS") = nb::cast(batch::methods());
  m.attr("COPY_MANY_METHODS") = nb::cast(batch::copy_many_methods());
  m.def("batch_host_timed", &batch::host_timed, "method"_a,
        "Whether a batch method's device time is its host time (its own streams).");
  m.def("staging_bytes", &batch::staging_bytes, "bytes"_a,
        "The pinned staging a copy_many copier holds for a batch needing `bytes`.");
  m.def(
      "copy_many_refusal",
      [](const std::string& direction, const std::string& memory,
         const std::vector<std::size_t>& sizes, const std::string& method, int driver_version) {
        return batch::copy_many_refusal(spec_of(0, direction, memory, sizes, false, 0), method,
                                        driver_version);
      },
      "direction"_a, "memory"_a, "sizes"_a, "method"_a, "driver_version"_a,
      "Why copy_many cannot make this batch by `method`, or ''.");
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
            new (h) BatchHandle("batch", nullptr,
                                spec_of(device, direction, memory, sizes, scattered, seed));
          },
          "device"_a, "direction"_a, "memory"_a, "sizes"_a, "scattered"_a = false,
          "seed"_a = xferscope::Limits::default_seed)
      .def(
          "time",
          [](BatchHandle& h, const std::string& method, std::int64_t iterations,
             bool as_copy_many) {
            batch::Batch& b = h.get();
            batch::BatchTiming t;
            {
              nb::gil_scoped_release release;
              t = b.time(method, iterations, as_copy_many);
            }
            return nb::make_tuple(t.host_s, t.device_s);
          },
          "method"_a, "iterations"_a, "as_copy_many"_a = false,
          "(host seconds, device seconds) per batch.")
      .def(
          "verify",
          [](BatchHandle& h, const std::string& method, bool as_copy_many) {
            batch::Batch& b = h.get();
            nb::gil_scoped_release release;
            return b.verify(method, as_copy_many);
          },
          "method"_a, "as_copy_many"_a = false,
          "Copies that arrived wrong in one batch by `method`.")
      .def_prop_ro("bytes", [](BatchHandle& h) { return h.get().bytes(); })
      .def("close", &BatchHandle::close);
}
