// A transfer-heavy CUDA program for `xferscope trace`'s tests and benchmark. It makes every kind
// of copy the trace's findings are about, times each kind itself with CUDA events, and prints
// one JSON line: the calls, bytes and event-timed seconds per kind, so the trace can be checked
// against the program's own account.
//   copies [--small N] [--crash] [--fix pageable,repeat,small,unused|all] [--accuracy]
//   [--no-events]
//          [--driver]
// --driver adds 10 uploads of 1 MiB through the driver API (cuMemcpyHtoD), as JAX makes them.
// --accuracy makes only large asynchronous copies from pinned memory, whose event timing is the
// copy's own GPU time (the trace's totals are checked against it).
// --fix runs the same work with those fixes applied: pinned instead of pageable buffers, the
// repeated upload made once, the small copies made as one, the unused pinned buffer not made.
// --no-events leaves out the per-copy event timing (its own cost would swamp small copies).
// Besides its tally it prints phase_s: host seconds from the first copy to the last.
#include <cuda.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#define CHECK(x)                                                                     \
  do {                                                                               \
    cudaError_t e = (x);                                                             \
    if (e != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); \
      std::exit(2);                                                                  \
    }                                                                                \
  } while (0)

__global__ void scale(float* x, std::size_t n) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    x[i] *= 1.0001f;
}

struct Tally {
  long calls = 0;
  long long bytes = 0;
  double seconds = 0;
};
std::map<std::string, Tally> tally;
cudaEvent_t t0, t1;
bool events = true;

// one copy, timed with events around it on its stream
void timed(const char* kind, void* dst, const void* src, std::size_t bytes, cudaMemcpyKind dir,
           bool async, cudaStream_t stream) {
  Tally& t = tally[kind];
  ++t.calls;
  t.bytes += static_cast<long long>(bytes);
  if (!events) {
    if (async) {
      CHECK(cudaMemcpyAsync(dst, src, bytes, dir, stream));
    } else {
      CHECK(cudaMemcpy(dst, src, bytes, dir));
    }
    return;
  }
  CHECK(cudaEventRecord(t0, stream));
  if (async) {
    CHECK(cudaMemcpyAsync(dst, src, bytes, dir, stream));
  } else {
    CHECK(cudaMemcpy(dst, src, bytes, dir));
  }
  CHECK(cudaEventRecord(t1, stream));
  CHECK(cudaEventSynchronize(t1));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, t0, t1));
  t.seconds += ms * 1e-3;
}

