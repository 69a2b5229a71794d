// Many copies of the caller's buffers (many.hpp): pointer kinds from the driver, and the batch
// methods over the caller's pointers, with staging and tables kept between calls.
#include "xferscope/many.hpp"

#include <cuda.h>  // the driver's pointer attributes (types only: the call is found at run time)
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>

#include "batch/batch_api.hpp"
#include "batch/kernels.hpp"
#include "xferscope/detail/handles.hpp"
#include "xferscope/error.hpp"
#include "xferscope/staged.hpp"

namespace xferscope::batch {

namespace {

using GetAttributes = CUresult (*)(unsigned, CUpointer_attribute*, void**, CUdeviceptr);

// cuPointerGetAttributes, found through the runtime (the engine links no driver library)
GetAttributes get_attributes() {
  static const GetAttributes found = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult status{};
    if (cudaGetDriverEntryPointByVersion("cuPointerGetAttributes", &f, 12000, cudaEnableDefault,
                                         &status) != cudaSuccess ||
        status != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      f = nullptr;
    }
    return reinterpret_cast<GetAttributes>(f);
  }();
  return found;
}

PointerInfo query(std::uintptr_t address) {
  PointerInfo info;
  if (GetAttributes get = get_attributes()) {
    CUpointer_attribute which[] = {
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE,      CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        CU_POINTER_ATTRIBUTE_IS_MANAGED,       CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
        CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    std::uint64_t values[6] = {};  // each attribute's value, at most 8 bytes
    void* data[6];
    for (int i = 0; i < 6; ++i) data[i] = &values[i];
    if (get(6, which, data, static_cast<CUdeviceptr>(address)) != CUDA_SUCCESS) return info;
    const auto type = static_cast<unsigned>(values[0]);
    const bool managed = (values[2] & 0xff) != 0;
    if (type == 0) return info;  // not known to CUDA: pageable
    info.device = static_cast<int>(values[1]);
    info.range_start = static_cast<std::uintptr_t>(values[4]);
    info.range_bytes = static_cast<std::size_t>(values[5]);
    if (managed) {
      info.kind = PointerKind::managed;
    } else if (type == CU_MEMORYTYPE_HOST) {
      info.kind = PointerKind::pinned;
      info.mapped = static_cast<std::uintptr_t>(values[3]);
    } else {
      info.kind = PointerKind::device;
    }
    return info;
  }
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, reinterpret_cast<const void*>(address)) != cudaSuccess) {
    cudaGetLastError();
    return info;
  }
  switch (a.type) {
    case cudaMemoryTypeHost:
      info.kind = PointerKind::pinned;
      info.mapped = reinterpret_cast<std::uintptr_t>(a.devicePointer);
      break;
    case cudaMemoryTypeDevice: info.kind = PointerKind::device; break;
    case cudaMemoryTypeManaged: info.kind = PointerKind::managed; break;
    default: return info;
  }
  info.device = a.device;
  return info;
}

// The caller's stream from its integer handle (copy's `on`, 0 the legacy default stream).
cudaStream_t caller_stream(std::int64_t on) {
  return reinterpret_cast<cudaStream_t>(static_cast<std::uintptr_t>(on));
}

