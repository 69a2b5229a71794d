// NCCL through dlopen (pairs.hpp). The few entry points used are declared here as NCCL 2's
// stable C ABI gives them; no NCCL header is needed to build.
#include "xferscope/pairs.hpp"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "dynlib.hpp"
#include "kernels.hpp"
#include "xferscope/cases.hpp"
#include "xferscope/detail/handles.hpp"
#include "xferscope/error.hpp"

namespace xferscope::pairs {

namespace {

using ncclResult = int;  // ncclSuccess = 0
using ncclCommRaw = void*;
struct ncclUniqueIdRaw {
  char internal[kUniqueIdBytes];
};
constexpr int kUint8 = 1;              // ncclUint8
constexpr ncclResult kInProgress = 7;  // ncclInProgress: not an error
// A measurement that makes no progress this long means the other rank is gone (it died, or
// stopped): the communicator is aborted rather than waited on for ever. 64 MiB x 20 messages
// take under a second on any link NCCL uses.
constexpr double kStallSeconds = 120;

struct Nccl {
  ncclResult (*get_version)(int*) = nullptr;
  ncclResult (*get_unique_id)(ncclUniqueIdRaw*) = nullptr;
  ncclResult (*init_rank)(ncclCommRaw*, int, ncclUniqueIdRaw, int) = nullptr;
  ncclResult (*destroy)(ncclCommRaw) = nullptr;
  ncclResult (*abort)(ncclCommRaw) = nullptr;
  ncclResult (*async_error)(ncclCommRaw, ncclResult*) = nullptr;
  ncclResult (*send)(const void*, std::size_t, int, int, ncclCommRaw, cudaStream_t) = nullptr;
  ncclResult (*recv)(void*, std::size_t, int, int, ncclCommRaw, cudaStream_t) = nullptr;
  ncclResult (*group_start)() = nullptr;
  ncclResult (*group_end)() = nullptr;
  const char* (*error_string)(ncclResult) = nullptr;
  std::string error;
};

Nccl load(const std::string& library) {
  Nccl n;
  const char* chosen = std::getenv("XFERSCOPE_LIBNCCL");
  void* handle = dynlib::open_first({library, chosen ? chosen : "", "libnccl.so.2",
                                     "/usr/local/cuda/lib64/libnccl.so.2"},
                                    RTLD_NOW | RTLD_GLOBAL)
                     .handle;
  if (!handle) {
    n.error = "cannot load libnccl.so.2 (NCCL 2); $XFERSCOPE_LIBNCCL names the file";
    return n;
  }
  std::string missing;
  using dynlib::resolve;
  resolve(n.get_version, handle, "ncclGetVersion", missing);
  resolve(n.get_unique_id, handle, "ncclGetUniqueId", missing);
  resolve(n.init_rank, handle, "ncclCommInitRank", missing);
  resolve(n.destroy, handle, "ncclCommDestroy", missing);
  resolve(n.abort, handle, "ncclCommAbort", missing);
  resolve(n.async_error, handle, "ncclCommGetAsyncError", missing);
  resolve(n.send, handle, "ncclSend", missing);
  resolve(n.recv, handle, "ncclRecv", missing);
  resolve(n.group_start, handle, "ncclGroupStart", missing);
  resolve(n.group_end, handle, "ncclGroupEnd", missing);
  resolve(n.error_string, handle, "ncclGetErrorString", missing);
  if (!missing.empty()) n.error = "libnccl lacks " + missing;
  return n;
}

const Nccl& nccl(const std::string& library) {
  static std::once_flag once;
  static Nccl loaded;
  std::call_once(once, [&] { loaded = load(library); });
  if (!loaded.error.empty()) throw NcclError(loaded.error);
  return loaded;
}

void check(const Nccl& n, ncclResult r, const char* what) {
  if (r != 0) {
    throw NcclError(std::string(what) + " failed: " + n.error_string(r));
  }
}

}  // namespace

std::vector<std::uint8_t> unique_id(const std::string& library) {
  const Nccl& n = nccl(library);
  ncclUniqueIdRaw id{};
  check(n, n.get_unique_id(&id), "ncclGetUniqueId");
  return {id.internal, id.internal + kUniqueIdBytes};
}

int nccl_version(const std::string& library) {
  const Nccl& n = nccl(library);
  int v = 0;
  check(n, n.get_version(&v), "ncclGetVersion");
  return v;
}

struct PairComm::Impl {
  const Nccl* n = nullptr;
  ncclCommRaw comm = nullptr;
  int rank = 0, device = 0;
  std::size_t capacity = 0;
  void* send_buf = nullptr;
  void* recv_buf = nullptr;
  void* shake = nullptr;   // the handshake's byte lands here, not in the data a check reads
  int received_from = -1;  // the other rank of the last measurement
  std::string aborted;     // why the communicator was aborted, if it was
  detail::Stream stream;
  detail::Event start, stop;

