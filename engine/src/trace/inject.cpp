// xferscope's CUPTI injection library (`xferscope trace`): CUDA loads it into an unmodified
// program through CUDA_INJECTION64_PATH and calls InitializeInjection() when the program first
// initializes CUDA. It records, as JSON lines in $XFERSCOPE_TRACE_DIR/trace-<pid>.jsonl:
//   memcpy, memset and kernel activity (kind, bytes, memory kinds, device, stream, GPU start
//   and end, correlation ids); NVTX ranges and marks the program pushes (name, domain, thread,
//   start and end); from callbacks on the runtime and driver API calls that copy,
//   set, synchronize or pin host memory (and on no other call, so the rest of the program runs
//   at full speed): each call's function, host thread, start and end; each runtime copy's
//   pointers, a sampled hash of a host source (repeated uploads of identical data) and the
//   caller's native return addresses (every call's for the first kFramesAll, then one in
//   kFramesEvery; one in kFramesEvery from the start for a call from Python, whose Python stack
//   gives its line); every host allocation or registration with its size and address.
// A call's callback only fills a fixed record and queues it; a writer thread formats and writes
// the queue (every 100 ms, or sooner when it grows), so the traced program's threads do not pay
// for the text. Records beyond $XFERSCOPE_TRACE_LIMIT (per kind) are counted, not written, and a
// totals line per kind at the end keeps the summary exact. Completed buffers are written at once
// and CUPTI is flushed every second, so a crash keeps what came before it; SIGINT, SIGTERM and
// crash signals end the trace on a thread of the library's first and then do what they would
// have done (signals.cpp); a forked child records nothing. In a Python process, a thread of the
// library looks where the main thread is every $XFERSCOPE_TRACE_SAMPLE_S seconds (looks.cpp).
// Kernel records cost every launch (CUPTI instruments the kernel for its timestamps), so
// $XFERSCOPE_TRACE_KERNELS chooses: all, none, or ON/PERIOD[/FIRST[/COUNT]] (milliseconds):
// kernels recorded in windows of ON, at most one every PERIOD, each opened by a copy call, the
// first open FIRST or until COUNT kernels were recorded in it (every kernel of a short program's
// first steps, the start of a long one's), each written as "kwin" lines; copies, sets and
// calls are always all recorded.
// libcupti is opened at run time, not linked: $XFERSCOPE_LIBCUPTI (which `xferscope trace` sets
// to the one cuda-pathfinder finds: NVIDIA's wheels, the loader path, the toolkit), else the
// soname of the CUDA major it was built with; without it the program runs untraced, with a
// warning in its records.
// Its parts (inject.hpp declares what they share): writer.cpp writes the records, callbacks.cpp
// holds the callbacks on the API calls, python_stacks.cpp reads Python stacks; this file opens
// CUPTI, attaches it, switches kernel records and pauses, and ends the trace.
#include "trace/inject.hpp"

#include <cupti.h>
#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "dynlib.hpp"

