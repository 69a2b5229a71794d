// Many small copies by one of several methods (batch.hpp): buffers laid out once, the pointer
// tables the kernels read uploaded once, a CUDA graph captured on first use.
#include "xferscope/batch.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "batch/batch_api.hpp"
#include "batch/kernels.hpp"
#include "xferscope/detail/handles.hpp"
#include "xferscope/error.hpp"
#include "xferscope/many.hpp"

namespace xferscope::batch {

namespace {

constexpr int kBatchApiVersion = 12080;  // cudaMemcpyBatchAsync: CUDA 12.8

int driver_version() {
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess) cudaGetLastError();
  return v;
}

bool pageable_access(int device) {
  int v = 0;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrPageableMemoryAccess, device) != cudaSuccess)
    cudaGetLastError();
  return v != 0;
}

}  // namespace

const std::vector<std::string>& methods() {
  static const std::vector<std::string> all = {"loop", "batch-stream", "batch-call", "batch-any",
                                               "pack", "staged",       "kernel",     "graph"};
  return all;
}

const std::vector<std::string>& copy_many_methods() {
  static const std::vector<std::string> all = [] {
    std::vector<std::string> m;
    for (const std::string& method : methods())
      if (method != "graph") m.push_back(method);  // a graph pays only when copies repeat
    return m;
  }();
  return all;
}

bool host_timed(const std::string& method) { return method == "staged"; }

std::string copy_many_refusal(const BatchSpec& s, const std::string& method, int driver) {
  if (std::find(copy_many_methods().begin(), copy_many_methods().end(), method) ==
      copy_many_methods().end()) {
    return "copy_many makes no " + method + " (a graph pays only when the same copies repeat)";
  }
  if (s.direction == "d2d") return "copy_many copies between host memory and a GPU";
  if (method == "kernel" && s.memory != "pinned") {
    return "copy_many's kernel needs pinned host memory mapped into the GPU";
  }
  return refusal(s, method, driver, false);
}

std::string refusal(const BatchSpec& s, const std::string& method, int driver, bool pageable) {
  if (std::find(methods().begin(), methods().end(), method) == methods().end()) {
    return "unknown method '" + method + "'";
  }
  if (s.direction != "h2d" && s.direction != "d2h" && s.direction != "d2d")
    return "direction must be h2d, d2h or d2d";
  if (s.direction == "d2d" && s.memory != "device")
    return "a device-to-device batch has device memory at both ends (memory 'device')";
  if (s.direction != "d2d" && s.memory != "pinned" && s.memory != "pageable")
    return "host memory must be pinned or pageable";
  if (s.sizes.empty()) return "a batch needs at least one copy";
  if (std::find(s.sizes.begin(), s.sizes.end(), std::size_t{0}) != s.sizes.end()) {
    return "every copy needs at least one byte";
  }
  if (method.rfind("batch-", 0) == 0 && driver < kBatchApiVersion) {
    return "cudaMemcpyBatchAsync needs a CUDA 12.8 driver or newer; this one is " +
           std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10);
  }
  if (method == "kernel" && s.memory == "pageable" && !pageable) {
    return "a GPU kernel cannot reach pageable host memory on this system (no HMM or ATS)";
  }
  if (method == "graph" && s.memory == "pageable") {
    return "a CUDA graph's copies need pinned host memory";
  }
  if ((method == "pack" || method == "staged") && s.direction == "d2d") {
    return "packing through host staging is for copies to or from host memory";
  }
  if (method == "staged" && s.memory == "pinned") {
    return "the staged copy is for pageable host memory (pinned memory goes to the copy engines "
           "directly)";
  }
  return "";
}

struct Batch::Impl {
  BatchSpec s;
  std::vector<std::size_t> offsets, staged;  // each piece's place in the buffers, in staging
  std::size_t span = 0, total = 0;           // the buffers' span; the bytes a batch moves
  std::size_t packed_span = 0;               // pack's staging, with each piece's alignment padding
  char* host = nullptr;                      // pinned or pageable; d2d: the source's device memory
  char* device = nullptr;
  char* host_staging = nullptr;  // pack: pinned
  char* device_staging = nullptr;
  kernels::Piece* scatter = nullptr;  // device tables: pack's scatter or gather, the SM copy
  kernels::Piece* direct = nullptr;
  std::size_t scatter_entries = 0, direct_entries = 0;  // large pieces are cut into parts
  std::vector<void*> dsts;
  std::vector<const void*> srcs;
  cudaGraphExec_t graph = nullptr;
  std::unique_ptr<ManyCopier> copier;  // as_copy_many: made on first use
  detail::Stream stream;
  detail::Event start, stop;