  // Each rank sends its own pattern, so data from the wrong rank does not pass the check.
  static std::uint64_t seed_of(int r) {
    return Limits::default_seed + 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(r + 1);
  }

  ~Impl() {
    detail::DeviceGuard guard(device, std::nothrow);
    if (stream.get()) cudaStreamSynchronize(stream);
    if (comm) n->destroy(comm);
    for (void* p : {send_buf, recv_buf, shake}) {
      if (p) cudaFree(p);
    }
  }

  void handshake(int peer) {
    // one byte each way, in a group: both streams pass it together
    check(*n, n->group_start(), "ncclGroupStart");
    check(*n, n->send(send_buf, 1, kUint8, peer, comm, stream), "ncclSend");
    check(*n, n->recv(shake, 1, kUint8, peer, comm, stream), "ncclRecv");
    check(*n, n->group_end(), "ncclGroupEnd");
  }
  void send(int peer, std::size_t bytes) {
    check(*n, n->send(send_buf, bytes, kUint8, peer, comm, stream), "ncclSend");
  }
  void recv(int peer, std::size_t bytes) {
    check(*n, n->recv(recv_buf, bytes, kUint8, peer, comm, stream), "ncclRecv");
  }

  // Waits for `done` while watching the communicator: an NCCL error, or no progress for
  // kStallSeconds, aborts it (the other rank is gone) and throws.
  void wait(cudaEvent_t done) {
    const auto begun = std::chrono::steady_clock::now();
    for (;;) {
      const cudaError_t status = cudaEventQuery(done);
      if (status == cudaSuccess) return;
      if (status != cudaErrorNotReady) XFS_CUDA_CALL(status);
      ncclResult r = 0;
      const ncclResult asked = n->async_error(comm, &r);
      std::string why;
      if (asked != 0) {
        why = std::string("ncclCommGetAsyncError failed: ") + n->error_string(asked);
      } else if (r != 0 && r != kInProgress) {
        why = std::string("NCCL failed during the transfer: ") + n->error_string(r);
      } else if (std::chrono::duration<double>(std::chrono::steady_clock::now() - begun).count() >
                 kStallSeconds) {
        why = "no progress in " + std::to_string(static_cast<int>(kStallSeconds)) +
              " s: the other rank has stopped";
      }
      if (!why.empty()) {
        n->abort(comm);  // ends the stuck operations, so the stream drains
        comm = nullptr;
        aborted = why;
        throw NcclError(why + " (the communicator was aborted)");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  // A measurement between ranks a and b (`what` names it in the error for bad arguments): on
  // either rank, its receive buffer refilled with the complement of the other's pattern (so a
  // check reads only what this measurement delivered), a handshake with the other, then
  // `iterations` rounds of `round(peer)` between the events; the GPU time of them all. Other
  // ranks take no part (an empty timing).
  template <class Round>
  PairTiming timed(const char* what, int a, int b, std::size_t bytes, std::int64_t iterations,
                   Round round) {
    PairTiming t;
    if (rank != a && rank != b) return t;
    if (bytes == 0 || bytes > capacity || iterations < 1 || a == b) {
      throw UsageError(std::string(what) + " needs 1.." + std::to_string(capacity) +
                       " bytes, an iteration and two different ranks");
    }
    if (!comm) throw NcclError("the NCCL communicator was aborted earlier: " + aborted);
    XFS_CUDA_CALL(cudaSetDevice(device));
    const int peer = rank == a ? b : a;
    kernels::fill(recv_buf, capacity, seed_of(peer), true, stream);
    received_from = peer;
    handshake(peer);
    XFS_CUDA_CALL(cudaEventRecord(start, stream));
    for (std::int64_t i = 0; i < iterations; ++i) round(peer);
    XFS_CUDA_CALL(cudaEventRecord(stop, stream));
    wait(stop);
    float ms = 0;
    XFS_CUDA_CALL(cudaEventElapsedTime(&ms, start, stop));
    t.seconds = ms * 1e-3;
    t.iterations = iterations;
    return t;
  }
};

PairComm::PairComm(const std::vector<std::uint8_t>& id, int ranks, int rank, int device,
                   std::size_t capacity, const std::string& library)
    : impl_(std::make_unique<Impl>()) {
  if (id.size() != kUniqueIdBytes) throw UsageError("an NCCL unique id is 128 bytes");
  if (capacity < 2) throw UsageError("a pair's buffers need at least 2 bytes");
  Impl& p = *impl_;  // its destructor frees whatever was made, also when this throws
  p.n = &nccl(library);
  p.rank = rank;
  p.device = device;
  p.capacity = capacity;
  XFS_CUDA_CALL(cudaSetDevice(device));
  p.stream = detail::Stream::create();
  p.start = detail::Event::create();
  p.stop = detail::Event::create();
  for (auto [buffer, bytes] : {std::pair{&p.send_buf, capacity}, std::pair{&p.recv_buf, capacity},
                               std::pair{&p.shake, std::size_t{1}}}) {
    if (cudaMalloc(buffer, bytes) != cudaSuccess) {
      cudaGetLastError();
      *buffer = nullptr;
      throw AllocationError("device", 2 * capacity + 1, "NCCL pair buffers");
    }
  }
  kernels::fill(p.send_buf, capacity, Impl::seed_of(rank), false, p.stream);
  XFS_CUDA_CALL(cudaStreamSynchronize(p.stream));
  ncclUniqueIdRaw raw{};
  std::memcpy(raw.internal, id.data(), kUniqueIdBytes);
  check(*p.n, p.n->init_rank(&p.comm, ranks, raw, rank), "ncclCommInitRank");
}

PairComm::~PairComm() = default;  // Impl's destructor frees everything

int PairComm::rank() const noexcept { return impl_->rank; }

PairTiming PairComm::stream(int from, int to, std::size_t bytes, std::int64_t iterations) {
  Impl& p = *impl_;
  return p.timed("a stream", from, to, bytes, iterations, [&](int peer) {
    if (p.rank == from) {
      p.send(peer, bytes);
    } else {
      p.recv(peer, bytes);
    }
  });
}

PairTiming PairComm::ping_pong(int a, int b, std::size_t bytes, std::int64_t iterations) {
  Impl& p = *impl_;
  return p.timed("a ping-pong", a, b, bytes, iterations, [&](int peer) {
    if (p.rank == a) {
      p.send(peer, bytes);
      p.recv(peer, bytes);
    } else {
      p.recv(peer, bytes);
      p.send(peer, bytes);
    }
  });
}

std::uint64_t PairComm::mismatches(std::size_t bytes) {
  Impl& p = *impl_;
  if (bytes == 0 || bytes > p.capacity) throw UsageError("bytes outside the buffers");
  if (p.received_from < 0) throw UsageError("nothing was received yet");
  XFS_CUDA_CALL(cudaSetDevice(p.device));
  void* counters = nullptr;
  XFS_CUDA_CALL(cudaMalloc(&counters, 2 * sizeof(unsigned long long)));
  struct Free {
    void* p;
    ~Free() { cudaFree(p); }
  } free_counters{counters};
  kernels::compare(p.recv_buf, bytes, Impl::seed_of(p.received_from), 0,
                   static_cast<unsigned long long*>(counters), p.stream);
  unsigned long long host[2] = {0, 0};
  XFS_CUDA_CALL(cudaMemcpyAsync(host, counters, sizeof host, cudaMemcpyDeviceToHost, p.stream));
  XFS_CUDA_CALL(cudaStreamSynchronize(p.stream));
  return host[0];
}

}  // namespace xferscope::pairs
