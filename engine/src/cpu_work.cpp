#include "xferscope/cpu_work.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>

namespace xferscope {

namespace {

std::atomic<std::uint64_t> sink{0};

// Units per second: the best of a few runs of about 2 ms each.
double calibrate() {
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    constexpr std::uint64_t kUnits = 200000;
    const auto begin = std::chrono::steady_clock::now();
    do_cpu_work(kUnits);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    best = std::max(best, static_cast<double>(kUnits) / s);
  }
  return best;
}

}  // namespace

void do_cpu_work(std::uint64_t units) {
  std::uint64_t x = 0x9E3779B97F4A7C15ull;
  for (std::uint64_t i = 0; i < units; ++i) {
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= i;
  }
  sink.fetch_add(x, std::memory_order_relaxed);  // keeps the compiler from dropping the loop
}

std::uint64_t cpu_work_for(double seconds) {
  static const double rate = calibrate();
  return seconds <= 0 ? 0 : static_cast<std::uint64_t>(std::llround(seconds * rate));
}

}  // namespace xferscope
