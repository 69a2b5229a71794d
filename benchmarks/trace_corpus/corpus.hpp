// The CUDA C++ corpus programs' harness, as corpus.py is the Python ones': their options
// (--steps N, --fixed, --resident), a CUDA call checked, the process's age at the first step
// (its start-up) and the one JSON line each prints.
#pragma once

#include <cuda_runtime.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#define CHECK(x) corpus::check((x), __FILE__, __LINE__)

namespace corpus {

inline void check(cudaError_t e, const char* file, int line) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s:%d %s\n", file, line, cudaGetErrorString(e));
    std::exit(2);
  }
}

// The programs' random start: one xorshift stream a process (the same first value in every
// form, so that each form makes the same data), its raw words and doubles in [lo, hi).
inline std::uint64_t random_state = 0x9E3779B97F4A7C15ull;
inline std::uint64_t next() {
  random_state ^= random_state << 13, random_state ^= random_state >> 7;
  random_state ^= random_state << 17;
  return random_state;
}
inline double uniform(double lo = 0, double hi = 1) {
  return lo + (hi - lo) * (static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0));
}

// A value's noise: a hash of where it is (a frame and a lamp, a tile, a row), in [0, 1).
inline double noise(std::uint64_t key) {
  key += 0x9E3779B97F4A7C15ull;
  key = (key ^ (key >> 30)) * 0xBF58476D1CE4E5B9ull;
  key = (key ^ (key >> 27)) * 0x94D049BB133111EBull;
  return static_cast<double>((key ^ (key >> 31)) >> 11) * (1.0 / 9007199254740992.0);
}

struct Options {
  int steps;
  bool fixed = false, resident = false;
  const char* variant() const { return resident ? "resident" : fixed ? "fixed" : "before"; }
};

// The command line, with `steps` steps by default; a usage line and exit status 2 for any
// other word, or fewer than one step.
inline Options options(int argc, char** argv, int steps) {
  Options o{steps};
  bool usage = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc)
      o.steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--fixed"))
      o.fixed = true;
    else if (!std::strcmp(argv[i], "--resident"))
      o.resident = true;
    else
      usage = true;
  }
  if (usage || o.steps < 1) {
    std::fprintf(stderr, "usage: %s [--steps N (1 or more)] [--fixed] [--resident]\n", argv[0]);
    std::exit(2);
  }
  return o;
}

// Seconds since this process started, from /proc as corpus.py reads them.
inline double process_age_s() {
  std::ifstream stat("/proc/self/stat"), uptime("/proc/uptime");
  std::stringstream text;
  text << stat.rdbuf();
  const std::string s = text.str();
  std::istringstream fields(s.substr(s.rfind(')') + 1));
  std::string field;
  for (int i = 0; i <= 19; ++i) fields >> field;  // field 22: the start, in clock ticks
  double up = 0;
  uptime >> up;
  const double age = up - std::strtod(field.c_str(), nullptr) / sysconf(_SC_CLK_TCK);
  return age > 0 ? age : 0;
}

// The loop's clock: `start()` just before its first step (the GPU synchronized), `stop()`
// after its last (the GPU synchronized), then `report()`: the JSON line, with `extra` (the
// program's own figures, `, "checksum": 1.5`) before its closing brace.
class Loop {
 public:
  void start() {
    startup_s_ = process_age_s();
    started_ = std::chrono::steady_clock::now();
  }
  void stop() {
    seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  }
  // `warmup` steps untimed, then `steps` timed between start() and stop(), the GPU
  // synchronized before and after them; step(i)'s i runs on from the warm-up's.
  template <class Step>
  void run(Step&& step, int warmup, int steps) {
    for (int i = 0; i < warmup; ++i) step(i);
    CHECK(cudaDeviceSynchronize());
    start();
    for (int i = warmup; i < warmup + steps; ++i) step(i);
    CHECK(cudaDeviceSynchronize());
    stop();
  }
  void report(const char* name, const Options& o, const std::string& extra = "") const {
    std::printf(
        "{\"corpus\": \"%s\", \"variant\": \"%s\", \"seconds\": %.9g, \"steps\": %d, "
        "\"startup_s\": %.9g%s}\n",
        name, o.variant(), seconds_, o.steps, startup_s_, extra.c_str());
    std::fflush(stdout);
  }

 private:
  std::chrono::steady_clock::time_point started_;
  double startup_s_ = 0, seconds_ = 0;
};

// The JSON line's `extra` for a program's checksum: the same in every form.
inline std::string checksum(double sum) {
  char extra[64];
  std::snprintf(extra, sizeof extra, ", \"checksum\": %.17g", sum);
  return extra;
}

}  // namespace corpus
