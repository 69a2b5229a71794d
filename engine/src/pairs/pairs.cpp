// NCCL through dlopen (pairs.hpp). The few entry points used are declared here as NCCL 2's
// stable C ABI gives them; no NCCL header is needed to build.
#include "xferscope/pairs.hpp"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "kernels.hpp"
#include "xferscope/detail/handles.hpp"
#include "xferscope/error.hpp"

namespace xferscope::pairs {

namespace {

using ncclResult = int;  // ncclSuccess = 0
using ncclCommRaw = void*;
struct ncclUniqueIdRaw {
  char internal[kUniqueIdBytes];
};
constexpr int kUint8 = 1;  // ncclUint8

struct Nccl {
  ncclResult (*get_version)(int*) = nullptr;
  ncclResult (*get_unique_id)(ncclUniqueIdRaw*) = nullptr;
  ncclResult (*init_rank)(ncclCommRaw*, int, ncclUniqueIdRaw, int) = nullptr;
  ncclResult (*destroy)(ncclCommRaw) = nullptr;
  ncclResult (*send)(const void*, std::size_t, int, int, ncclCommRaw, cudaStream_t) = nullptr;
  ncclResult (*recv)(void*, std::size_t, int, int, ncclCommRaw, cudaStream_t) = nullptr;
  ncclResult (*group_start)() = nullptr;
  ncclResult (*group_end)() = nullptr;
  const char* (*error_string)(ncclResult) = nullptr;
  std::string error;
};

template <typename F>
void resolve(F& slot, void* handle, const char* name, std::string& missing) {
  slot = reinterpret_cast<F>(dlsym(handle, name));
  if (!slot && missing.empty()) missing = name;
}

Nccl load(const std::string& library) {
  Nccl n;
  std::vector<std::string> candidates;
  if (!library.empty()) candidates.push_back(library);
  if (const char* chosen = std::getenv("XFERSCOPE_LIBNCCL"); chosen && *chosen) {
    candidates.emplace_back(chosen);
  }
  candidates.insert(candidates.end(), {"libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2",
                                       "/usr/local/cuda/lib/libnccl.so.2"});
  void* handle = nullptr;
  for (const std::string& name : candidates) {
    if ((handle = dlopen(name.c_str(), RTLD_NOW | RTLD_GLOBAL))) break;
  }
  if (!handle) {
    n.error =
        "cannot load libnccl.so.2 (NCCL 2: `pip install nvidia-nccl-cu13`, or the loader path; "
        "$XFERSCOPE_LIBNCCL names the file)";
    return n;
  }
  std::string missing;
  resolve(n.get_version, handle, "ncclGetVersion", missing);
  resolve(n.get_unique_id, handle, "ncclGetUniqueId", missing);
  resolve(n.init_rank, handle, "ncclCommInitRank", missing);
  resolve(n.destroy, handle, "ncclCommDestroy", missing);
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
  std::uint64_t seed = 0x5EED;
  void* send_buf = nullptr;
  void* recv_buf = nullptr;
  detail::Stream stream;
  detail::Event start, stop;

  void handshake(int peer, bool first) {
    // one byte each way, in a group: both streams pass it together
    check(*n, n->group_start(), "ncclGroupStart");
    check(*n, n->send(send_buf, 1, kUint8, peer, comm, stream), "ncclSend");
    check(*n,
          n->recv(static_cast<char*>(recv_buf) + (first ? 0 : 1), 1, kUint8, peer, comm, stream),
          "ncclRecv");
    check(*n, n->group_end(), "ncclGroupEnd");
  }
  void send(int peer, std::size_t bytes) {
    check(*n, n->send(send_buf, bytes, kUint8, peer, comm, stream), "ncclSend");
  }
  void recv(int peer, std::size_t bytes) {
    check(*n, n->recv(recv_buf, bytes, kUint8, peer, comm, stream), "ncclRecv");
  }

  // A measurement between ranks a and b (`what` names it in the error for bad arguments): on
  // either rank, a handshake with the other, then `iterations` rounds of `round(peer)` between
  // the events; the GPU time of them all. Other ranks take no part (an empty timing).
  template <class Round>
  PairTiming timed(const char* what, int a, int b, std::size_t bytes, std::int64_t iterations,
                   Round round) {
    PairTiming t;
    if (rank != a && rank != b) return t;
    if (bytes == 0 || bytes > capacity || iterations < 1 || a == b) {
      throw UsageError(std::string(what) + " needs 1.." + std::to_string(capacity) +
                       " bytes, an iteration and two different ranks");
    }
    XFS_CUDA_CALL(cudaSetDevice(device));
    const int peer = rank == a ? b : a;
    handshake(peer, true);
    XFS_CUDA_CALL(cudaEventRecord(start, stream));
    for (std::int64_t i = 0; i < iterations; ++i) round(peer);
    XFS_CUDA_CALL(cudaEventRecord(stop, stream));
    XFS_CUDA_CALL(cudaEventSynchronize(stop));
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
  Impl& p = *impl_;
  p.n = &nccl(library);
  p.rank = rank;
  p.device = device;
  p.capacity = capacity;
  XFS_CUDA_CALL(cudaSetDevice(device));
  p.stream = detail::Stream::create();
  p.start = detail::Event::create();
  p.stop = detail::Event::create();
  if (cudaMalloc(&p.send_buf, capacity) != cudaSuccess ||
      cudaMalloc(&p.recv_buf, capacity) != cudaSuccess) {
    cudaGetLastError();
    if (p.send_buf) cudaFree(p.send_buf);
    throw AllocationError("device", 2 * capacity, "NCCL pair buffers");
  }
  kernels::fill(p.send_buf, capacity, p.seed, false, p.stream);
  kernels::fill(p.recv_buf, capacity, p.seed, true, p.stream);
  XFS_CUDA_CALL(cudaStreamSynchronize(p.stream));
  ncclUniqueIdRaw raw{};
  std::memcpy(raw.internal, id.data(), kUniqueIdBytes);
  check(*p.n, p.n->init_rank(&p.comm, ranks, raw, rank), "ncclCommInitRank");
}

PairComm::~PairComm() {
  Impl& p = *impl_;
  cudaSetDevice(p.device);
  if (p.stream.get()) cudaStreamSynchronize(p.stream);
  if (p.comm) p.n->destroy(p.comm);
  if (p.send_buf) cudaFree(p.send_buf);
  if (p.recv_buf) cudaFree(p.recv_buf);
}

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
  XFS_CUDA_CALL(cudaSetDevice(p.device));
  void* counters = nullptr;
  XFS_CUDA_CALL(cudaMalloc(&counters, 2 * sizeof(unsigned long long)));
  kernels::compare(p.recv_buf, bytes, p.seed, 0, static_cast<unsigned long long*>(counters),
                   p.stream);
  unsigned long long host[2] = {0, 0};
  const cudaError_t status =
      cudaMemcpyAsync(host, counters, sizeof host, cudaMemcpyDeviceToHost, p.stream);
  cudaStreamSynchronize(p.stream);
  cudaFree(counters);
  XFS_CUDA_CALL(status);
  return host[0];
}

}  // namespace xferscope::pairs