  bool up() const { return s.direction == "h2d"; }
  bool d2d() const { return s.direction == "d2d"; }
  bool d2h() const { return s.direction == "d2h"; }
  cudaMemcpyKind kind() const { return loop_kind(up(), d2h()); }

  // A method this batch cannot be made by (as copy_many makes it, or as the batch study does)
  // is a UsageError with the reason.
  void refuse(const std::string& method, bool as_copy_many) const {
    const std::string reason =
        as_copy_many ? copy_many_refusal(s, method, driver_version())
                     : refusal(s, method, driver_version(), pageable_access(s.device));
    if (!reason.empty()) throw UsageError(reason);
  }

  void allocate_device(char*& p, std::size_t bytes) {
    if (cudaMalloc(reinterpret_cast<void**>(&p), bytes) != cudaSuccess) {
      cudaGetLastError();
      p = nullptr;
      throw AllocationError("device", bytes, "batch buffers");
    }
  }
  void allocate_pinned(char*& p, std::size_t bytes) {
    if (cudaMallocHost(reinterpret_cast<void**>(&p), bytes) != cudaSuccess) {
      cudaGetLastError();
      p = nullptr;
      throw AllocationError("pinned", bytes, "batch buffers");
    }
  }

  void setup() {
    XFS_CUDA_CALL(cudaSetDevice(s.device));
    stream = detail::Stream::create();
    start = detail::Event::create();
    stop = detail::Event::create();
    std::size_t at = 0, packed = 0;
    for (std::size_t size : s.sizes) {
      offsets.push_back(at);
      // in pack's staging, as far past 16 bytes as the device end (which starts at `at`)
      packed = kernels::packed_at(packed, reinterpret_cast<const void*>(at));
      staged.push_back(packed);
      // 256-byte aligned starts, as cudaMalloc gives; a scattered piece leaves a gap its size
      at += (size + 255) / 256 * 256 * (s.scattered ? 2 : 1);
      packed += size;
      total += size;
    }
    span = at;
    packed_span = packed;
    if (d2d()) {
      allocate_device(host, span);
    } else if (s.memory == "pinned") {
      allocate_pinned(host, span);
    } else {
      host = static_cast<char*>(std::aligned_alloc(4096, (span + 4095) / 4096 * 4096));
      if (!host) throw AllocationError("pageable", span, "batch buffers");
      std::memset(host, 0, span);
    }
    allocate_device(device, span);
    for (std::size_t i = 0; i < s.sizes.size(); ++i) {
      char* h = host + offsets[i];
      char* d = device + offsets[i];
      // d2d: from the first device buffer (`host`) to the second
      dsts.push_back(up() || d2d() ? static_cast<void*>(d) : h);
      srcs.push_back(up() || d2d() ? static_cast<const void*>(h) : d);
    }
  }

