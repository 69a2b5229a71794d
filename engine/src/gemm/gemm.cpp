// One GEMM through cuBLASLt: its descriptors, device buffers (in rotated copies for small
// shapes), event timing and the sampled double-precision check; algorithm.cpp chooses the
// heuristic's algorithm.
#include "xferscope/gemm.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gemm/impl.hpp"
#include "gemm/kernels.hpp"
#include "gemm/lt.hpp"
#include "xferscope/detail/handles.hpp"
#include "xferscope/error.hpp"

namespace xferscope::gemm {

namespace {

constexpr int kMostCopies = 64;

Types types_of(const std::string& p) {
  using kernels::Type;
  if (p == "fp64")
    return {Type::f64, Type::f64, CUDA_R_64F, CUDA_R_64F, CUBLAS_COMPUTE_64F, CUDA_R_64F};
  if (p == "fp32")
    return {Type::f32, Type::f32, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F};
  if (p == "tf32") {
    return {Type::f32, Type::f32, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F};
  }
  if (p == "fp16")
    return {Type::f16, Type::f16, CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_32F};
  if (p == "bf16") {
    return {Type::bf16, Type::bf16, CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F};
  }
  return {Type::e4m3, Type::bf16, CUDA_R_8F_E4M3, CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F};
}

const PrecisionInfo* find(const std::string& name) {
  for (const PrecisionInfo& p : precisions()) {
    if (name == p.name) return &p;
  }
  return nullptr;
}

}  // namespace

const std::vector<PrecisionInfo>& precisions() {
  static const std::vector<PrecisionInfo> table = {
      {"fp64", 8, 8, 60, 1e-10, "double precision (DGEMM; tensor cores from compute 8.0)"},
      {"fp32", 4, 4, 50, 1e-4, "single precision (SGEMM), FP32 arithmetic"},
      {"tf32", 4, 4, 80, 5e-3, "FP32 data, TF32 tensor cores (10-bit mantissa), FP32 accumulation"},
      {"fp16", 2, 2, 60, 5e-3, "half precision data and output, FP32 accumulation"},
      {"bf16", 2, 2, 80, 2e-2, "bfloat16 data and output, FP32 accumulation"},
      {"fp8", 1, 2, 89, 2e-2, "FP8 E4M3 data with scales, bfloat16 output, FP32 accumulation"}};
  return table;
}

std::string refusal(const GemmSpec& s, int compute_capability) {
  const PrecisionInfo* p = find(s.precision);
  if (!p) {
    std::string names;
    for (const PrecisionInfo& q : precisions())
      names += (names.empty() ? "" : ", ") + std::string(q.name);
    return "precision '" + s.precision + "' is not one of " + names;
  }
  const std::int64_t most = (std::int64_t{1} << 31) - 1;
  if (s.m < 1 || s.n < 1 || s.k < 1 || s.m > most || s.n > most || s.k > most) {
    return std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) +
           " is not a shape of whole numbers from 1 to 2^31 - 1";
  }
  if (compute_capability >= 0 && compute_capability < p->min_compute) {
    return s.precision + " needs compute capability " + std::to_string(p->min_compute / 10) + "." +
           std::to_string(p->min_compute % 10) + " or newer; this GPU has " +
           std::to_string(compute_capability / 10) + "." + std::to_string(compute_capability % 10);
  }
  if (s.precision == "fp8") {
    if (!s.trans_a || s.trans_b) {
      return "fp8 GEMMs run as op(A) = A^T, op(B) = B (cuBLASLt's FP8 layout, TN)";
    }
    if (s.k % 16 != 0 || s.m % 16 != 0) {
      return "fp8 GEMMs need m and k to be multiples of 16 (cuBLASLt's FP8 alignment)";
    }
  }
  return "";
}