int main(int argc, char** argv) {
  int small = 2000;
  bool crash = false, accuracy = false, driver = false;
  std::string fix;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--small") && i + 1 < argc) small = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--crash")) crash = true;
    if (!std::strcmp(argv[i], "--fix") && i + 1 < argc) fix = argv[++i];
    if (!std::strcmp(argv[i], "--no-events")) events = false;
    if (!std::strcmp(argv[i], "--driver")) driver = true;
    if (!std::strcmp(argv[i], "--accuracy")) accuracy = true;
  }
  CHECK(cudaEventCreate(&t0));
  CHECK(cudaEventCreate(&t1));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  const std::size_t big = 64u << 20, piece = 4096;
  std::vector<char> pageable(big);
  std::uint64_t x = 0x9E3779B97F4A7C15ull;  // xorshift: no two 4 KiB pieces alike
  for (std::size_t i = 0; i < big; i += 8) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    std::memcpy(&pageable[i], &x, 8);
  }
  auto fixes = [&](const char* what) {
    return fix == "all" ||
           ("," + fix + ",").find(std::string(",") + what + ",") != std::string::npos;
  };
  char *pinned = nullptr, *unused = nullptr, *staging = nullptr;
  CHECK(cudaMallocHost(&pinned, big));
  std::memcpy(pinned, pageable.data(), big);
  if (fixes("pageable")) {
    CHECK(cudaMallocHost(&staging, big));  // the program's buffer, pinned from the start
    std::memcpy(staging, pageable.data(), big);
  }
  char* device = nullptr;
  CHECK(cudaMalloc(&device, big));
  float* work = nullptr;
  CHECK(cudaMalloc(&work, big));
  CHECK(cudaMemset(work, 0, big));

  if (accuracy) {
    // 20 copies each way back to back between two events: the events time the copies' own GPU
    // time, nothing between them
    for (int way = 0; way < 2; ++way) {
      CHECK(cudaEventRecord(t0, stream));
      for (int i = 0; i < 20; ++i) {
        if (way == 0) CHECK(cudaMemcpyAsync(device, pinned, big, cudaMemcpyHostToDevice, stream));
        if (way == 1) CHECK(cudaMemcpyAsync(pinned, device, big, cudaMemcpyDeviceToHost, stream));
      }
      CHECK(cudaEventRecord(t1, stream));
      CHECK(cudaEventSynchronize(t1));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, t0, t1));
      Tally& t = tally[way == 0 ? "h2d" : "d2h"];
      t.calls += 20;
      t.bytes += 20LL * static_cast<long long>(big);
      t.seconds += ms * 1e-3;
    }
    small = 0;
  }
  CHECK(cudaDeviceSynchronize());
  const auto phase = std::chrono::steady_clock::now();
  std::map<std::string, double> sections;  // host seconds of each part, the fixes' own
  auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  auto mark = std::chrono::steady_clock::now();
  if (!fixes("unused")) CHECK(cudaMallocHost(&unused, 32u << 20));  // pinned, never copied
  sections["unused"] = since(mark);
  mark = std::chrono::steady_clock::now();
  // large uploads and downloads: from pageable memory (fixed: pinned), 8 each
  char* host = fixes("pageable") ? staging : pageable.data();
  const int large = accuracy ? 0 : 8;
  for (int i = 0; i < large; ++i) {
    std::memcpy(host, &i, sizeof i);  // new data each time: not a repeated upload
    timed("h2d", device, host, big, cudaMemcpyHostToDevice, false, stream);
  }
  for (int i = 0; i < large; ++i)
    timed("d2h", host, device, big, cudaMemcpyDeviceToHost, false, stream);
  sections["pageable"] = since(mark);
  mark = std::chrono::steady_clock::now();
  // the same pinned buffer uploaded again and again (fixed: once)
  for (int i = 0; i < (accuracy ? 0 : fixes("repeat") ? 1 : 6); ++i) {
    timed("h2d", device, pinned, big, cudaMemcpyHostToDevice, false, stream);
  }
  sections["repeat"] = since(mark);
  mark = std::chrono::steady_clock::now();
  // many small copies, one after another (fixed: one copy of all their bytes)
  if (accuracy) {
  } else if (fixes("small")) {
    timed("h2d", device, pinned, piece * small, cudaMemcpyHostToDevice, false, stream);
  } else {
    for (int i = 0; i < small; ++i) {
      timed("h2d", device + (i * piece) % big, pinned + (i * piece) % big, piece,
            cudaMemcpyHostToDevice, false, stream);
    }
  }
  sections["small"] = since(mark);
  if (driver) {
    for (int i = 0; i < 10; ++i) {
      if (cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(device), pinned + (i << 20), 1u << 20) !=
          CUDA_SUCCESS) {
        std::fprintf(stderr, "cuMemcpyHtoD failed\n");
        return 2;
      }
      Tally& t = tally["h2d"];
      ++t.calls;
      t.bytes += 1 << 20;
    }
  }
  // kernels, and copies beside them or not
  for (int i = 0; i < 20; ++i) scale<<<264, 256, 0, stream>>>(work, big / sizeof(float));
  CHECK(cudaStreamSynchronize(stream));
  const double phase_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - phase).count();
  if (crash) std::abort();
  std::printf("{\"phase_s\":%.6f,\"sections\":{", phase_s);
  bool comma = false;
  for (const auto& [name, seconds] : sections) {
    std::printf("%s\"%s\":%.6f", comma ? "," : "", name.c_str(), seconds);
    comma = true;
  }
  std::printf("},");
  bool first = true;
  for (const auto& [kind, t] : tally) {
    std::printf("%s\"%s\":{\"calls\":%ld,\"bytes\":%lld,\"seconds\":%.9f}", first ? "" : ",",
                kind.c_str(), t.calls, t.bytes, t.seconds);
    first = false;
  }
  std::printf("}\n");
  CHECK(cudaFreeHost(pinned));
  if (unused) CHECK(cudaFreeHost(unused));
  if (staging) CHECK(cudaFreeHost(staging));
  CHECK(cudaFree(device));
  CHECK(cudaFree(work));
  return 0;
}