  // pack's staging buffers and tables, the SM copy's table: made on first use
  void prepare_pack() {
    if (host_staging) return;
    allocate_pinned(host_staging, packed_span);
    allocate_device(device_staging, packed_span);
    std::vector<kernels::Piece> table;
    for (std::size_t i = 0; i < s.sizes.size(); ++i) {
      char* d = device + offsets[i];
      char* staging = device_staging + staged[i];
      if (up()) {
        kernels::add(table, staging, d, s.sizes[i]);
      } else {
        kernels::add(table, d, staging, s.sizes[i]);
      }
    }
    upload_table(scatter, table);
    scatter_entries = table.size();
  }
  void prepare_direct() {
    if (direct) return;
    std::vector<kernels::Piece> table;
    for (std::size_t i = 0; i < s.sizes.size(); ++i)
      kernels::add(table, srcs[i], dsts[i], s.sizes[i]);
    upload_table(direct, table);
    direct_entries = table.size();
  }
  void upload_table(kernels::Piece*& table, const std::vector<kernels::Piece>& pieces) {
    char* p = nullptr;
    allocate_device(p, pieces.size() * sizeof(kernels::Piece));
    table = reinterpret_cast<kernels::Piece*>(p);
    // on the batch's stream, and waited for: a plain cudaMemcpy from pageable memory may return
    // before its DMA lands, and the batch's stream does not wait for the legacy one
    XFS_CUDA_CALL(cudaMemcpyAsync(table, pieces.data(), pieces.size() * sizeof(kernels::Piece),
                                  cudaMemcpyHostToDevice, stream));
    XFS_CUDA_CALL(cudaStreamSynchronize(stream));
  }
  void prepare_graph() {
    if (graph) return;
    cudaGraph_t g = nullptr;
    XFS_CUDA_CALL(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (std::size_t i = 0; i < s.sizes.size(); ++i) {
      const cudaError_t status = cudaMemcpyAsync(dsts[i], srcs[i], s.sizes[i], kind(), stream);
      if (status != cudaSuccess) {
        cudaStreamEndCapture(stream, &g);
        if (g) cudaGraphDestroy(g);
        XFS_CUDA_CALL(status);
      }
    }
    XFS_CUDA_CALL(cudaStreamEndCapture(stream, &g));
    const cudaError_t status = cudaGraphInstantiate(&graph, g, 0);
    cudaGraphDestroy(g);
    XFS_CUDA_CALL(status);
  }

  // One batch as copy_many makes it: every pointer classified, then the copier's call (which
  // returns once the batch has landed).
  void run_as_copy_many(const std::string& method) {
    const std::size_t n = s.sizes.size();
    if (!copier) copier = std::make_unique<ManyCopier>(s.device);
    std::vector<std::uintptr_t> all(2 * n), mapped(n);
    for (std::size_t i = 0; i < n; ++i) {
      all[i] = reinterpret_cast<std::uintptr_t>(dsts[i]);
      all[n + i] = reinterpret_cast<std::uintptr_t>(srcs[i]);
    }
    const std::vector<PointerInfo> kinds = classify(all.data(), all.size());
    const std::size_t host_side = up() ? n : 0;  // sources on the way up, else destinations
    bool pinned = true;
    for (std::size_t i = 0; i < n; ++i) {
      const PointerInfo& k = kinds[host_side + i];
      pinned = pinned && k.kind == PointerKind::pinned;
      mapped[i] = k.mapped;
    }
    copier->copy(method, up(), all.data(), all.data() + n, s.sizes.data(), n, pinned,
                 mapped.data());
  }

  void run(const std::string& method) {
    const std::size_t n = s.sizes.size();
    if (method == "loop") {
      loop_copy(up(), d2h(), dsts.data(), srcs.data(), s.sizes.data(), n, stream);
    } else if (method.rfind("batch-", 0) == 0) {
      batch_api_copy(method, up(), !up() && !d2d(), s.device, dsts.data(), srcs.data(),
                     s.sizes.data(), n, stream);
    } else if (method == "pack") {
      prepare_pack();
      if (up()) {
        XFS_CUDA_CALL(cudaStreamSynchronize(stream));  // the last batch's copy has read the staging
        for (std::size_t i = 0; i < n; ++i)
          std::memcpy(host_staging + staged[i], host + offsets[i], s.sizes[i]);
        XFS_CUDA_CALL(cudaMemcpyAsync(device_staging, host_staging, packed_span,
                                      cudaMemcpyHostToDevice, stream));
        kernels::copy(scatter, scatter_entries, stream);
      } else {
        kernels::copy(scatter, scatter_entries, stream);
        XFS_CUDA_CALL(cudaMemcpyAsync(host_staging, device_staging, packed_span,
                                      cudaMemcpyDeviceToHost, stream));
        XFS_CUDA_CALL(cudaStreamSynchronize(stream));
        for (std::size_t i = 0; i < n; ++i)
          std::memcpy(host + offsets[i], host_staging + staged[i], s.sizes[i]);
      }
    } else if (method == "staged") {
      run_as_copy_many(method);  // the staged copier's threads; back once the batch has landed
    } else if (method == "kernel") {
      prepare_direct();
      kernels::copy(direct, direct_entries, stream);
    } else if (method == "graph") {
      prepare_graph();
      XFS_CUDA_CALL(cudaGraphLaunch(graph, stream));
    } else {
      throw UsageError("unknown batch method '" + method + "'");
    }
  }

  void release() noexcept {
    detail::DeviceGuard guard(s.device, std::nothrow);
    copier.reset();
    if (stream.get()) cudaStreamSynchronize(stream);
    if (graph) cudaGraphExecDestroy(graph);
    for (void* p : {static_cast<void*>(device), static_cast<void*>(device_staging),
                    static_cast<void*>(scatter), static_cast<void*>(direct)}) {
      if (p) cudaFree(p);
    }
    if (host_staging) cudaFreeHost(host_staging);
    if (host) {
      if (d2d()) {
        cudaFree(host);
      } else if (s.memory == "pinned") {
        cudaFreeHost(host);
      } else {
        std::free(host);
      }
    }
  }
};

Batch::Batch(const BatchSpec& spec) {
  const std::string reason = refusal(spec, "loop", kBatchApiVersion, false);
  if (!reason.empty()) throw UsageError(reason);
  impl_ = std::make_unique<Impl>();
  impl_->s = spec;
  try {
    impl_->setup();
  } catch (...) {
    impl_->release();
    throw;
  }
}

Batch::~Batch() {
  if (impl_) impl_->release();
}

std::size_t Batch::bytes() const { return impl_->total; }

BatchTiming Batch::time(const std::string& method, std::int64_t iterations, bool as_copy_many) {
  Impl& b = *impl_;
  b.refuse(method, as_copy_many);
  if (iterations < 1) throw UsageError("a trial needs at least one iteration");
  XFS_CUDA_CALL(cudaSetDevice(b.s.device));
  XFS_CUDA_CALL(cudaStreamSynchronize(b.stream));
  const auto t0 = std::chrono::steady_clock::now();
  XFS_CUDA_CALL(cudaEventRecord(b.start, b.stream));
  for (std::int64_t i = 0; i < iterations; ++i) {
    if (as_copy_many) {
      b.run_as_copy_many(method);  // on the copier's stream: the events then time nothing
    } else {
      b.run(method);
    }
  }
  XFS_CUDA_CALL(cudaEventRecord(b.stop, b.stream));
  XFS_CUDA_CALL(cudaStreamSynchronize(b.stream));
  const double host = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  float ms = 0;
  XFS_CUDA_CALL(cudaEventElapsedTime(&ms, b.start, b.stop));
  BatchTiming t;
  t.host_s = host / static_cast<double>(iterations);
  // copy_many's caller waits for each batch, and the staged copy's threads work on streams of
  // their own, so their time is the host's
  t.device_s =
      as_copy_many || method == "staged" ? t.host_s : ms * 1e-3 / static_cast<double>(iterations);
  return t;
}

std::int64_t Batch::verify(const std::string& method, bool as_copy_many) {
  Impl& b = *impl_;
  b.refuse(method, as_copy_many);
  XFS_CUDA_CALL(cudaSetDevice(b.s.device));
  XFS_CUDA_CALL(cudaStreamSynchronize(b.stream));
  // a pattern over the whole span: the sources get it, the destinations are cleared
  std::vector<unsigned char> pattern(b.span);
  std::uint64_t x = b.s.seed | 1;
  for (std::size_t i = 0; i < b.span; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    pattern[i] = static_cast<unsigned char>(x >> 24);
  }
  // on the batch's own stream: it does not wait for the legacy default stream, so a plain
  // cudaMemset there could clear a destination after the batch had filled it
  if (b.d2d()) {
    XFS_CUDA_CALL(
        cudaMemcpyAsync(b.host, pattern.data(), b.span, cudaMemcpyHostToDevice, b.stream));
    XFS_CUDA_CALL(cudaMemsetAsync(b.device, 0, b.span, b.stream));
  } else if (b.up()) {
    std::memcpy(b.host, pattern.data(), b.span);
    XFS_CUDA_CALL(cudaMemsetAsync(b.device, 0, b.span, b.stream));
  } else {
    XFS_CUDA_CALL(
        cudaMemcpyAsync(b.device, pattern.data(), b.span, cudaMemcpyHostToDevice, b.stream));
    std::memset(b.host, 0, b.span);
  }
  XFS_CUDA_CALL(cudaStreamSynchronize(b.stream));
  if (as_copy_many) {
    b.run_as_copy_many(method);
  } else {
    b.run(method);
  }
  XFS_CUDA_CALL(cudaStreamSynchronize(b.stream));
  std::vector<unsigned char> arrived(b.span);
  if (b.up() || b.d2d()) {
    XFS_CUDA_CALL(cudaMemcpy(arrived.data(), b.device, b.span, cudaMemcpyDeviceToHost));
  } else {
    std::memcpy(arrived.data(), b.host, b.span);
  }
  std::int64_t wrong = 0;
  for (std::size_t i = 0; i < b.s.sizes.size(); ++i) {
    if (std::memcmp(arrived.data() + b.offsets[i], pattern.data() + b.offsets[i], b.s.sizes[i]) !=
        0)
      ++wrong;
  }
  return wrong;
}

}  // namespace xferscope::batch