constexpr std::size_t kAlign = 256;
const std::string kLoop = "loop";
std::size_t aligned(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

const std::string& method_on_stream(const std::string& method, std::int64_t on) {
  if (on < 0 || method == kLoop) return method;
  const bool batch_api = method.rfind("batch-", 0) == 0;
  return batch_api && on > 1 ? method : kLoop;  // 0 and 1: the legacy stream (cudaStreamLegacy)
}

std::size_t staging_bytes(std::size_t bytes) {
  std::size_t n = kStagingLeast;
  while (n < bytes && n <= (std::numeric_limits<std::size_t>::max() >> 1)) n <<= 1;
  return n < bytes ? bytes : n;
}

PointerInfo Classifier::of(std::uintptr_t address) {
  auto it = ranges_.upper_bound(address);
  if (it != ranges_.begin()) {
    const PointerInfo& r = std::prev(it)->second;
    if (address < r.range_start + r.range_bytes) {
      PointerInfo k = r;
      if (r.mapped) k.mapped = r.mapped + (address - r.range_start);
      return k;
    }
  }
  PointerInfo k = query(address);
  if (k.range_start && k.range_bytes && address >= k.range_start) {
    PointerInfo r = k;
    if (r.mapped) r.mapped -= address - k.range_start;  // the mapped address of the range's start
    ranges_[k.range_start] = r;
  }
  return k;
}

std::vector<PointerInfo> classify(const std::uintptr_t* addresses, std::size_t count) {
  std::vector<PointerInfo> kinds(count);
  Classifier classifier;
  for (std::size_t i = 0; i < count; ++i) kinds[i] = classifier.of(addresses[i]);
  return kinds;
}

struct ManyCopier::Impl {
  std::mutex calls;  // one batch at a time: the staging and tables are shared
  detail::Stream stream;
  // copies on `stream` queued by a call that did not wait for them, not yet waited for (a call
  // that waits then copies after them on `stream`, not on the legacy stream)
  std::atomic<bool> pending{false};
  // copies queue() put on the legacy stream for a call that waits, not yet waited for
  std::atomic<bool> on_legacy{false};

  // The stream a call's loop copies go on: the legacy default stream where the call waits for
  // them and nothing it did not wait for is still queued on `stream`; else `stream`.
  cudaStream_t stream_for(bool wait) const {
    return wait && !pending.load(std::memory_order_acquire) ? cudaStreamLegacy : stream.get();
  }
  // Waits for what queue() put on the legacy stream, where `stream` (just waited for) is not it.
  void wait_legacy(cudaStream_t waited) {
    if (on_legacy.exchange(false) && waited != cudaStreamLegacy) {
      XFS_CUDA_CALL(cudaStreamSynchronize(cudaStreamLegacy));
    }
  }
  char* host = nullptr;  // pinned: a table of pieces, then packed data
  std::size_t host_bytes = 0;
  char* device = nullptr;  // the same layout on the GPU
  std::size_t device_bytes = 0;

  // The staged method's threads and chunks, made on another thread (`builder`, begun by the
  // first staged batch or prepare_staged) while staged batches go by the loop: `staged` is
  // written by the builder only, and read once `ready` says it is made. `building` guards
  // `builder`; `failed` is read after joining it.
  std::unique_ptr<StagedCopier> staged;
  std::mutex building;
  std::thread builder;
  std::atomic<bool> ready{false}, ended{false};
  std::exception_ptr failed;

  // Begins making the staged copier, unless it is made or being made (`building` held).
  void begin_staged(int device) {
    if (ready.load(std::memory_order_acquire) || builder.joinable()) return;
    ended.store(false);
    builder = std::thread([this, device] {
      try {
        staged = std::make_unique<StagedCopier>(device);
        ready.store(true, std::memory_order_release);
      } catch (...) {
        failed = std::current_exception();
      }
      ended.store(true, std::memory_order_release);
    });
  }

  // Joins the builder (waiting for it where it still runs; `building` held) and raises what
  // it failed with, forgotten so that a later batch tries again.
  void join_builder() {
    if (!builder.joinable()) return;
    builder.join();
    if (failed) {
      std::exception_ptr f = failed;
      failed = nullptr;
      std::rethrow_exception(f);
    }
  }

  // Whether a staged batch goes staged now: the copier is made (the builder joined), else
  // begun; a failed builder's error raised.
  bool staged_now(int device) {
    std::lock_guard<std::mutex> lock(building);
    if (ended.load(std::memory_order_acquire)) join_builder();
    if (!ready.load(std::memory_order_acquire)) begin_staged(device);
    return ready.load(std::memory_order_acquire);
  }

  void reserve(std::size_t bytes) { reserve(bytes, bytes); }
  void reserve(std::size_t bytes, std::size_t on_device) {
    if (bytes > host_bytes) {
      bytes = staging_bytes(bytes);  // grown in steps, so it stops growing soon
      if (host) cudaFreeHost(host);
      host = nullptr;
      host_bytes = 0;
      if (cudaMallocHost(reinterpret_cast<void**>(&host), bytes) != cudaSuccess) {
        cudaGetLastError();
        host = nullptr;
        throw AllocationError("pinned", bytes, "copy_many staging");
      }
      host_bytes = bytes;
    }
    if (on_device > device_bytes) {
      if (device) cudaFree(device);
      device = nullptr;
      device_bytes = 0;
      if (cudaMalloc(reinterpret_cast<void**>(&device), on_device) != cudaSuccess) {
        cudaGetLastError();
        device = nullptr;
        throw AllocationError("device", on_device, "copy_many staging");
      }
      device_bytes = on_device;
    }
  }

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(building);
      if (builder.joinable()) builder.join();
    }
    staged.reset();
    if (stream.get()) cudaStreamSynchronize(stream);
    if (host) cudaFreeHost(host);
    if (device) cudaFree(device);
  }
};

ManyCopier::ManyCopier(int device) : device_(device) {
  detail::DeviceGuard guard(device);
  impl_ = std::make_unique<Impl>();
  impl_->stream = detail::Stream::create();
}

ManyCopier::~ManyCopier() {
  if (!impl_) return;
  detail::DeviceGuard guard(device_, std::nothrow);
  impl_.reset();
}

void ManyCopier::prepare_staged() {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.building);
  m.begin_staged(device_);
  m.join_builder();
}

