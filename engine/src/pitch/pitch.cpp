// 2D and 3D copies by one of several methods (pitch.hpp): the buffers laid out once, each
// method's staging made on first use.
#include "xferscope/pitch.hpp"

#include <cuda_runtime.h>  // make_cudaPitchedPtr, make_cudaExtent

#include <algorithm>
#include <chrono>
#include <cstring>

#include "kernels.hpp"
#include "pitch/rows.hpp"
#include "xferscope/buffer.hpp"
#include "xferscope/detail/handles.hpp"
#include "xferscope/error.hpp"
#include "xferscope/pattern.hpp"

namespace xferscope::pitch {

const std::vector<std::string>& methods() {
  static const std::vector<std::string> all = {"contiguous", "loop", "2d",  "2d-async",
                                               "3d",         "pack", "span"};
  return all;
}

std::string refusal(const PitchSpec& s, const std::string& method) {
  if (std::find(methods().begin(), methods().end(), method) == methods().end()) {
    return "unknown method '" + method + "'";
  }
  if (s.direction != "h2d" && s.direction != "d2h") return "direction must be h2d or d2h";
  if (s.memory != "pinned" && s.memory != "pageable")
    return "host memory must be pinned or pageable";
  if (s.width == 0 || s.rows == 0) return "a 2D copy needs rows of at least one byte";
  if (s.host_pitch < s.width) return "the host pitch is smaller than the width";
  if (method == "loop" && s.rows > kMostLoopRows) {
    return "a loop of " + std::to_string(s.rows) + " copies, one per row (at most " +
           std::to_string(kMostLoopRows) + ")";
  }
  if (method == "span" && s.direction == "d2h") {
    return "span copies the gaps between rows too, which a readback would overwrite";
  }
  return "";
}

namespace {

// The largest divisor of `rows` no larger than its square root: 3d's slices.
std::size_t slices_of(std::size_t rows) {
  std::size_t best = 1;
  for (std::size_t d = 1; d * d <= rows; ++d)
    if (rows % d == 0) best = d;
  return best;
}

}  // namespace

struct Pitched::Impl {
  PitchSpec s;
  std::size_t dpitch = 0, span = 0, slices = 1;
  int sm_count = 0;
  Buffer host;        // the rows, host_pitch apart
  Buffer host_dense;  // contiguous: the same bytes packed
  Buffer staging;     // pack: pinned, packed
  Buffer scratch;     // pack (pitched): the packed rows on the GPU
  Buffer landing;     // span: the host span on the GPU, gaps included
  void* device = nullptr;
  detail::Stream stream;
  detail::Event start, stop;

  bool up() const { return s.direction == "h2d"; }
  std::size_t bytes() const { return s.width * s.rows; }
  MemoryKind host_kind() const {
    return s.memory == "pinned" ? MemoryKind::pinned : MemoryKind::pageable;
  }
  cudaMemcpyKind kind() const { return up() ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost; }
  char* h() const { return static_cast<char*>(host.host()); }
  char* d() const { return static_cast<char*>(device); }

  void setup() {
    XFS_CUDA_CALL(cudaSetDevice(s.device));
    XFS_CUDA_CALL(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, s.device));
    stream = detail::Stream::create();
    start = detail::Event::create();
    stop = detail::Event::create();
    span = (s.rows - 1) * s.host_pitch + s.width;
    slices = slices_of(s.rows);
    host = Buffer::allocate(host_kind(), span, s.device);
    cudaError_t status = cudaSuccess;
    if (s.pitched) {
      status = cudaMallocPitch(&device, &dpitch, s.width, s.rows);
    } else {
      dpitch = s.width;
      status = cudaMalloc(&device, bytes());
    }
    if (status != cudaSuccess) {
      cudaGetLastError();
      device = nullptr;
      throw AllocationError("device", dpitch * s.rows, "2D copy buffers");
    }
    fill_sources();
  }

  // The source side holds the pattern by its own byte offsets; the destination its complement.
  void fill_sources() {
    if (up()) {
      fill_host(h(), span, s.seed, false);
      xferscope::kernels::fill(device, dpitch * s.rows, s.seed, true, stream);
    } else {
      xferscope::kernels::fill(device, dpitch * s.rows, s.seed, false, stream);
      fill_host(h(), span, s.seed, true);
    }
    if (host_dense.size()) fill_host(host_dense.host(), bytes(), s.seed, !up());
    XFS_CUDA_CALL(cudaStreamSynchronize(stream));
  }