namespace xferscope::trace {

Cupti cupti;
std::atomic<std::uint64_t> attachment{0};
std::string knobs;
bool knob_api = true, knob_call = true, knob_frames = true, knob_hash = true, knob_activity = true,
     knob_driver = true, knob_python = true, knob_keep_driver = false, knob_d2d_calls = true;
Control& control = *new Control;

namespace {

// How long this process has run (ns), from its start time in /proc/self/stat (clock ticks
// since boot) and CLOCK_BOOTTIME; 0 where they cannot be read. A process whose CUDA starts
// late (after its imports) is said from its own start, not from CUDA's.
std::uint64_t process_age_ns() {
  std::FILE* f = std::fopen("/proc/self/stat", "r");
  if (!f) return 0;
  char buf[1024];
  const std::size_t got = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[got] = 0;
  const char* after = std::strrchr(buf, ')');  // the command's name may hold spaces
  if (!after) return 0;
  unsigned long long ticks = 0;
  // after ") ": the state is field 3; fields 4 to 21 skipped, the start time is field 22
  if (std::sscanf(after + 2,
                  "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d "
                  "%*d %*d %*d %llu",
                  &ticks) != 1)
    return 0;
  const long hz = sysconf(_SC_CLK_TCK);
  timespec now{};
  if (hz <= 0 || clock_gettime(CLOCK_BOOTTIME, &now) != 0) return 0;
  const std::uint64_t boot_ns = std::uint64_t(now.tv_sec) * 1000000000ull + now.tv_nsec;
  const std::uint64_t started_ns = ticks * (1000000000ull / std::uint64_t(hz));
  return boot_ns > started_ns ? boot_ns - started_ns : 0;
}

// Opens libcupti and resolves every entry point; the reason it could not, else empty.
std::string open_cupti() {
  const std::string soname = "libcupti.so." + std::to_string(CUDA_VERSION / 1000);
  const char* chosen = std::getenv("XFERSCOPE_LIBCUPTI");
  const xferscope::dynlib::Opened opened =
      xferscope::dynlib::open_first({chosen ? chosen : "", soname}, RTLD_NOW | RTLD_LOCAL);
  if (!opened.handle) return "cannot load " + soname + " ($XFERSCOPE_LIBCUPTI names the file)";
  std::string missing;
#define XFS_CUPTI_RESOLVE(name) \
  xferscope::dynlib::resolve(cupti.name, opened.handle, #name, missing);
  XFS_CUPTI_ENTRIES(XFS_CUPTI_RESOLVE)
#undef XFS_CUPTI_RESOLVE
  return missing.empty() ? "" : opened.path + " lacks " + missing;
}

// "A/B/C": its numbers, or none where it is anything else (an empty field, a sign, a
// character that is not a digit, a number past 10^12).
std::vector<std::uint64_t> numbers(const char* text) {
  std::vector<std::uint64_t> out;
  std::uint64_t value = 0;
  int digits = 0;
  for (const char* p = text;; ++p) {
    if (*p >= '0' && *p <= '9' && digits < 12) {
      value = value * 10 + static_cast<std::uint64_t>(*p - '0');
      ++digits;
    } else if ((*p == '/' || *p == 0) && digits > 0) {
      out.push_back(value);
      value = 0, digits = 0;
      if (*p == 0) return out;
    } else {
      return {};
    }
  }
}

enum class Kernels { kAll, kNone, kSampled };
Kernels kernel_mode = Kernels::kAll;
unsigned kernel_on_ms = 0, kernel_period_ms = 0;  // the windows of Kernels::kSampled
unsigned kernel_first_ms = 0;                     // how long the first stays open (0: ON)
std::uint64_t kernel_first_count = 0;             // or until it recorded this many (0: no end)
constexpr unsigned kCountingFlushMs = 100;        // CUPTI's flush period while they are counted
constexpr unsigned kFlushMs = 1000;               // and after
constexpr CUpti_ActivityKind kCopyKinds[] = {
    CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMCPY2, CUPTI_ACTIVITY_KIND_MEMSET};

// One kind of CUPTI activity record on or off (none with the noactivity knob); false when CUPTI
// refused.
bool switch_activity(CUpti_ActivityKind kind, bool on) {
  if (!knob_activity) return true;
  return (on ? cupti.cuptiActivityEnable(kind) : cupti.cuptiActivityDisable(kind)) == CUPTI_SUCCESS;
}

// Whether kernels are to be recorded now: per --kernels, while not paused. Under control.mutex.
bool kernels_wanted() {
  return !control.paused &&
         (kernel_mode == Kernels::kAll || (kernel_mode == Kernels::kSampled && control.window));
}

// Kernel records on or off, under control.mutex. Sampled, each window's opening and closing is
// a "kwin" line (a: opened, b: closed, CUPTI's clock); one left open ends with the trace.
void set_kernels(bool on) {
  if (on == control.kernels) return;
  {
    Timed timed{kKernelSwitch};
    switch_activity(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, on);
  }
  control.kernels = on;
  if (kernel_mode != Kernels::kSampled) return;
  std::uint64_t now = 0;
  cupti.cuptiGetTimestamp(&now);
  char buf[96];
  std::snprintf(buf, sizeof buf, "{\"t\":\"kwin\",\"%s\":%" PRIu64 "}", on ? "a" : "b", now);
  std::lock_guard<std::mutex> lock(out_mutex);
  line(buf);
}

// Keeps the first window open until kernel_first_ms pass or kernel_first_count kernels were
// delivered since `from` (CUPTI delivers a buffer once it is full: while they are counted it
// is asked to flush every kCountingFlushMs, and kBufferBytes holds a few thousand); true when
// the trace closed meanwhile. Under control.mutex (`lock`). CUPTI detached
// (xferscope_trace_pause(2)) is not called: a call would attach it again.
bool first_window(std::unique_lock<std::mutex>& lock, std::uint64_t from) {
  const auto stopped = [] { return closed.load(); };
  if (!kernel_first_count)
    return control.wake.wait_for(lock, std::chrono::milliseconds(kernel_first_ms), stopped);
  const auto flush_every = [](unsigned ms) {
    if (!control.detached.load()) cupti.cuptiActivityFlushPeriod(ms);
  };
  flush_every(kCountingFlushMs);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kernel_first_ms);
  bool ended = false;
  while (!ended && std::chrono::steady_clock::now() < until &&
         kernels_delivered.load(std::memory_order_relaxed) - from < kernel_first_count) {
    ended = control.wake.wait_for(lock, std::chrono::milliseconds(10), stopped);
  }
  if (!ended) flush_every(kFlushMs);
  return ended;
}

// Opens and closes the kernel windows (Kernels::kSampled) until the trace closes: a window
// opens at the first copy call after the gap (so windows fall where the program copies, not in
// its start-up), stays open kernel_on_ms (the first: first_window), and the next may open
// kernel_period_ms after it did.
void sampler() {
  std::unique_lock<std::mutex> lock(control.mutex);
  const auto stopped = [] { return closed.load(); };
  int windows = 0;  // opened so far; the first opens at the first copy call
  while (!closed.load(std::memory_order_relaxed)) {
    if (control.window && windows == 1 && kernel_first_ms) {
      if (first_window(lock, kernels_delivered.load(std::memory_order_relaxed))) break;
    } else {
      const unsigned ms = control.window ? kernel_on_ms
                          : windows == 0 ? 0
                                         : kernel_period_ms - kernel_on_ms;
      if (control.wake.wait_for(lock, std::chrono::milliseconds(ms), stopped)) break;
    }
    if (!control.window) {  // wait for a copy call, looking every 10 ms
      const std::uint64_t seen = unwound.load(std::memory_order_relaxed);
      while (unwound.load(std::memory_order_relaxed) == seen) {
        if (control.wake.wait_for(lock, std::chrono::milliseconds(10), stopped)) return;
      }
    }
    control.window = !control.window;
    windows += control.window ? 1 : 0;
    set_kernels(kernels_wanted());
  }
}

void finish() {
  if (!recording_here() || closed.exchange(true)) return;  // a forked child ends nothing
  end_looks();
  {
    // a signal may arrive while the sampler holds the lock: then the window stays open
    std::unique_lock<std::mutex> lock(control.mutex, std::try_to_lock);
    if (lock.owns_lock() && kernel_mode == Kernels::kSampled) set_kernels(false);
    control.wake.notify_all();
  }
  // detached, CUPTI has nothing left to flush (and a call would attach it again)
  if (!control.detached.load()) cupti.cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  write_end();
}

// Attaches CUPTI as this library uses it: its settings, activity buffers, the copy, memset
// and (per --kernels) kernel records, the callbacks on the calls worth a record. At
// initialization, and again after xferscope_trace_pause detached it. Under control.mutex.
bool attach() {
  if (knob("hostbuf")) {
    std::uint8_t on = 1;
    std::size_t size = sizeof on;
    cupti.cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED, &size,
                                    &on);
  }
  if (knob("nothreadbuf")) {
    std::uint8_t off = 0;
    std::size_t size = sizeof off;
    cupti.cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER, &size, &off);
  }
  {  // buffer_requested hands CUPTI zeroed buffers: it need not clear them on the program's thread
    std::uint8_t zeroed = 1;
    std::size_t size = sizeof zeroed;
    cupti.cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER, &size, &zeroed);
  }
  bool ok =
      cupti.cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) == CUPTI_SUCCESS;
  for (CUpti_ActivityKind kind : kCopyKinds) ok = switch_activity(kind, true) && ok;
  // NVTX ranges, where the program or its framework pushes them (and NVTX_INJECTION64_PATH
  // names libcupti, as `xferscope trace` sets it): they can mark a loop's steps; no record
  // where nothing pushes one, and none at all where CUPTI refuses
  if (!knob("nonvtx")) switch_activity(CUPTI_ACTIVITY_KIND_MARKER, true);
  set_kernels(kernels_wanted());
  cupti.cuptiActivityFlushPeriod(kFlushMs);
  if (knob("nosubscribe")) {
  } else if (cupti.cuptiSubscribe(&control.subscriber, on_api, nullptr) == CUPTI_SUCCESS) {
    enable_callbacks(1);  // only the calls that copy, set, synchronize or pin
  } else {
    ok = false;
  }
  return ok;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  static bool done = false;
  if (done) return 1;
  done = true;
  const char* dir = std::getenv("XFERSCOPE_TRACE_DIR");
  if (!dir) return 0;
  if (const char* l = std::getenv("XFERSCOPE_TRACE_LIMIT")) limit = std::strtoull(l, nullptr, 10);
  if (const char* k = std::getenv("XFERSCOPE_TRACE_KNOBS")) {
    knobs = k;
    knob_api = !knob("noapi");
    knob_call = !knob("nocall");
    knob_frames = !knob("noframes");
    knob_hash = !knob("nohash");
    knob_activity = !knob("noactivity");
    knob_driver = !knob("nodriver");
    knob_python = !knob("nopython");
    knob_keep_driver = knob("keepdriver");  // the driver's callbacks never turned off
    knob_d2d_calls = !knob("nod2dcalls");   // device-to-device copy calls not recorded
  }
  if (knob("nokernel")) kernel_mode = Kernels::kNone;
  std::string kernels_bad;
  if (const char* k = std::getenv("XFERSCOPE_TRACE_KERNELS")) {
    const std::vector<std::uint64_t> n = numbers(k);  // ON/PERIOD[/FIRST[/COUNT]]
    if (!std::strcmp(k, "none")) {
      kernel_mode = Kernels::kNone;
    } else if (n.size() >= 2 && n.size() <= 4 && n[0] > 0 && n[0] < n[1] && n[1] <= 3600000 &&
               (n.size() < 3 || n[2] <= 100000000) &&
               (n.size() < 4 || n[2] > 0)) {  // a count ends a first window
      kernel_mode = Kernels::kSampled;
      kernel_on_ms = static_cast<unsigned>(n[0]), kernel_period_ms = static_cast<unsigned>(n[1]);
      kernel_first_ms = n.size() >= 3 ? static_cast<unsigned>(n[2]) : 0;
      kernel_first_count = n.size() == 4 ? n[3] : 0;
    } else if (std::strcmp(k, "all") != 0) {
      kernels_bad = k;
    }
  }
  const std::string path = std::string(dir) + "/trace-" + std::to_string(getpid()) + ".jsonl";
  out = std::fopen(path.c_str(), "w");
  if (!out) return 0;
  if (const std::string failed = open_cupti(); !failed.empty()) {
    line(("{\"t\":\"warning\",\"m\":\"not traced: " + escaped(failed.c_str()) + "\"}").c_str());
    std::fclose(out);
    out = nullptr;
    return 1;
  }
  std::uint64_t now = 0;
  cupti.cuptiGetTimestamp(&now);
  char buf[384];
  std::snprintf(buf, sizeof buf,
                "{\"t\":\"start\",\"pid\":%d,\"ppid\":%d,\"ts\":%" PRIu64 ",\"age\":%" PRIu64
                ",\"limit\":%" PRIu64
                ",\"kernels\":\"%s\",\"on_ms\":%u,\"period_ms\":%u,"
                "\"first_ms\":%u,\"first_kernels\":%" PRIu64 "}",
                getpid(), getppid(), now, process_age_ns(), limit,
                kernel_mode == Kernels::kAll    ? "all"
                : kernel_mode == Kernels::kNone ? "none"
                                                : "sampled",
                kernel_on_ms, kernel_period_ms, kernel_first_ms, kernel_first_count);
  line(buf);
  if (!kernels_bad.empty()) {
    line(("{\"t\":\"warning\",\"m\":\"XFERSCOPE_TRACE_KERNELS=" + escaped(kernels_bad.c_str()) +
          " is not all, none or ON/PERIOD[/FIRST[/COUNT]] (ON below PERIOD): all kernels "
          "recorded\"}")
             .c_str());
  }
  std::fflush(out);
  if (knob("idle")) {  // loaded and nothing enabled: what the injection itself costs
    std::fclose(out);
    out = nullptr;
    return 1;
  }
  bool ok;
  {
    std::lock_guard<std::mutex> lock(control.mutex);
    ok = attach();
  }
  if (kernel_mode == Kernels::kSampled) std::thread(sampler).detach();
  if (!ok) line("{\"t\":\"warning\",\"m\":\"some CUPTI activity could not be enabled\"}");
  watch_signals(finish);
  std::atexit(finish);
  std::thread(writer).detach();
  start_looks(dir);
  return 1;
}

