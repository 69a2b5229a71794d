// xferscope._engine: a thin nanobind layer over the native engine. Timing loops, buffers and
// kernels stay in C++; Python only orchestrates. The GIL is released around every call that
// touches the GPU so a long trial never holds the interpreter.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <optional>
#include <string>

#include "xferscope/device.hpp"
#include "xferscope/error.hpp"
#include "xferscope/overlap.hpp"
#include "xferscope/pinning.hpp"
#include "xferscope/staged.hpp"
#include "xferscope/transfer.hpp"

namespace nb = nanobind;
using namespace nb::literals;
namespace xs = xferscope;

namespace {

// Releases the GIL around freeing native resources, unless the interpreter is finalizing: there
// a release and re-acquire aborts the process ("PyThreadState_Get: ... finalizing"), and no
// other Python thread can run anyway. The CLI closes everything before it exits; this keeps a
// library user's leftover transfer or copier from crashing the interpreter's teardown.
class ReleaseUnlessFinalizing {
 public:
  ReleaseUnlessFinalizing() {
#if PY_VERSION_HEX >= 0x030D0000
    const bool finalizing = Py_IsFinalizing();
#else
    const bool finalizing = _Py_IsFinalizing();
#endif
    if (!finalizing) release_.emplace();
  }

 private:
  std::optional<nb::gil_scoped_release> release_;
};

// Owns a Transfer until close(), so Python frees pinned and device memory at a point it
// chooses (a `with` block) rather than whenever the garbage collector runs.
class TransferHandle {
 public:
  TransferHandle(int device, const std::string& direction, const std::string& memory,
                 const std::string& mechanism, std::size_t capacity, std::size_t rotation_bytes,
                 bool rotate, int peer, bool peer_access, int staged_threads,
                 std::size_t staged_chunk_bytes) {
    xs::TransferSpec spec;
    spec.device = device;
    spec.direction = xs::direction_from_string(direction);
    spec.host_memory = xs::memory_kind_from_string(memory);
    spec.mechanism = xs::mechanism_from_string(mechanism);
    spec.capacity = capacity;
    spec.rotation_bytes = rotation_bytes;
    spec.rotate = rotate;
    spec.peer = peer;
    spec.peer_access = peer_access;
    spec.staged_threads = staged_threads;
    spec.staged_chunk_bytes = staged_chunk_bytes;
    xs::device_info(device);  // a clear NoDeviceError for a bad index, before any allocation
    nb::gil_scoped_release release;
    transfer_ = std::make_unique<xs::Transfer>(spec);
  }

  xs::Transfer& get() {
    if (!transfer_) throw xs::UsageError("this transfer is closed");
    return *transfer_;
  }

  void close() {
    ReleaseUnlessFinalizing release;
    transfer_.reset();
  }

 private:
  std::unique_ptr<xs::Transfer> transfer_;
};

// Owns a StagedCopier until close(), like TransferHandle.
class CopierHandle {
 public:
  CopierHandle(int device, int threads, std::size_t chunk_bytes, double target_bps) {
    xs::device_info(device);
    nb::gil_scoped_release release;
    copier_ = std::make_unique<xs::StagedCopier>(device, threads, chunk_bytes, target_bps);
  }
  xs::StagedCopier& get() {
    if (!copier_) throw xs::UsageError("this staged copier is closed");
    return *copier_;
  }
  void close() {
    ReleaseUnlessFinalizing release;
    copier_.reset();
  }

 private:
  std::unique_ptr<xs::StagedCopier> copier_;
};

nb::dict plan_dict(const xs::StagedPlan& p) {
  nb::dict d;
  d["threads"] = p.threads;
  d["chunk_bytes"] = p.chunk_bytes;
  d["buffers_per_thread"] = p.buffers_per_thread;
  d["single_thread_copy_bps"] = p.single_thread_copy_bps;
  d["target_bps"] = p.target_bps;
  d["explanation"] = p.explanation;
  return d;
}

nb::dict to_dict(const xs::DeviceInfo& info) {
  nb::dict d;
  d["index"] = info.index;
  d["name"] = info.name;
  d["uuid"] = info.uuid;
  d["pci_bus_id"] = info.pci_bus_id;
  d["compute_capability"] =
      std::to_string(info.compute_major) + "." + std::to_string(info.compute_minor);
  d["sm_count"] = info.sm_count;
  d["total_memory_bytes"] = info.total_memory_bytes;
  d["l2_cache_bytes"] = info.l2_cache_bytes;
  d["memory_bus_width_bits"] = info.memory_bus_width_bits;
  d["memory_clock_khz"] = info.memory_clock_khz;
  d["async_engine_count"] = info.async_engine_count;
  d["can_map_host_memory"] = info.can_map_host_memory;
  d["unified_addressing"] = info.unified_addressing;
  d["pageable_memory_access"] = info.pageable_memory_access;
  return d;
}

}  // namespace