std::size_t Gemm::bytes_needed(const GemmSpec& s, int copies) {
  const PrecisionInfo* p = find(s.precision);
  const std::size_t in = p ? static_cast<std::size_t>(p->input_bytes) : 4;
  const std::size_t out = p ? static_cast<std::size_t>(p->output_bytes) : 4;
  const std::size_t one =
      (static_cast<std::size_t>(s.m) * s.k + static_cast<std::size_t>(s.k) * s.n) * in +
      2 * static_cast<std::size_t>(s.m) * s.n * out;  // C and D
  return one * static_cast<std::size_t>(copies) + kWorkspaceBytes;
}

Gemm::Impl::Impl(const GemmSpec& spec, int copies_)
    : l(lt()), s(spec), t(types_of(spec.precision)), copies(copies_) {}

void Gemm::Impl::allocate(void*& p, std::size_t bytes, const char* what) {
  const cudaError_t status = cudaMalloc(&p, bytes);
  if (status != cudaSuccess) {
    cudaGetLastError();
    p = nullptr;
    throw AllocationError("device", bytes,
                          std::string("GEMM ") + what + ": " + cudaGetErrorString(status));
  }
}

void Gemm::Impl::setup() {
  XFS_CUDA_CALL(cudaSetDevice(s.device));
  stream = detail::Stream::create();
  start = detail::Event::create();
  stop = detail::Event::create();
  const int in = kernels::type_bytes(t.input), out = kernels::type_bytes(t.output);
  a.assign(copies, nullptr);
  b.assign(copies, nullptr);
  c.assign(copies, nullptr);
  d.assign(copies, nullptr);
  for (int i = 0; i < copies; ++i) {
    allocate(a[i], elements_a() * in, "A");
    allocate(b[i], elements_b() * in, "B");
    allocate(c[i], elements_c() * out, "C");
    allocate(d[i], elements_c() * out, "D");
    kernels::fill(a[i], elements_a(), t.input, seed_of('A', i), stream);
    kernels::fill(b[i], elements_b(), t.input, seed_of('B', i), stream);
    kernels::fill(c[i], elements_c(), t.output, seed_of('C', i), stream);
  }
  allocate(workspace, kWorkspaceBytes, "workspace");
  allocate(reinterpret_cast<void*&>(check_out), 4 * sizeof(double) * 4096, "check");
  check(l.create(&handle), "cublasLtCreate");
  check(l.desc_create(&desc, t.compute, t.scale), "cublasLtMatmulDescCreate");
  const cublasOperation_t op_a = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(l.desc_set(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a), "TRANSA");
  check(l.desc_set(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b), "TRANSB");
  if (s.precision == "fp8") {
    // each scale on its own 256-byte line: cuBLASLt refuses misaligned scale pointers
    allocate(reinterpret_cast<void*&>(scales), 2 * 256, "scales");
    const float one = 1.0f;
    const float* sa = scales;
    const float* sb = scales + 64;
    XFS_CUDA_CALL(cudaMemcpyAsync(scales, &one, sizeof one, cudaMemcpyHostToDevice, stream));
    XFS_CUDA_CALL(cudaMemcpyAsync(scales + 64, &one, sizeof one, cudaMemcpyHostToDevice, stream));
    check(l.desc_set(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa), "A_SCALE");
    check(l.desc_set(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb), "B_SCALE");
  }
  // column-major: op(A) is m x k, op(B) k x n
  check(l.layout_create(&a_layout, t.a, s.trans_a ? s.k : s.m, s.trans_a ? s.m : s.k,
                        s.trans_a ? s.k : s.m),
        "cublasLtMatrixLayoutCreate(A)");
  check(l.layout_create(&b_layout, t.a, s.trans_b ? s.n : s.k, s.trans_b ? s.k : s.n,
                        s.trans_b ? s.n : s.k),
        "cublasLtMatrixLayoutCreate(B)");
  check(l.layout_create(&c_layout, t.c, s.m, s.n, s.m), "cublasLtMatrixLayoutCreate(C)");
  check(l.preference_create(&preference), "cublasLtMatmulPreferenceCreate");
  const std::uint64_t ws = kWorkspaceBytes;
  check(l.preference_set(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
        "MAX_WORKSPACE_BYTES");
  choose_algorithm();
}

void Gemm::Impl::release() noexcept {
  if (stream.get()) cudaStreamSynchronize(stream);
  for (detail::Stream& st : streams) cudaStreamSynchronize(st);
  for (Tile& tile : tiles) {
    if (tile.b) l.layout_destroy(tile.b);
    if (tile.c) l.layout_destroy(tile.c);
  }
  for (void* p : stream_workspaces) {
    if (p) cudaFree(p);
  }
  for (void* p : small) {
    if (p) cudaFree(p);
  }
  for (HostSet& h : host) {
    for (void* p : {h.a, h.b, h.d}) {
      if (!p) continue;
      if (h.pinned) {
        cudaFreeHost(p);
      } else {
        std::free(p);
      }
    }
  }
  if (preference) l.preference_destroy(preference);
  if (a_layout) l.layout_destroy(a_layout);
  if (b_layout) l.layout_destroy(b_layout);
  if (c_layout) l.layout_destroy(c_layout);
  if (desc) l.desc_destroy(desc);
  if (handle) l.destroy(handle);
  for (auto* v : {&a, &b, &c, &d}) {
    for (void* p : *v) {
      if (p) cudaFree(p);
    }
  }
  for (void* p : {workspace, static_cast<void*>(scales), static_cast<void*>(check_out)}) {
    if (p) cudaFree(p);
  }
}

cublasStatus_t Gemm::Impl::launch(int copy) {
  const double alpha64 = s.alpha, beta64 = s.beta;
  const float alpha32 = static_cast<float>(s.alpha), beta32 = static_cast<float>(s.beta);
  const void* alpha = t.scale == CUDA_R_64F ? static_cast<const void*>(&alpha64) : &alpha32;
  const void* beta = t.scale == CUDA_R_64F ? static_cast<const void*>(&beta64) : &beta32;
  return l.matmul(handle, desc, alpha, a[copy], a_layout, b[copy], b_layout, beta, c[copy],
                  c_layout, d[copy], c_layout, &heuristic.algo, workspace, kWorkspaceBytes, stream);
}

void* Gemm::Impl::host_alloc(std::size_t bytes, bool pinned_memory) {
  void* p = nullptr;
  if (pinned_memory) {
    const cudaError_t status = cudaMallocHost(&p, bytes);
    if (status != cudaSuccess) {
      cudaGetLastError();
      throw AllocationError("pinned", bytes, cudaGetErrorString(status));
    }
  } else {
    p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (!p) throw AllocationError("pageable", bytes, "aligned_alloc failed");
    std::memset(p, 0, bytes);  // touched: its pages exist before any copy
  }
  return p;
}

Gemm::Impl::HostSet& Gemm::Impl::host_set(bool pinned_memory) {
  HostSet& h = host[pinned_memory ? 1 : 0];
  if (h.a) return h;
  h.pinned = pinned_memory;
  h.a = host_alloc(bytes_a(), pinned_memory);
  h.b = host_alloc(bytes_b(), pinned_memory);
  h.d = host_alloc(bytes_d(), pinned_memory);
  XFS_CUDA_CALL(cudaMemcpy(h.a, a[0], bytes_a(), cudaMemcpyDeviceToHost));
  XFS_CUDA_CALL(cudaMemcpy(h.b, b[0], bytes_b(), cudaMemcpyDeviceToHost));
  return h;
}

cublasStatus_t Gemm::Impl::launch_tile(const Tile& tile, std::int64_t first_column, cudaStream_t on,
                                       void* space) {
  const double alpha64 = s.alpha, beta64 = s.beta;
  const float alpha32 = static_cast<float>(s.alpha), beta32 = static_cast<float>(s.beta);
  const void* alpha = t.scale == CUDA_R_64F ? static_cast<const void*>(&alpha64) : &alpha32;
  const void* beta = t.scale == CUDA_R_64F ? static_cast<const void*>(&beta64) : &beta32;
  const std::size_t in = kernels::type_bytes(t.input), out = kernels::type_bytes(t.output);
  auto* bp = static_cast<char*>(b[0]) + static_cast<std::size_t>(first_column) * s.k * in;
  auto* cp = static_cast<char*>(c[0]) + static_cast<std::size_t>(first_column) * s.m * out;
  auto* dp = static_cast<char*>(d[0]) + static_cast<std::size_t>(first_column) * s.m * out;
  return l.matmul(handle, desc, alpha, a[0], a_layout, bp, tile.b, beta, cp, tile.c, dp, tile.c,
                  &tile.algo.algo, space, kWorkspaceBytes, on);
}

void Gemm::Impl::prepare_tiles(int count, int count_streams) {
  const std::int64_t width = (s.n + count - 1) / count;
  const std::int64_t last = s.n - width * (count - 1);
  const bool same = !tiles.empty() && tiles[0].width == width &&
                    (tiles.size() == 1 ? last == width : tiles.back().width == last);
  if (!same) {
    for (Tile& tile : tiles) {
      if (tile.b) l.layout_destroy(tile.b);
      if (tile.c) l.layout_destroy(tile.c);
    }
    tiles.clear();
    for (std::int64_t w : {width, last}) {
      if (w <= 0 || (!tiles.empty() && tiles[0].width == w)) continue;
      Tile tile;
      tile.width = w;
      check(l.layout_create(&tile.b, t.a, s.k, w, s.k), "cublasLtMatrixLayoutCreate(B tile)");
      check(l.layout_create(&tile.c, t.c, s.m, w, s.m), "cublasLtMatrixLayoutCreate(C tile)");
      std::vector<cublasLtMatmulHeuristicResult_t> found(8);
      int returned = 0;
      check(l.heuristic(handle, desc, a_layout, tile.b, tile.c, tile.c, preference,
                        static_cast<int>(found.size()), found.data(), &returned),
            "cublasLtMatmulAlgoGetHeuristic(tile)");
      cublasStatus_t status = CUBLAS_STATUS_NOT_SUPPORTED;
      for (int i = 0; i < returned && status != CUBLAS_STATUS_SUCCESS; ++i) {
        tile.algo = found[static_cast<std::size_t>(i)];
        status = launch_tile(tile, 0, stream, workspace);
      }
      check(status, "cublasLtMatmul(tile)");
      tiles.push_back(tile);
    }
    XFS_CUDA_CALL(cudaStreamSynchronize(stream));
  }
  while (static_cast<int>(streams.size()) < count_streams) {
    streams.push_back(detail::Stream::create());
    stream_workspaces.push_back(nullptr);
    allocate(stream_workspaces.back(), kWorkspaceBytes, "workspace of a stream");
    tiles_done.push_back(detail::Event::create(cudaEventDisableTiming));
  }
  if (!a_ready.get()) a_ready = detail::Event::create(cudaEventDisableTiming);
}

Gemm::Gemm(const GemmSpec& spec) {
  int device_count = 0;
  XFS_CUDA_CALL(cudaGetDeviceCount(&device_count));
  if (spec.device < 0 || spec.device >= device_count) {
    throw NoDeviceError("GPU index " + std::to_string(spec.device) + " out of range");
  }
  cudaDeviceProp prop{};
  XFS_CUDA_CALL(cudaGetDeviceProperties(&prop, spec.device));
  const std::string reason = refusal(spec, prop.major * 10 + prop.minor);
  if (!reason.empty()) throw UsageError(reason);
  const std::size_t one = bytes_needed(spec, 1) - kWorkspaceBytes;
  copies_ = spec.rotation_bytes > one ? static_cast<int>(std::min<std::size_t>(
                                            kMostCopies, (spec.rotation_bytes + one - 1) / one))
                                      : 1;
  XFS_CUDA_CALL(cudaSetDevice(spec.device));
  std::size_t free = 0, total = 0;
  XFS_CUDA_CALL(cudaMemGetInfo(&free, &total));
  const std::size_t needed = bytes_needed(spec, copies_);
  if (needed > free) {
    throw AllocationError("device", needed,
                          "the GEMM's matrices need " + std::to_string(needed >> 20) +
                              " MiB and GPU " + std::to_string(spec.device) + " has " +
                              std::to_string(free >> 20) + " MiB free");
  }
  impl_ = std::make_unique<Impl>(spec, copies_);
  try {
    impl_->setup();
  } catch (...) {
    impl_->release();
    throw;
  }
  const Lt& l = impl_->l;
  const cublasLtMatmulAlgo_t* algo = &impl_->heuristic.algo;
  std::size_t written = 0;
  l.algo_get(algo, CUBLASLT_ALGO_CONFIG_ID, &algorithm_.id, sizeof algorithm_.id, &written);
  l.algo_get(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &algorithm_.tile, sizeof algorithm_.tile,
             &written);
  l.algo_get(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &algorithm_.stages, sizeof algorithm_.stages,
             &written);
  l.algo_get(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &algorithm_.split_k, sizeof algorithm_.split_k,
             &written);
  algorithm_.workspace_bytes = impl_->heuristic.workspaceSize;
  algorithm_.rank = impl_->rank;
  algorithm_.candidates = impl_->candidates;
  algorithm_.tuned_s = impl_->tuned_s;
}

Gemm::~Gemm() {
  if (impl_) impl_->release();
}

std::size_t Gemm::footprint_bytes() const { return bytes_needed(impl_->s, copies_); }

double Gemm::time(std::int64_t iterations) {
  Impl& g = *impl_;
  XFS_CUDA_CALL(cudaSetDevice(g.s.device));
  XFS_CUDA_CALL(cudaEventRecord(g.start, g.stream));
  for (std::int64_t i = 0; i < iterations; ++i) g.run(static_cast<int>(i % g.copies));
  XFS_CUDA_CALL(cudaEventRecord(g.stop, g.stream));
  XFS_CUDA_CALL(cudaEventSynchronize(g.stop));
  float ms = 0;
  XFS_CUDA_CALL(cudaEventElapsedTime(&ms, g.start, g.stop));
  return static_cast<double>(ms) * 1e-3;
}

double Gemm::time_padded(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t iterations) {
  Impl& g = *impl_;
  if (m < 1 || n < 1 || k < 1 || m > g.s.m || n > g.s.n || k > g.s.k) {
    throw UsageError("a padded GEMM's shape must fit in the GEMM it is padded to");
  }
  XFS_CUDA_CALL(cudaSetDevice(g.s.device));
  const std::size_t in = kernels::type_bytes(g.t.input), out = kernels::type_bytes(g.t.output);
  // column-major, as stored: op(A) m x k is A (m x k) or A^T (k x m); likewise B
  const std::int64_t a_rows = g.s.trans_a ? k : m, a_cols = g.s.trans_a ? m : k;
  const std::int64_t b_rows = g.s.trans_b ? n : k, b_cols = g.s.trans_b ? k : n;
  const std::int64_t pa_rows = g.s.trans_a ? g.s.k : g.s.m, pb_rows = g.s.trans_b ? g.s.n : g.s.k;
  const std::int64_t shape[3] = {m, n, k};
  if (!std::equal(shape, shape + 3, g.small_shape)) {
    for (void*& p : g.small) {
      if (p) cudaFree(p);
      p = nullptr;
    }
    std::copy(shape, shape + 3, g.small_shape);
    g.allocate(g.small[0], static_cast<std::size_t>(m * k) * in, "A (unpadded)");
    g.allocate(g.small[1], static_cast<std::size_t>(k * n) * in, "B (unpadded)");
    g.allocate(g.small[2], static_cast<std::size_t>(m * n) * out, "C (unpadded)");
    kernels::fill(g.small[0], static_cast<std::size_t>(m * k), g.t.input, g.seed_of('a', 0),
                  g.stream);
    kernels::fill(g.small[1], static_cast<std::size_t>(k * n), g.t.input, g.seed_of('b', 0),
                  g.stream);
  }
  XFS_CUDA_CALL(cudaEventRecord(g.start, g.stream));
  for (std::int64_t i = 0; i < iterations; ++i) {
    XFS_CUDA_CALL(cudaMemcpy2DAsync(g.a[0], pa_rows * in, g.small[0], a_rows * in, a_rows * in,
                                    a_cols, cudaMemcpyDeviceToDevice, g.stream));
    XFS_CUDA_CALL(cudaMemcpy2DAsync(g.b[0], pb_rows * in, g.small[1], b_rows * in, b_rows * in,
                                    b_cols, cudaMemcpyDeviceToDevice, g.stream));
    g.run(0);
    XFS_CUDA_CALL(cudaMemcpy2DAsync(g.small[2], m * out, g.d[0], g.s.m * out, m * out, n,
                                    cudaMemcpyDeviceToDevice, g.stream));
  }
  XFS_CUDA_CALL(cudaEventRecord(g.stop, g.stream));
  XFS_CUDA_CALL(cudaEventSynchronize(g.stop));
  float ms = 0;
  XFS_CUDA_CALL(cudaEventElapsedTime(&ms, g.start, g.stop));
  return static_cast<double>(ms) * 1e-3;
}

TransferTiming Gemm::time_with_transfers(bool pinned, int tiles, int streams,
                                         std::int64_t iterations, bool check_delivery) {
  Impl& g = *impl_;
  if (tiles < 1 || streams < 1) throw UsageError("tiles and streams must be 1 or more");
  tiles = static_cast<int>(std::min<std::int64_t>(tiles, g.s.n));
  if (tiles > 1 && g.s.trans_b) {
    throw UsageError("tiled transfers split op(B)'s columns: they need op(B) = B (nn or tn)");
  }
  XFS_CUDA_CALL(cudaSetDevice(g.s.device));
  Impl::HostSet& h = g.host_set(pinned);
  const std::size_t in = kernels::type_bytes(g.t.input), out = kernels::type_bytes(g.t.output);
  if (tiles > 1) g.prepare_tiles(tiles, streams);
  XFS_CUDA_CALL(cudaDeviceSynchronize());
  const auto start = std::chrono::steady_clock::now();
  for (std::int64_t it = 0; it < iterations; ++it) {
    if (tiles == 1) {
      XFS_CUDA_CALL(cudaMemcpyAsync(g.a[0], h.a, g.bytes_a(), cudaMemcpyHostToDevice, g.stream));
      XFS_CUDA_CALL(cudaMemcpyAsync(g.b[0], h.b, g.bytes_b(), cudaMemcpyHostToDevice, g.stream));
      g.run(0);
      XFS_CUDA_CALL(cudaMemcpyAsync(h.d, g.d[0], g.bytes_d(), cudaMemcpyDeviceToHost, g.stream));
      continue;
    }
    cudaStream_t first = g.streams[0];
    XFS_CUDA_CALL(cudaMemcpyAsync(g.a[0], h.a, g.bytes_a(), cudaMemcpyHostToDevice, first));
    XFS_CUDA_CALL(cudaEventRecord(g.a_ready, first));
    const std::int64_t width = g.tiles[0].width;
    for (int j = 0; j < tiles; ++j) {
      const std::int64_t column = j * width;
      const Impl::Tile& tile =
          std::min(width, g.s.n - column) == width ? g.tiles[0] : g.tiles.back();
      cudaStream_t on = g.streams[static_cast<std::size_t>(j % streams)];
      XFS_CUDA_CALL(cudaStreamWaitEvent(on, g.a_ready, 0));
      XFS_CUDA_CALL(cudaMemcpyAsync(static_cast<char*>(g.b[0]) + column * g.s.k * in,
                                    static_cast<char*>(h.b) + column * g.s.k * in,
                                    static_cast<std::size_t>(tile.width * g.s.k) * in,
                                    cudaMemcpyHostToDevice, on));
      check(g.launch_tile(tile, column, on,
                          g.stream_workspaces[static_cast<std::size_t>(j % streams)]),
            "cublasLtMatmul(tile)");
      XFS_CUDA_CALL(cudaMemcpyAsync(static_cast<char*>(h.d) + column * g.s.m * out,
                                    static_cast<char*>(g.d[0]) + column * g.s.m * out,
                                    static_cast<std::size_t>(tile.width * g.s.m) * out,
                                    cudaMemcpyDeviceToHost, on));
    }
    // the next iteration's A must not overwrite what this one's tiles still read
    for (int i = 1; i < streams; ++i) {
      cudaEvent_t done = g.tiles_done[static_cast<std::size_t>(i)];
      XFS_CUDA_CALL(cudaEventRecord(done, g.streams[static_cast<std::size_t>(i)]));
      XFS_CUDA_CALL(cudaStreamWaitEvent(first, done, 0));
    }
  }
  XFS_CUDA_CALL(cudaDeviceSynchronize());
  TransferTiming r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!check_delivery) return r;
  std::vector<char> device_d(g.bytes_d());
  XFS_CUDA_CALL(cudaMemcpy(device_d.data(), g.d[0], g.bytes_d(), cudaMemcpyDeviceToHost));
  r.delivered = std::memcmp(device_d.data(), h.d, g.bytes_d()) == 0;
  return r;
}