// For benchmarks/torch_train_loop.py: turns every record this library makes off (mode 1,
// paused) or back on (0), or detaches CUPTI from the process altogether (2: cuptiFinalize, after
// a flush; the caller synchronizes the GPU first), so one process times its loop traced and
// untraced, alternated; resuming from 2 attaches CUPTI again. 0 when done, -1 when nothing is
// traced or the mode is not 0, 1 or 2.
extern "C" __attribute__((visibility("default"))) int xferscope_trace_pause(int mode) {
  std::lock_guard<std::mutex> lock(control.mutex);
  if (!out || closed.load() || mode < 0 || mode > 2) return -1;
  const bool paused = mode != 0;
  if (control.detached && !paused) {  // attach again: everything as at the start
    control.detached = false;
    control.paused = false;
    control.kernels = false;
    attachment.fetch_add(1);
    return attach() ? 0 : -1;
  }
  if (control.detached) return mode == 2 ? 0 : -1;  // pausing a detached CUPTI: attach first
  if (paused != control.paused) {
    control.paused = paused;
    enable_callbacks(paused ? 0 : 1);
    for (CUpti_ActivityKind kind : kCopyKinds) switch_activity(kind, !paused);
    set_kernels(kernels_wanted());
  }
  if (mode == 2) {
    cupti.cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    cupti.cuptiFinalize();
    control.detached = true;
    control.subscriber = nullptr;
  }
  return 0;
}

}  // namespace xferscope::trace
