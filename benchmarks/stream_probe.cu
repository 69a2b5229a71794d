// Why a single pinned copy of copy_many's loop trails PyTorch's by 0.5-3 us (issue 49): one
// cudaMemcpyAsync and a wait, timed per call on the host, for each stream a copy can go on
// (the legacy default stream PyTorch's loop uses, the per-thread default stream, a stream made
// non-blocking as copy_many's is, a stream made blocking) and each way to wait (the stream,
// the device, an event). The ways are shuffled every round, so none always runs after another.
// Prints one JSON line per cell: medians and quartiles of the rounds' per-call microseconds.
// With `switch` first, each call instead goes on the legacy stream or a non-blocking one at
// random and waits on its stream, and each call is timed by itself and filed by its stream and
// the stream of the call before (as copy_many's calls follow PyTorch's in a program, and in
// copyapi_bench's shuffled trials): what a change of stream costs the next copy.
//
//   stream_probe ROUNDS CALLS SIZE...
//   stream_probe switch CALLS SIZE...
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "cuda_check.hpp"

namespace {

struct Way {
  const char* stream_name;
  const char* wait_name;
  cudaStream_t stream;
  int wait;  // 0 stream, 1 device, 2 event
};

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double at = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(at);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

}  // namespace

// `calls` copies of each size and way, each on the legacy or the non-blocking stream at random,
// timed one by one and filed by (stream before, stream now).
int switching(int calls, const std::vector<std::size_t>& sizes, void* host, void* device,
              cudaStream_t nonblocking, std::mt19937_64& random) {
  const cudaStream_t streams[2] = {cudaStreamLegacy, nonblocking};
  const char* names[2] = {"legacy", "nonblocking"};
  for (const std::size_t size : sizes) {
    for (const bool up : {true, false}) {
      std::vector<double> per[2][2];
      int before = 0;
      for (int c = -20; c < calls; ++c) {
        const int now = static_cast<int>(random() & 1);
        const auto start = std::chrono::steady_clock::now();
        if (up) {
          CHECK(cudaMemcpyAsync(device, host, size, cudaMemcpyHostToDevice, streams[now]));
        } else {
          CHECK(cudaMemcpyAsync(host, device, size, cudaMemcpyDeviceToHost, streams[now]));
        }
        CHECK(cudaStreamSynchronize(streams[now]));
        const double us =
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                .count();
        if (c >= 0) per[before][now].push_back(us);
        before = now;
      }
      for (int b = 0; b < 2; ++b) {
        for (int n = 0; n < 2; ++n) {
          std::printf(
              "{\"size\": %zu, \"direction\": \"%s\", \"before\": \"%s\", \"stream\": \"%s\", "
              "\"median_us\": %.3f, \"q1_us\": %.3f, \"q3_us\": %.3f, \"calls\": %zu}\n",
              size, up ? "h2d" : "d2h", names[b], names[n], quantile(per[b][n], 0.5),
              quantile(per[b][n], 0.25), quantile(per[b][n], 0.75), per[b][n].size());
        }
      }
      std::fflush(stdout);
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s ROUNDS|switch CALLS SIZE...\n", argv[0]);
    return 2;
  }
  // a count from 1 to `most`, else 0 (refused below)
  auto count = [](const char* text, unsigned long long most) -> unsigned long long {
    char* end = nullptr;
    const unsigned long long n = std::strtoull(text, &end, 10);
    return (*text >= '0' && *text <= '9' && *end == '\0' && n <= most) ? n : 0;
  };
  const bool switch_mode = std::string(argv[1]) == "switch";
  const int rounds = switch_mode ? 0 : static_cast<int>(count(argv[1], 100000));
  const int calls = static_cast<int>(count(argv[2], 1000000));
  std::vector<std::size_t> sizes;
  for (int i = 3; i < argc; ++i) sizes.push_back(count(argv[i], 1ULL << 30));
  if ((!switch_mode && rounds == 0) || calls == 0 ||
      std::find(sizes.begin(), sizes.end(), std::size_t{0}) != sizes.end()) {
    std::fprintf(stderr,
                 "stream_probe: ROUNDS (1-100000, or switch), CALLS (1-1000000) and each SIZE "
                 "(1 B-1 GiB) are whole numbers\n");
    return 2;
  }
  const std::size_t most = *std::max_element(sizes.begin(), sizes.end());
  unsigned char* host = nullptr;
  void* device = nullptr;
  CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host), most, cudaHostAllocDefault));
  CHECK(cudaMalloc(&device, most));
  std::mt19937_64 random(12345);
  for (std::size_t i = 0; i < most; ++i) host[i] = static_cast<unsigned char>(random());
  cudaStream_t nonblocking = nullptr, blocking = nullptr;
  CHECK(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&blocking, cudaStreamDefault));
  cudaEvent_t done = nullptr;
  CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  if (switch_mode) return switching(calls, sizes, host, device, nonblocking, random);
  std::vector<Way> ways;
  const std::pair<const char*, cudaStream_t> streams[] = {{"legacy", cudaStreamLegacy},
                                                          {"per_thread", cudaStreamPerThread},
                                                          {"nonblocking", nonblocking},
                                                          {"blocking", blocking}};
  const char* waits[] = {"stream", "device", "event"};
  for (const auto& [name, stream] : streams) {
    for (int w = 0; w < 3; ++w) ways.push_back(Way{name, waits[w], stream, w});
  }
  for (const std::size_t size : sizes) {
    for (const bool up : {true, false}) {
      std::vector<std::vector<double>> per_call(ways.size());
      std::vector<std::size_t> order(ways.size());
      for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
      for (int round = -2; round < rounds; ++round) {  // two rounds of warm-up
        std::shuffle(order.begin(), order.end(), random);
        for (const std::size_t k : order) {
          const Way& way = ways[k];
          const auto start = std::chrono::steady_clock::now();
          for (int c = 0; c < calls; ++c) {
            if (up) {
              CHECK(cudaMemcpyAsync(device, host, size, cudaMemcpyHostToDevice, way.stream));
            } else {
              CHECK(cudaMemcpyAsync(host, device, size, cudaMemcpyDeviceToHost, way.stream));
            }
            if (way.wait == 0) {
              CHECK(cudaStreamSynchronize(way.stream));
            } else if (way.wait == 1) {
              CHECK(cudaDeviceSynchronize());
            } else {
              CHECK(cudaEventRecord(done, way.stream));
              CHECK(cudaEventSynchronize(done));
            }
          }
          const double us =
              std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                  .count() /
              calls;
          if (round >= 0) per_call[k].push_back(us);
        }
      }
      for (std::size_t k = 0; k < ways.size(); ++k) {
        std::printf(
            "{\"size\": %zu, \"direction\": \"%s\", \"stream\": \"%s\", \"wait\": \"%s\", "
            "\"median_us\": %.3f, \"q1_us\": %.3f, \"q3_us\": %.3f, \"rounds\": %d, "
            "\"calls\": %d}\n",
            size, up ? "h2d" : "d2h", ways[k].stream_name, ways[k].wait_name,
            quantile(per_call[k], 0.5), quantile(per_call[k], 0.25), quantile(per_call[k], 0.75),
            rounds, calls);
      }
      std::fflush(stdout);
    }
  }
  return 0;
}
