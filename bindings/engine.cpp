// xferscope._engine: a thin nanobind layer over the native engine. Timing loops, buffers and
// kernels stay in C++; Python only orchestrates. The GIL is released around every call that
// touches the GPU so a long trial never holds the interpreter. Results cross as read-only
// classes (the simulated engine builds the same ones), errors keep their types, and the rules
// of valid measurements (cases.hpp) and the engine's limits are exported, never retyped.
#include <cuda_runtime_api.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "arrays.hpp"
#include "handle.hpp"
#include "xferscope/buffer.hpp"
#include "xferscope/cases.hpp"
#include "xferscope/chase.hpp"
#include "xferscope/device.hpp"
#include "xferscope/error.hpp"
#include "xferscope/numa.hpp"
#include "xferscope/overlap.hpp"
#include "xferscope/pinning.hpp"
#include "xferscope/staged.hpp"
#include "xferscope/transfer.hpp"

namespace nb = nanobind;
using namespace nb::literals;
namespace xs = xferscope;
using TransferHandle = xs::bindings::Handle<xs::Transfer>;
using CopierHandle = xs::bindings::Handle<xs::StagedCopier>;
using DeviceBufferHandle = xs::bindings::Handle<xs::Buffer>;

namespace {

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
  d["clock_khz"] = info.clock_khz;
  d["async_engine_count"] = info.async_engine_count;
  d["can_map_host_memory"] = info.can_map_host_memory;
  d["unified_addressing"] = info.unified_addressing;
  d["pageable_memory_access"] = info.pageable_memory_access;
  d["host_register_read_only"] = info.host_register_read_only;
  d["managed_memory"] = info.managed_memory;
  d["concurrent_managed_access"] = info.concurrent_managed_access;
  return d;
}

template <typename Enum, std::size_t N>
nb::tuple names(const Enum (&values)[N]) {
  nb::list out;
  for (Enum value : values) out.append(std::string(xs::to_string(value)));
  return nb::tuple(out);
}

// CudaError reaches Python as xferscope._engine.CudaError with args (message, name, code), the
// CUDA error's name (cudaErrorLaunchFailure) and number, so no one parses the message.
void translate_cuda_error(const std::exception_ptr& error, void* type) {
  try {
    std::rethrow_exception(error);
  } catch (const xs::CudaError& e) {
    nb::object args = nb::make_tuple(std::string(e.what()), std::string(cudaGetErrorName(e.code())),
                                     static_cast<int>(e.code()));
    PyErr_SetObject(static_cast<PyObject*>(type), args.ptr());
  }
}

}  // namespace

void bind_gl(nb::module_& m);       // bindings/gl.cpp
void bind_gemm(nb::module_& m);     // bindings/gemm.cpp
void bind_batch(nb::module_& m);    // bindings/batch.cpp
void bind_pitch(nb::module_& m);    // bindings/pitch.cpp
void bind_pairs(nb::module_& m);    // bindings/pairs.cpp
void bind_resolve(nb::module_& m);  // bindings/resolve.cpp
void bind_copies(nb::module_& m);   // bindings/copies.cpp