  void prepare(const std::string& method) {
    if (method == "contiguous" && !host_dense.size()) {
      host_dense = Buffer::allocate(host_kind(), bytes(), s.device);
      fill_host(host_dense.host(), bytes(), s.seed, !up());
    } else if (method == "pack" && !staging.size()) {
      staging = Buffer::allocate(MemoryKind::pinned, bytes(), s.device);
      if (s.pitched) scratch = Buffer::allocate(MemoryKind::device, bytes(), s.device);
    } else if (method == "span" && !landing.size()) {
      landing = Buffer::allocate(MemoryKind::device, span, s.device);
    }
  }

  void run(const std::string& method, cudaStream_t st) {
    const std::size_t w = s.width, hp = s.host_pitch;
    char* dst = up() ? d() : h();
    const char* src = up() ? h() : d();
    const std::size_t dst_pitch = up() ? dpitch : hp, src_pitch = up() ? hp : dpitch;
    if (method == "contiguous") {
      char* hd = static_cast<char*>(host_dense.host());
      XFS_CUDA_CALL(cudaMemcpyAsync(up() ? d() : hd, up() ? hd : d(), bytes(), kind(), st));
    } else if (method == "loop") {
      for (std::size_t r = 0; r < s.rows; ++r) {
        XFS_CUDA_CALL(cudaMemcpyAsync(dst + r * dst_pitch, src + r * src_pitch, w, kind(), st));
      }
    } else if (method == "2d") {
      XFS_CUDA_CALL(cudaMemcpy2D(dst, dst_pitch, src, src_pitch, w, s.rows, kind()));
    } else if (method == "2d-async") {
      XFS_CUDA_CALL(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, w, s.rows, kind(), st));
    } else if (method == "3d") {
      const std::size_t height = s.rows / slices;
      cudaMemcpy3DParms p = {};
      p.srcPtr = make_cudaPitchedPtr(const_cast<char*>(src), src_pitch, w, height);
      p.dstPtr = make_cudaPitchedPtr(dst, dst_pitch, w, height);
      p.extent = make_cudaExtent(w, height, slices);
      p.kind = kind();
      XFS_CUDA_CALL(cudaMemcpy3DAsync(&p, st));
    } else if (method == "pack") {
      char* packed = static_cast<char*>(staging.host());
      void* on_gpu = s.pitched ? scratch.device() : device;
      if (up()) {
        XFS_CUDA_CALL(cudaStreamSynchronize(st));  // the last copy has read the staging
        for (std::size_t r = 0; r < s.rows; ++r) std::memcpy(packed + r * w, h() + r * hp, w);
        XFS_CUDA_CALL(cudaMemcpyAsync(on_gpu, packed, bytes(), cudaMemcpyHostToDevice, st));
        if (s.pitched) kernels::copy_rows(device, dpitch, on_gpu, w, w, s.rows, sm_count, st);
      } else {
        if (s.pitched) kernels::copy_rows(on_gpu, w, device, dpitch, w, s.rows, sm_count, st);
        XFS_CUDA_CALL(cudaMemcpyAsync(packed, on_gpu, bytes(), cudaMemcpyDeviceToHost, st));
        XFS_CUDA_CALL(cudaStreamSynchronize(st));
        for (std::size_t r = 0; r < s.rows; ++r) std::memcpy(h() + r * hp, packed + r * w, w);
      }
    } else if (method == "span") {
      XFS_CUDA_CALL(cudaMemcpyAsync(landing.device(), h(), span, cudaMemcpyHostToDevice, st));
      kernels::copy_rows(device, dpitch, landing.device(), hp, w, s.rows, sm_count, st);
    } else {
      throw UsageError("unknown 2D copy method '" + method + "'");
    }
  }

  // The synchronous cudaMemcpy2D runs on the legacy default stream, and so are its events;
  // everything else on the study's own stream.
  cudaStream_t stream_for(const std::string& method) const {
    return method == "2d" ? cudaStreamLegacy : stream.get();
  }

  void release() noexcept {
    detail::DeviceGuard guard(s.device, std::nothrow);
    if (stream.get()) cudaStreamSynchronize(stream);
    cudaStreamSynchronize(cudaStreamLegacy);
    if (device) cudaFree(device);
    device = nullptr;
  }
};