NB_MODULE(_engine, m) {
  m.doc() = "xferscope native measurement engine";

  nb::exception<xs::CudaError>(m, "CudaError", PyExc_RuntimeError);
  nb::exception<xs::NoDeviceError>(m, "NoDeviceError", PyExc_RuntimeError);
  nb::exception<xs::AllocationError>(m, "AllocationError", PyExc_MemoryError);
  nb::exception<xs::UsageError>(m, "UsageError", PyExc_ValueError);

  m.def("device_count", &xs::device_count, "Number of CUDA devices; NoDeviceError if none.");
  m.def(
      "device_info", [](int index) { return to_dict(xs::device_info(index)); }, "index"_a);
  m.def(
      "memory_info",
      [](int index) {
        std::size_t free_bytes = 0, total_bytes = 0;
        xs::memory_info(index, free_bytes, total_bytes);
        return std::make_tuple(free_bytes, total_bytes);
      },
      "index"_a, "(free, total) device memory in bytes.");
  m.def("runtime_version", &xs::runtime_version);
  m.def("driver_version", &xs::driver_version);

  nb::class_<TransferHandle>(m, "Transfer")
      .def(nb::init<int, const std::string&, const std::string&, const std::string&, std::size_t,
                    std::size_t, bool, int, bool, int, std::size_t>(),
           "device"_a, "direction"_a, "memory"_a, "mechanism"_a, "capacity"_a,
           "rotation_bytes"_a = 0, "rotate"_a = true, "peer"_a = -1, "peer_access"_a = true,
           "staged_threads"_a = 0, "staged_chunk_bytes"_a = 0)
      .def_prop_ro("copies_per_iteration",
                   [](TransferHandle& h) { return h.get().copies_per_iteration(); })
      .def_prop_ro("blocks_for_device_timing",
                   [](TransferHandle& h) { return h.get().blocks_for_device_timing(); })
      .def(
          "fill",
          [](TransferHandle& h, std::uint64_t seed) {
            xs::Transfer& t = h.get();
            nb::gil_scoped_release release;
            t.fill(seed);
          },
          "seed"_a)
      .def(
          "time",
          [](TransferHandle& h, const std::string& timing, std::size_t bytes,
             std::int64_t iterations) {
            xs::Transfer& t = h.get();
            const xs::Timing kind = xs::timing_from_string(timing);
            xs::TrialTiming r;
            {
              nb::gil_scoped_release release;
              r = t.time(kind, bytes, iterations);
            }
            nb::dict d;
            d["seconds"] = r.seconds;
            d["iterations"] = r.iterations;
            d["copies_per_iteration"] = r.copies_per_iteration;
            d["blocking_kernel"] = r.blocking_kernel;
            d["blocking_timed_out"] = r.blocking_timed_out;
            d["footprint_bytes"] = r.footprint_bytes;
            return d;
          },
          "timing"_a, "bytes"_a, "iterations"_a)
      .def(
          "verify",
          [](TransferHandle& h, std::size_t bytes, bool inject_fault) {
            xs::Transfer& t = h.get();
            xs::Verification v;
            {
              nb::gil_scoped_release release;
              v = t.verify(bytes, inject_fault);
            }
            nb::dict d;
            d["ok"] = v.ok;
            d["bytes_checked"] = v.bytes_checked;
            d["mismatched_bytes"] = v.mismatched_bytes;
            d["first_mismatch"] = v.first_mismatch;
            return d;
          },
          "bytes"_a, "inject_fault"_a = false)
      .def(
          "overlap_cpu",
          [](TransferHandle& h, std::size_t bytes, double work_s) {
            xs::Transfer& t = h.get();
            xs::OverlapSample o;
            {
              nb::gil_scoped_release release;
              o = t.overlap_cpu(bytes, work_s);
            }
            nb::dict d;
            d["issue_s"] = o.issue_s;
            d["work_s"] = o.work_s;
            d["wait_s"] = o.wait_s;
            d["total_s"] = o.total_s;
            return d;
          },
          "bytes"_a, "work_s"_a)
      .def_prop_ro("staged_plan",
                   [](TransferHandle& h) -> nb::object {
                     const xs::StagedCopier* c = h.get().staged();
                     return c == nullptr ? nb::none() : nb::object(plan_dict(c->plan()));
                   })
      .def("close", &TransferHandle::close);

  nb::class_<CopierHandle>(m, "StagedCopier")
      .def(nb::init<int, int, std::size_t, double>(), "device"_a, "threads"_a = 0,
           "chunk_bytes"_a = 0, "target_bps"_a = 0.0)
      .def_prop_ro("plan", [](CopierHandle& h) { return plan_dict(h.get().plan()); })
      .def(
          "to_device",
          [](CopierHandle& h, std::uintptr_t device_destination, std::uintptr_t host_source,
             std::size_t bytes) {
            xs::StagedCopier& c = h.get();
            nb::gil_scoped_release release;
            c.to_device(reinterpret_cast<void*>(device_destination),
                        reinterpret_cast<const void*>(host_source), bytes);
          },
          "device_destination"_a, "host_source"_a, "bytes"_a)
      .def(
          "to_host",
          [](CopierHandle& h, std::uintptr_t host_destination, std::uintptr_t device_source,
             std::size_t bytes) {
            xs::StagedCopier& c = h.get();
            nb::gil_scoped_release release;
            c.to_host(reinterpret_cast<void*>(host_destination),
                      reinterpret_cast<const void*>(device_source), bytes);
          },
          "host_destination"_a, "device_source"_a, "bytes"_a)
      .def("close", &CopierHandle::close);

  m.def(
      "rotate_buffers",
      [](int device, bool upload, int buffers, std::size_t chunk_bytes, int chunks) {
        xs::device_info(device);
        xs::RotationResult r;
        {
          nb::gil_scoped_release release;
          r = xs::rotate_buffers(device, upload, buffers, chunk_bytes, chunks);
        }
        nb::dict d;
        d["total_s"] = r.total_s;
        d["copy_s"] = r.copy_s;
        d["consume_s"] = r.consume_s;
        d["wait_s"] = r.wait_s;
        d["mismatched_chunks"] = r.mismatched_chunks;
        return d;
      },
      "device"_a, "upload"_a, "buffers"_a, "chunk_bytes"_a, "chunks"_a);
  m.def(
      "overlap_gpu",
      [](int device, std::size_t bytes, int streams, int chunks, int work) {
        xs::device_info(device);
        xs::GpuOverlapResult r;
        {
          nb::gil_scoped_release release;
          r = xs::overlap_gpu(device, bytes, streams, chunks, work);
        }
        nb::dict d;
        d["h2d_s"] = r.h2d_s;
        d["kernel_s"] = r.kernel_s;
        d["d2h_s"] = r.d2h_s;
        d["sequential_s"] = r.sequential_s;
        d["pipelined_s"] = r.pipelined_s;
        d["verified"] = r.verified;
        return d;
      },
      "device"_a, "bytes"_a, "streams"_a, "chunks"_a, "work"_a);

  m.def(
      "time_concurrently",
      [](std::vector<TransferHandle*> handles, std::size_t bytes, std::int64_t iterations) {
        std::vector<xs::Transfer*> transfers;
        for (TransferHandle* h : handles) transfers.push_back(&h->get());
        bool timed_out = false;
        std::vector<double> seconds;
        {
          nb::gil_scoped_release release;
          seconds = xs::time_concurrently(transfers, bytes, iterations, timed_out);
        }
        return std::make_tuple(seconds, timed_out);
      },
      "transfers"_a, "bytes"_a, "iterations"_a,
      "Runs every transfer at once; returns (device seconds of each, blocking timed out).");
  m.def(
      "measure_pinning",
      [](int device, std::size_t bytes) {
        xs::device_info(device);
        xs::PinningCosts c;
        {
          nb::gil_scoped_release release;
          c = xs::measure_pinning(device, bytes);
        }
        nb::dict d;
        d["host_alloc_s"] = c.host_alloc_s;
        d["host_free_s"] = c.host_free_s;
        d["register_s"] = c.register_s;
        d["unregister_s"] = c.unregister_s;
        d["pageable_copy_s"] = c.pageable_copy_s;
        d["pinned_copy_s"] = c.pinned_copy_s;
        d["registered_copy_s"] = c.registered_copy_s;
        d["host_copy_s"] = c.host_copy_s;
        return d;
      },
      "device"_a, "bytes"_a);
  m.def(
      "can_access_peer",
      [](int device, int peer) {
        int can = 0;
        XFS_CUDA_CALL(cudaDeviceCanAccessPeer(&can, device, peer));
        return can != 0;
      },
      "device"_a, "peer"_a);
}