bool ManyCopier::staged_ready() const noexcept {
  return impl_->ready.load(std::memory_order_acquire);
}

std::size_t ManyCopier::pinned_bytes() {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> one_at_a_time(m.calls);
  std::size_t bytes = m.host_bytes;
  if (m.ready.load(std::memory_order_acquire)) {
    const StagedPlan& p = m.staged->plan();
    bytes += static_cast<std::size_t>(p.threads) * p.buffers_per_thread * p.chunk_bytes;
  }
  return bytes;
}

std::string ManyCopier::copy(const std::string& asked, bool upload,
                             const std::uintptr_t* destinations, const std::uintptr_t* sources,
                             const std::size_t* sizes, std::size_t count, bool pinned,
                             const std::uintptr_t* mapped_host, bool wait, std::int64_t on) {
  if (count == 0) return asked;
  Impl& m = *impl_;
  const bool theirs = on >= 0;  // the caller's stream: queued there, nothing waited for
  // a staged batch goes by the loop while the staged copier is being made
  const std::string& method = theirs ? method_on_stream(asked, on)
                              : asked == "staged" && !m.staged_now(device_) ? kLoop
                                                                            : asked;
  std::lock_guard<std::mutex> one_at_a_time(m.calls);
  detail::DeviceGuard guard(device_);
  // the loop's copies of a call that waits go on the legacy stream (stream_for); the batch API
  // refuses that stream, and the kernels share this copier's table and staging
  cudaStream_t stream = theirs            ? caller_stream(on)
                        : method == kLoop ? m.stream_for(wait)
                                          : m.stream.get();
  // whatever happens, the stream is idle on return: nothing queued still reads the caller's
  // buffers or this copier's table and staging, which the next call writes (synchronized once:
  // by the last lines, or here when an error leaves early), nor anything queue() put on the
  // legacy stream for this call
  struct Drain {
    cudaStream_t stream;
    Impl& m;
    bool done = false;
    ~Drain() {
      if (done) return;
      if (cudaStreamSynchronize(stream) != cudaSuccess) cudaGetLastError();
      if (m.on_legacy.exchange(false) && cudaStreamSynchronize(cudaStreamLegacy) != cudaSuccess) {
        cudaGetLastError();
      }
    }
  } drain{stream, m};
  // the pieces' ends as pointers
  static_assert(sizeof(std::uintptr_t) == sizeof(void*), "addresses are pointers");
  auto* d = reinterpret_cast<void* const*>(destinations);
  auto* s = reinterpret_cast<const void* const*>(sources);
  // a kernel's table (large pieces cut into parts), copied to the start of the pinned staging
  std::vector<kernels::Piece> table;
  auto place_table = [&] {
    std::memcpy(m.host, table.data(), table.size() * sizeof(kernels::Piece));
  };
  auto device_table = [&] { return reinterpret_cast<const kernels::Piece*>(m.device); };

  if (method == "loop") {
    loop_copy(upload, !upload, d, s, sizes, count, stream);
  } else if (method.rfind("batch-", 0) == 0) {
    const std::size_t bytes = std::accumulate(sizes, sizes + count, std::size_t{0});
    if (batch_api_grouped(upload, pinned, count, bytes)) {
      batch_api_copy_grouped(method, upload, !upload, device_, d, s, sizes, count, stream);
    } else {
      batch_api_copy(method, upload, !upload, device_, d, s, sizes, count, stream);
    }
  } else if (method == "pack" || method == "staged") {
    // the pieces one after another in a device buffer after the table, which a kernel scatters
    // (or first gathers): packed by this thread through one pinned buffer, or staged by the
    // staged copier's threads in chunks while the copy engine moves the chunks before. Each
    // piece starts as far past 16 bytes as its device end, so the kernel moves 16-byte words.
    const bool staged = method == "staged";
    std::vector<std::size_t> at(count);
    std::size_t total = 0, entries = 0;
    for (std::size_t i = 0; i < count; ++i) {
      at[i] = kernels::packed_at(total, upload ? d[i] : s[i]);
      total = at[i] + sizes[i];
      entries += kernels::parts(sizes[i]);
    }
    // the device data's address is the table's size past m.device: known before the table
    const std::size_t table_bytes = aligned(entries * sizeof(kernels::Piece));
    m.reserve(table_bytes + (staged ? 0 : total), table_bytes + total);
    char* host_data = m.host + table_bytes;
    char* device_data = m.device + table_bytes;
    table.reserve(entries);
    for (std::size_t i = 0; i < count; ++i) {
      if (upload) {
        kernels::add(table, device_data + at[i], d[i], sizes[i]);
      } else {
        kernels::add(table, s[i], device_data + at[i], sizes[i]);
      }
    }
    place_table();
    if (upload && staged) {
      XFS_CUDA_CALL(cudaMemcpyAsync(m.device, m.host, table_bytes, cudaMemcpyHostToDevice, stream));
      m.staged->gather_to_device(device_data, reinterpret_cast<const void* const*>(sources), sizes,
                                 at.data(), count);  // returns once the data is on the GPU
      kernels::copy(device_table(), table.size(), stream);
    } else if (upload) {
      for (std::size_t i = 0; i < count; ++i) std::memcpy(host_data + at[i], s[i], sizes[i]);
      XFS_CUDA_CALL(cudaMemcpyAsync(m.device, m.host, table_bytes + total, cudaMemcpyHostToDevice,
                                    stream));  // table and data at once
      kernels::copy(device_table(), table.size(), stream);
    } else {
      XFS_CUDA_CALL(cudaMemcpyAsync(m.device, m.host, table_bytes, cudaMemcpyHostToDevice, stream));
      kernels::copy(device_table(), table.size(), stream);
      if (staged) {
        XFS_CUDA_CALL(cudaStreamSynchronize(stream));  // gathered: the threads read it back
        m.staged->scatter_to_host(reinterpret_cast<void* const*>(destinations), device_data, sizes,
                                  at.data(), count);
      } else {
        XFS_CUDA_CALL(
            cudaMemcpyAsync(host_data, device_data, total, cudaMemcpyDeviceToHost, stream));
        XFS_CUDA_CALL(cudaStreamSynchronize(stream));
        for (std::size_t i = 0; i < count; ++i) std::memcpy(d[i], host_data + at[i], sizes[i]);
      }
    }
  } else if (method == "kernel") {
    if (!pinned || !mapped_host) {
      throw UsageError("the kernel method needs pinned host memory mapped into the GPU");
    }
    for (std::size_t i = 0; i < count; ++i) {
      if (!mapped_host[i]) throw UsageError("a host piece is not mapped into the GPU");
      const std::uintptr_t mapped = mapped_host[i];
      if (upload) {
        kernels::add(table, reinterpret_cast<const void*>(mapped), d[i], sizes[i]);
      } else {
        kernels::add(table, s[i], reinterpret_cast<void*>(mapped), sizes[i]);
      }
    }
    const std::size_t table_bytes = aligned(table.size() * sizeof(kernels::Piece));
    m.reserve(table_bytes);
    place_table();
    XFS_CUDA_CALL(cudaMemcpyAsync(m.device, m.host, table_bytes, cudaMemcpyHostToDevice, stream));
    kernels::copy(device_table(), table.size(), stream);
  } else {
    throw UsageError("unknown copy_many method '" + method +
                     "' (loop, batch-stream, batch-call, batch-any, pack, staged, kernel)");
  }
  drain.done = true;
  if (theirs) return method;  // queued on the caller's stream, which orders what comes next
  // queued only: the loop's and the batch calls' copies read nothing of this copier's
  if (!wait && (method == kLoop || method.rfind("batch-", 0) == 0)) {
    m.pending.store(true, std::memory_order_release);
    return method;
  }
  XFS_CUDA_CALL(cudaStreamSynchronize(stream));
  if (stream == m.stream.get()) m.pending.store(false, std::memory_order_release);
  m.wait_legacy(stream);
  return method;
}