Pitched::Pitched(const PitchSpec& spec) {
  const std::string reason = refusal(spec, "2d");
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

Pitched::~Pitched() {
  if (impl_) impl_->release();
}

std::size_t Pitched::bytes() const { return impl_->bytes(); }
std::size_t Pitched::device_pitch() const { return impl_->dpitch; }
std::size_t Pitched::depth() const { return impl_->slices; }

PitchTiming Pitched::time(const std::string& method, std::int64_t iterations) {
  Impl& p = *impl_;
  const std::string reason = refusal(p.s, method);
  if (!reason.empty()) throw UsageError(reason);
  if (iterations < 1) throw UsageError("a trial needs at least one iteration");
  XFS_CUDA_CALL(cudaSetDevice(p.s.device));
  p.prepare(method);
  XFS_CUDA_CALL(cudaStreamSynchronize(p.stream));
  const cudaStream_t st = p.stream_for(method);
  const auto t0 = std::chrono::steady_clock::now();
  XFS_CUDA_CALL(cudaEventRecord(p.start, st));
  for (std::int64_t i = 0; i < iterations; ++i) p.run(method, st);
  XFS_CUDA_CALL(cudaEventRecord(p.stop, st));
  XFS_CUDA_CALL(cudaEventSynchronize(p.stop));
  const double host = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  float ms = 0;
  XFS_CUDA_CALL(cudaEventElapsedTime(&ms, p.start, p.stop));
  PitchTiming t;
  t.host_s = host / static_cast<double>(iterations);
  t.device_s = ms * 1e-3 / static_cast<double>(iterations);
  return t;
}

PitchVerification Pitched::verify(const std::string& method) {
  Impl& p = *impl_;
  const std::string reason = refusal(p.s, method);
  if (!reason.empty()) throw UsageError(reason);
  XFS_CUDA_CALL(cudaSetDevice(p.s.device));
  p.prepare(method);
  p.fill_sources();  // the destination poisoned again
  const cudaStream_t st = p.stream_for(method);
  p.run(method, st);
  XFS_CUDA_CALL(cudaStreamSynchronize(st));
  XFS_CUDA_CALL(cudaStreamSynchronize(p.stream));

  const PitchSpec& s = p.s;
  const std::uint64_t seed = s.seed;
  PitchVerification v;
  const bool dense = method == "contiguous";
  // Where row r's bytes came from and went to, in the source's and destination's offsets.
  const std::size_t src_pitch = dense ? s.width : (p.up() ? s.host_pitch : p.dpitch);
  const std::size_t dst_pitch = dense ? s.width : (p.up() ? p.dpitch : s.host_pitch);
  std::vector<unsigned char> downloaded;
  const unsigned char* arrived = nullptr;
  if (p.up()) {
    downloaded.resize(p.dpitch * s.rows);
    XFS_CUDA_CALL(cudaMemcpyAsync(downloaded.data(), p.device, downloaded.size(),
                                  cudaMemcpyDeviceToHost, p.stream));
    XFS_CUDA_CALL(cudaStreamSynchronize(p.stream));
    arrived = downloaded.data();
  } else {
    arrived = static_cast<const unsigned char*>(dense ? p.host_dense.host() : p.host.host());
  }
  for (std::size_t r = 0; r < s.rows; ++r) {
    const unsigned char* row = arrived + r * dst_pitch;
    for (std::size_t j = 0; j < s.width; ++j) {
      if (row[j] != pattern_byte(seed, r * src_pitch + j)) {
        ++v.wrong_rows;
        break;
      }
    }
  }
  if (!p.up() && !dense) {  // the gaps between host rows must still hold their poison
    for (std::size_t r = 0; r + 1 < s.rows; ++r) {
      for (std::size_t k = r * s.host_pitch + s.width; k < (r + 1) * s.host_pitch; ++k) {
        if (arrived[k] != static_cast<unsigned char>(~pattern_byte(seed, k))) ++v.gap_bytes;
      }
    }
  }
  v.bytes_checked = p.bytes();
  return v;
}

}  // namespace xferscope::pitch