NB_MODULE(_engine, m) {
  m.doc() = "xferscope native measurement engine";

  m.def("format_bytes", &xs::format_bytes, "bytes"_a,
        "A size as a person reads it: 4 KiB, 1.5 MiB, 64 MiB, 12 B.");
  nb::exception<xs::NoDeviceError>(m, "NoDeviceError", PyExc_RuntimeError);
  nb::exception<xs::AllocationError>(m, "AllocationError", PyExc_MemoryError);
  nb::exception<xs::UsageError>(m, "UsageError", PyExc_ValueError);
  nb::exception<xs::ReadError>(m, "ReadError", PyExc_OSError);
  PyObject* cuda_error =
      PyErr_NewException("xferscope._engine.CudaError", PyExc_RuntimeError, nullptr);
  m.attr("CudaError") = nb::steal(cuda_error);
  nb::register_exception_translator(translate_cuda_error, cuda_error);

  // ---- the rules and limits (cases.hpp) ----
  m.attr("DIRECTIONS") = names(xs::kAllDirections);
  m.attr("MEMORY_KINDS") = names(xs::kAllMemoryKinds);
  m.attr("MECHANISMS") = names(xs::kAllMechanisms);
  m.attr("TIMINGS") = names(xs::kAllTimings);
  nb::dict limits;
  limits["most_held_copies"] = xs::Limits::most_held_copies;
  limits["min_rotated_bytes"] = xs::Limits::min_rotated_bytes;
  limits["slot_alignment"] = xs::Limits::slot_alignment;
  limits["most_offset"] = xs::Limits::most_offset;
  limits["cache_line"] = xs::Limits::cache_line;
  limits["blocking_timeout_s"] = static_cast<double>(xs::Limits::blocking_timeout_ns) * 1e-9;
  limits["staged_direct_below"] = xs::StagedCopier::kDirectBelow;
  m.attr("LIMITS") = limits;
  m.attr("DEFAULT_SEED") = xs::Limits::default_seed;
  // the CUDA this engine was built with (13000 for 13.0): the major names the libraries it opens
  m.attr("CUDA_BUILT") = CUDART_VERSION;
  m.def(
      "refusal",
      [](const std::string& direction, const std::string& memory, const std::string& mechanism,
         std::optional<std::string> timing, bool peer_access) {
        std::optional<xs::Timing> kind;
        if (timing) kind = xs::timing_from_string(*timing);
        return xs::refusal(xs::direction_from_string(direction),
                           xs::memory_kind_from_string(memory),
                           xs::mechanism_from_string(mechanism), kind, peer_access);
      },
      "direction"_a, "memory"_a, "mechanism"_a, "timing"_a = nb::none(), "peer_access"_a = true,
      "Why the engine cannot measure this combination, or '' when it can.");
  m.def(
      "blocks_for_device_timing",
      [](const std::string& direction, const std::string& memory, const std::string& mechanism,
         bool peer_access) {
        return xs::blocks_for_device_timing(xs::direction_from_string(direction),
                                            xs::memory_kind_from_string(memory),
                                            xs::mechanism_from_string(mechanism), peer_access);
      },
      "direction"_a, "memory"_a, "mechanism"_a, "peer_access"_a = true);

  // ---- results: read-only, constructible by keyword (the simulated engine makes them too) ----
  nb::class_<xs::TrialTiming>(m, "TrialTiming", "One trial: its iterations' total time.")
      .def(
          "__init__",
          [](xs::TrialTiming* t, double seconds, std::int64_t iterations, int copies, bool blocking,
             bool timed_out, std::size_t footprint) {
            new (t) xs::TrialTiming{seconds, iterations, copies, blocking, timed_out, footprint};
          },
          "seconds"_a, "iterations"_a, "copies_per_iteration"_a, "blocking_kernel"_a,
          "blocking_timed_out"_a, "footprint_bytes"_a)
      .def_ro("seconds", &xs::TrialTiming::seconds)
      .def_ro("iterations", &xs::TrialTiming::iterations)
      .def_ro("copies_per_iteration", &xs::TrialTiming::copies_per_iteration)
      .def_ro("blocking_kernel", &xs::TrialTiming::blocking_kernel)
      .def_ro("blocking_timed_out", &xs::TrialTiming::blocking_timed_out)
      .def_ro("footprint_bytes", &xs::TrialTiming::footprint_bytes);
  nb::class_<xs::Verification>(m, "Verification", "The destination compared with the pattern.")
      .def(
          "__init__",
          [](xs::Verification* v, bool ok, std::size_t checked, std::uint64_t mismatched,
             std::int64_t first) {
            new (v) xs::Verification{ok, checked, mismatched, first};
          },
          "ok"_a, "bytes_checked"_a, "mismatched_bytes"_a, "first_mismatch"_a)
      .def_ro("ok", &xs::Verification::ok)
      .def_ro("bytes_checked", &xs::Verification::bytes_checked)
      .def_ro("mismatched_bytes", &xs::Verification::mismatched_bytes)
      .def_ro("first_mismatch", &xs::Verification::first_mismatch);
  nb::class_<xs::OverlapSample>(m, "OverlapSample", "One copy with CPU work before the wait.")
      .def(
          "__init__",
          [](xs::OverlapSample* o, double issue, double work, double wait, double total) {
            new (o) xs::OverlapSample{issue, work, wait, total};
          },
          "issue_s"_a, "work_s"_a, "wait_s"_a, "total_s"_a)
      .def_ro("issue_s", &xs::OverlapSample::issue_s)
      .def_ro("work_s", &xs::OverlapSample::work_s)
      .def_ro("wait_s", &xs::OverlapSample::wait_s)
      .def_ro("total_s", &xs::OverlapSample::total_s);
  nb::class_<xs::RotationResult>(m, "RotationResult", "A stream of chunks through N buffers.")
      .def(
          "__init__",
          [](xs::RotationResult* r, double total, double copy, double consume, double wait,
             int mismatched) {
            new (r) xs::RotationResult{total, copy, consume, wait, mismatched};
          },
          "total_s"_a, "copy_s"_a, "consume_s"_a, "wait_s"_a, "mismatched_chunks"_a)
      .def_ro("total_s", &xs::RotationResult::total_s)
      .def_ro("copy_s", &xs::RotationResult::copy_s)
      .def_ro("consume_s", &xs::RotationResult::consume_s)
      .def_ro("wait_s", &xs::RotationResult::wait_s)
      .def_ro("mismatched_chunks", &xs::RotationResult::mismatched_chunks);
  nb::class_<xs::GpuOverlapResult>(m, "GpuOverlapResult", "H2D, kernel, D2H over K streams.")
      .def(
          "__init__",
          [](xs::GpuOverlapResult* r, double h2d, double kernel, double d2h, double sequential,
             double pipelined, bool verified) {
            new (r) xs::GpuOverlapResult{h2d, kernel, d2h, sequential, pipelined, verified};
          },
          "h2d_s"_a, "kernel_s"_a, "d2h_s"_a, "sequential_s"_a, "pipelined_s"_a, "verified"_a)
      .def_ro("h2d_s", &xs::GpuOverlapResult::h2d_s)
      .def_ro("kernel_s", &xs::GpuOverlapResult::kernel_s)
      .def_ro("d2h_s", &xs::GpuOverlapResult::d2h_s)
      .def_ro("sequential_s", &xs::GpuOverlapResult::sequential_s)
      .def_ro("pipelined_s", &xs::GpuOverlapResult::pipelined_s)
      .def_ro("verified", &xs::GpuOverlapResult::verified);
  nb::class_<xs::PinningCosts>(m, "PinningCosts", "What pinning costs, per step.")
      .def(
          "__init__",
          [](xs::PinningCosts* c, double alloc, double free_, double reg, double unreg,
             double pageable, double pinned, double registered, double host) {
            new (c) xs::PinningCosts{alloc, free_, reg, unreg, pageable, pinned, registered, host};
          },
          "host_alloc_s"_a, "host_free_s"_a, "register_s"_a, "unregister_s"_a, "pageable_copy_s"_a,
          "pinned_copy_s"_a, "registered_copy_s"_a, "host_copy_s"_a)
      .def_ro("host_alloc_s", &xs::PinningCosts::host_alloc_s)
      .def_ro("host_free_s", &xs::PinningCosts::host_free_s)
      .def_ro("register_s", &xs::PinningCosts::register_s)
      .def_ro("unregister_s", &xs::PinningCosts::unregister_s)
      .def_ro("pageable_copy_s", &xs::PinningCosts::pageable_copy_s)
      .def_ro("pinned_copy_s", &xs::PinningCosts::pinned_copy_s)
      .def_ro("registered_copy_s", &xs::PinningCosts::registered_copy_s)
      .def_ro("host_copy_s", &xs::PinningCosts::host_copy_s);
  nb::class_<xs::ChaseResult>(m, "ChaseResult", "A pointer chase: ns per dependent read.")
      .def(
          "__init__",
          [](xs::ChaseResult* c, std::vector<double> ns, long long reads, std::size_t slots,
             bool verified) {
            new (c) xs::ChaseResult{std::move(ns), reads, slots, verified};
          },
          "ns_per_read"_a, "reads"_a, "slots"_a, "verified"_a)
      .def_ro("ns_per_read", &xs::ChaseResult::ns_per_read)
      .def_ro("reads", &xs::ChaseResult::reads)
      .def_ro("slots", &xs::ChaseResult::slots)
      .def_ro("verified", &xs::ChaseResult::verified);
  nb::class_<xs::StagedPlan>(m, "StagedPlan", "What a staged copier chose, and why.")
      .def(
          "__init__",
          [](xs::StagedPlan* p, int threads, std::size_t chunk, int buffers,
             std::size_t direct_below, double single, double target,
             const std::string& explanation) {
            new (p)
                xs::StagedPlan{threads, chunk, buffers, direct_below, single, target, explanation};
          },
          "threads"_a, "chunk_bytes"_a, "buffers_per_thread"_a, "direct_below"_a,
          "single_thread_copy_bps"_a, "target_bps"_a, "explanation"_a)
      .def_ro("threads", &xs::StagedPlan::threads)
      .def_ro("chunk_bytes", &xs::StagedPlan::chunk_bytes)
      .def_ro("buffers_per_thread", &xs::StagedPlan::buffers_per_thread)
      .def_ro("direct_below", &xs::StagedPlan::direct_below)
      .def_ro("single_thread_copy_bps", &xs::StagedPlan::single_thread_copy_bps)
      .def_ro("target_bps", &xs::StagedPlan::target_bps)
      .def_ro("explanation", &xs::StagedPlan::explanation);

  {
    nb::list staged;
    for (xs::MemoryKind kind : xs::kAllMemoryKinds) {
      if (xs::staged_by_driver(kind)) staged.append(std::string(xs::to_string(kind)));
    }
    m.attr("DRIVER_STAGED_KINDS") = staged;
  }
  m.def("keep_buffers", &xs::keep_buffers, "on"_a,
        "While on, large buffers released are kept for the next allocation of the same kind, GPU "
        "and size; off frees them and returns how many were handed out again.");

  // ---- devices ----
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

  // ---- measuring ----
  nb::class_<TransferHandle>(m, "Transfer")
      .def(
          "__init__",
          [](TransferHandle* h, int device, const std::string& direction, const std::string& memory,
             const std::string& mechanism, std::size_t capacity, std::size_t rotation_bytes,
             bool rotate, int peer, bool peer_access, int staged_threads,
             std::size_t staged_chunk_bytes, std::size_t host_offset, std::size_t device_offset,
             std::size_t staged_direct_below) {
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
            spec.staged_direct_below = staged_direct_below;
            spec.host_offset = host_offset;
            spec.device_offset = device_offset;
            xs::device_info(device);  // a clear NoDeviceError for a bad index, before allocating
            new (h) TransferHandle("transfer", nullptr, spec);
          },
          "device"_a, "direction"_a, "memory"_a, "mechanism"_a, "capacity"_a,
          "rotation_bytes"_a = 0, "rotate"_a = true, "peer"_a = -1, "peer_access"_a = true,
          "staged_threads"_a = 0, "staged_chunk_bytes"_a = 0, "host_offset"_a = 0,
          "device_offset"_a = 0, "staged_direct_below"_a = xs::StagedCopier::kDirectBelow)
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
            nb::gil_scoped_release release;
            return t.time(kind, bytes, iterations);
          },
          "timing"_a, "bytes"_a, "iterations"_a)
      .def(
          "verify",
          [](TransferHandle& h, std::size_t bytes, bool inject_fault) {
            xs::Transfer& t = h.get();
            nb::gil_scoped_release release;
            return t.verify(bytes, inject_fault);
          },
          "bytes"_a, "inject_fault"_a = false)
      .def(
          "overlap_cpu",
          [](TransferHandle& h, std::size_t bytes, double work_s) {
            xs::Transfer& t = h.get();
            nb::gil_scoped_release release;
            return t.overlap_cpu(bytes, work_s);
          },
          "bytes"_a, "work_s"_a)
      .def(
          "inject_copy_failure", [](TransferHandle& h) { h.get().inject_copy_failure(); },
          "The next copy fails with a real CUDA error (for tests of the error paths).")
      .def_prop_ro("staged_plan",
                   [](TransferHandle& h) -> std::optional<xs::StagedPlan> {
                     const xs::StagedCopier* c = h.get().staged();
                     if (c == nullptr) return std::nullopt;
                     return c->plan();
                   })
      .def(
          "host_node", [](TransferHandle& h) { return h.get().host_node(); },
          "The NUMA node the host buffer's first page is on; -1 when unknown or none.")
      .def("close", &TransferHandle::close);

  nb::class_<CopierHandle>(m, "StagedCopier")
      .def(
          "__init__",
          [](CopierHandle* h, int device, int threads, std::size_t chunk_bytes, double target_bps,
             std::size_t direct_below) {
            xs::device_info(device);
            new (h) CopierHandle("staged copier", nullptr, device, threads, chunk_bytes, target_bps,
                                 direct_below);
          },
          "device"_a, "threads"_a = 0, "chunk_bytes"_a = 0, "target_bps"_a = 0.0,
          "direct_below"_a = xs::StagedCopier::kDirectBelow)
      .def_prop_ro("plan", [](CopierHandle& h) { return h.get().plan(); })
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

  nb::class_<DeviceBufferHandle>(m, "DeviceBuffer")
      .def(
          "__init__",
          [](DeviceBufferHandle* h, int device, std::size_t bytes) {
            xs::device_info(device);
            new (h) DeviceBufferHandle("device buffer", nullptr,
                                       xs::Buffer::allocate(xs::MemoryKind::device, bytes, device));
          },
          "device"_a, "bytes"_a,
          "`bytes` of device memory on GPU `device` (cudaMalloc), freed by close(): where a "
          "checkpoint's files are read to without a framework.")
      .def_prop_ro(
          "address",
          [](DeviceBufferHandle& h) { return reinterpret_cast<std::uintptr_t>(h.get().device()); })
      .def_prop_ro("bytes", [](DeviceBufferHandle& h) { return h.get().size(); })
      .def("close", &DeviceBufferHandle::close);

  m.def(
      "read_ranges",
      [](int fd, xs::bindings::Addresses file_offsets, xs::bindings::Addresses sizes) {
        if (sizes.shape(0) != file_offsets.shape(0))
          throw xs::UsageError("read_ranges: file_offsets and sizes differ in length");
        nb::gil_scoped_release release;
        xs::read_ranges(fd, file_offsets.data(), reinterpret_cast<const std::size_t*>(sizes.data()),
                        file_offsets.shape(0));
      },
      "fd"_a, "file_offsets"_a, "sizes"_a,
      "Reads the ranges of the open file `fd` and keeps nothing, as StagedCopier.read_to_device "
      "reads them (ReadError alike): the simulated engine's reads.");
  m.def(
      "rotate_buffers",
      [](int device, bool upload, int buffers, std::size_t chunk_bytes, int chunks) {
        xs::device_info(device);
        nb::gil_scoped_release release;
        return xs::rotate_buffers(device, upload, buffers, chunk_bytes, chunks);
      },
      "device"_a, "upload"_a, "buffers"_a, "chunk_bytes"_a, "chunks"_a);
  m.def(
      "overlap_gpu",
      [](int device, std::size_t bytes, int streams, int chunks, int work) {
        xs::device_info(device);
        nb::gil_scoped_release release;
        return xs::overlap_gpu(device, bytes, streams, chunks, work);
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
        nb::gil_scoped_release release;
        return xs::measure_pinning(device, bytes);
      },
      "device"_a, "bytes"_a);
  {
    nb::dict limits;
    limits["lap"] = xs::kChaseLap;
    limits["trial_s"] = xs::kChaseTrialS;
    limits["least_reads"] = xs::kChaseLeastReads;
    limits["most_reads"] = xs::kChaseMostReads;
    m.attr("CHASE_LIMITS") = limits;
  }
  m.def("bind_memory", &xs::bind_memory, "node"_a,
        "The calling thread's new pages come from NUMA node `node` only; -1: the default.");
  m.def(
      "chase_refusal",
      [](const std::string& memory, bool remote, std::size_t bytes, std::size_t stride,
         long long reads, int trials) {
        return xs::chase_refusal(xs::memory_kind_from_string(memory), remote, bytes, stride, reads,
                                 trials);
      },
      "memory"_a, "remote"_a, "bytes"_a, "stride"_a, "reads"_a, "trials"_a,
      "Why this chase cannot be made, or '' (chase.hpp).");
  m.def(
      "chase",
      [](int device, const std::string& memory, std::size_t bytes, std::size_t stride,
         long long reads, int trials, int peer, std::uint64_t seed) {
        xs::device_info(device);
        if (peer >= 0) xs::device_info(peer);
        const xs::MemoryKind kind = xs::memory_kind_from_string(memory);
        nb::gil_scoped_release release;
        return xs::chase(device, kind, bytes, stride, reads, trials, peer, seed);
      },
      "device"_a, "memory"_a, "bytes"_a, "stride"_a, "reads"_a, "trials"_a, "peer"_a = -1,
      "seed"_a = 42, "A pointer chase through `memory` read by `device` (chase.hpp).");
  m.def(
      "can_access_peer",
      [](int device, int peer) {
        int can = 0;
        XFS_CUDA_CALL(cudaDeviceCanAccessPeer(&can, device, peer));
        return can != 0;
      },
      "device"_a, "peer"_a);

  bind_gl(m);
  bind_gemm(m);
  bind_batch(m);
  bind_pitch(m);
  bind_pairs(m);
  bind_resolve(m);
  bind_copies(m);
}