GemmVerification Gemm::verify(int samples, bool inject_fault) {
  Impl& g = *impl_;
  samples = std::clamp(samples, 2, 4096);
  XFS_CUDA_CALL(cudaSetDevice(g.s.device));
  g.run(0);
  // a gross error: as large as the dot product can be
  if (inject_fault) kernels::corrupt(g.d[0], g.t.output, 0, static_cast<double>(g.s.k), g.stream);
  kernels::CheckArgs args{g.a[0],
                          g.b[0],
                          g.d[0],
                          g.t.input,
                          g.t.output,
                          g.s.m,
                          g.s.n,
                          g.s.k,
                          g.s.trans_a,
                          g.s.trans_b,
                          g.s.alpha,
                          g.s.beta,
                          g.seed_of('A', 0),
                          g.seed_of('B', 0),
                          g.seed_of('C', 0),
                          g.s.seed ^ 0xC0FFEEull};
  kernels::check(args, samples, g.check_out, g.stream);
  std::vector<double> out(4 * static_cast<std::size_t>(samples));
  XFS_CUDA_CALL(cudaMemcpyAsync(out.data(), g.check_out, out.size() * sizeof(double),
                                cudaMemcpyDeviceToHost, g.stream));
  XFS_CUDA_CALL(cudaStreamSynchronize(g.stream));
  const double tolerance = find(g.s.precision)->tolerance;
  GemmVerification v;
  v.samples = samples;
  for (int i = 0; i < samples; ++i) {
    const double error = out[4 * i] / std::max(out[4 * i + 1], 1e-300);
    if (!(error <= tolerance)) ++v.failures;  // NaN fails too
    if (!(error <= v.worst_error)) {
      v.worst_error = error;
      v.worst_row = static_cast<std::int64_t>(out[4 * i + 2]);
      v.worst_column = static_cast<std::int64_t>(out[4 * i + 3]);
    }
  }
  v.ok = v.failures == 0;
  return v;
}

}  // namespace xferscope::gemm