void ManyCopier::queue(bool upload, std::uintptr_t destination, std::uintptr_t source,
                       std::size_t size, bool wait, std::int64_t on) {
  // no lock: a loop's copy reads nothing of this copier's, and the stream is made once
  Impl& m = *impl_;
  detail::DeviceGuard guard(device_);
  void* const d = reinterpret_cast<void*>(destination);
  const void* const s = reinterpret_cast<const void*>(source);
  cudaStream_t stream = on >= 0 ? caller_stream(on) : m.stream_for(wait);
  if (on < 0) {  // the caller's stream orders its own copies: nothing of this copier's to wait for
    (stream == cudaStreamLegacy ? m.on_legacy : m.pending).store(true, std::memory_order_release);
  }
  loop_copy(upload, !upload, &d, &s, &size, 1, stream);
}

void ManyCopier::read_to_device(int fd, void* device_destination, const std::uint64_t* file_offsets,
                                const std::size_t* sizes, const std::size_t* offsets,
                                std::size_t count, int readers) {
  prepare_staged();
  impl_->staged->read_to_device(fd, device_destination, file_offsets, sizes, offsets, count,
                                readers);
}

void ManyCopier::finish() {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> one_at_a_time(m.calls);
  detail::DeviceGuard guard(device_);
  XFS_CUDA_CALL(cudaStreamSynchronize(m.stream));
  m.pending.store(false, std::memory_order_release);
  m.wait_legacy(m.stream.get());
}

}  // namespace xferscope::batch
