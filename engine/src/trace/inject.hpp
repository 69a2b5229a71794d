// Internal to the CUPTI injection library (inject.cpp): the CUPTI entry points, the state its
// parts share (the trace file, the queue of calls, the switches) and what each part gives the
// others: writer.cpp, callbacks.cpp, python_stacks.cpp and inject.cpp itself.
#pragma once

#include <cupti.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

namespace xferscope::trace {

// ---- inject.cpp: CUPTI, the knobs, the switches ----

// The CUPTI entry points used, resolved from the libcupti opened at initialization.
// clang-format off
#define XFS_CUPTI_ENTRIES(X)                                                                  \
  X(cuptiActivityDisable) X(cuptiActivityEnable) X(cuptiActivityFlushAll)                   \
  X(cuptiActivityFlushPeriod)                                                               \
  X(cuptiActivityGetNextRecord) X(cuptiActivityGetNumDroppedRecords)                        \
  X(cuptiActivityRegisterCallbacks) X(cuptiActivitySetAttribute) X(cuptiEnableCallback)     \
  X(cuptiFinalize) X(cuptiGetCallbackName) X(cuptiGetTimestamp) X(cuptiSubscribe)
// clang-format on
struct Cupti {
#define XFS_CUPTI_SLOT(name) decltype(&::name) name = nullptr;
  XFS_CUPTI_ENTRIES(XFS_CUPTI_SLOT)
#undef XFS_CUPTI_SLOT
};
extern Cupti cupti;

// CUPTI numbers correlation ids afresh each time it is attached (xferscope_trace_pause(2), then
// 0): every id written is the attachment's number times 2^32 plus CUPTI's own, so a copy never
// joins a call of an earlier attachment.
extern std::atomic<std::uint64_t> attachment;
inline std::uint64_t correlation(std::uint32_t id) {
  return (attachment.load(std::memory_order_relaxed) << 32) | id;
}

// XFERSCOPE_TRACE_KNOBS (for measuring the library's own cost, several may be given): idle
// (loaded, nothing enabled), noapi, nocall, noframes, nohash, nopython, noactivity, nodriver,
// noruntime, nosubscribe, nokernel, nonvtx, keepsetcalls (a callback on each memset call too),
// nod2dcalls (a device-to-device copy's call not recorded, its GPU record kept); CUPTI's own
// settings: hostbuf (its device-side records in pinned host memory), nothreadbuf (one activity
// buffer, not per thread)
extern std::string knobs;
inline bool knob(const char* name) { return knobs.find(name) != std::string::npos; }
extern bool knob_api, knob_call, knob_frames, knob_hash, knob_activity, knob_driver, knob_python,
    knob_keep_driver, knob_d2d_calls;

// Which activity kinds and callbacks are on: kernels all the time, never, or in windows of
// kernel_on_ms every kernel_period_ms (a sampler thread opens and closes them); the benchmark
// pauses everything (xferscope_trace_pause) to time the same process untraced.
struct Control {
  std::mutex mutex;
  std::condition_variable wake;
  CUpti_SubscriberHandle subscriber = nullptr;
  bool paused = false;
  bool window = false;  // sampled: the sampler's window is open (kernels on unless paused)
  std::atomic<bool> detached{false};  // CUPTI detached (xferscope_trace_pause(2))
  bool kernels = false;               // kernel records on now
};
extern Control& control;  // never destroyed: the sampler may still wait on it at exit

// What the tracing costs the traced program's own threads, timed on them: the time in this
// library's callbacks, and within it hashing host sources, unwinding callers and reading Python
// stacks (hashing and stacks timed on a sample of calls, below, unwinding on every call that
// unwinds); and the time CUPTI took to turn kernel records on or off (on the sampler's thread);
// written as a "cost" line at the end: per part [calls, ns].
enum Part { kInCallbacks, kHashing, kUnwinding, kPythonStacks, kKernelSwitch, kParts };
extern std::atomic<std::uint64_t> part_ns[kParts], part_count[kParts];
struct Timed {
  Part part;
  std::uint64_t weight = 1;  // 0: not timed
  std::chrono::steady_clock::time_point start =
      weight ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  ~Timed() {
    if (!weight) return;
    const auto spent = std::chrono::steady_clock::now() - start;
    part_ns[part].fetch_add(
        weight * std::chrono::duration_cast<std::chrono::nanoseconds>(spent).count(),
        std::memory_order_relaxed);
    part_count[part].fetch_add(weight, std::memory_order_relaxed);
  }
};

// ---- writer.cpp: the trace file, the queue of calls and the writer thread ----

constexpr int kFrames = 12;
constexpr std::size_t kWakeWriter = 8192;  // queued calls that wake the writer early

extern std::mutex out_mutex;
extern FILE* out;
extern std::uint64_t limit;
extern std::atomic<bool> closed;
// kernel records CUPTI has delivered (kept or only counted): what the first window has spent
extern std::atomic<std::uint64_t> kernels_delivered;

enum Type { kMemcpy, kMemset, kKernel, kRuntime, kDriver, kCall, kPin, kMarker, kTypes };

// One API call as its callbacks saw it, formatted later by the writer thread.
struct Call {
  std::uint64_t start = 0, end = 0, hash = 0;
  std::uintptr_t src = 0, dst = 0, frames[kFrames] = {};
  std::size_t bytes = 0;
  std::uint64_t correlation = 0;
  std::uint32_t thread = 0, cbid = 0;
  int kind = -1;
  bool runtime = false, copy = false, sync = false, hashed = false;
  // a pin (host memory pinned or registered), src its address: "alloc" or "register", and the
  // function as CUPTI names it; a pin's record is written as a "pin" line, not an "api" one
  const char* pin = nullptr;
  const char* function = nullptr;
  int frame_count = -1;      // -1: not unwound
  std::uint32_t python = 0;  // its Python stack's id, 0: none
  // the tracing's own time in this call's callbacks, outside [start, end]: its entry's record
  // before start, its exit's after end (what a program untraced would not spend between calls)
  std::uint32_t own = 0;
};
// The queue of calls, never destroyed: the writer thread may still wait on it at exit.
struct Queue {
  std::mutex mutex;
  std::condition_variable wake;
  std::vector<Call> calls;  // under mutex
};
extern Queue& queue;

// Counts a record of `type` in its totals; whether it is written (under out_mutex).
bool keep(Type type, std::uint64_t bytes, std::uint64_t ns);
void line(const char* text);
std::string escaped(const char* s);
void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records);
void CUPTIAPI buffer_completed(CUcontext, std::uint32_t, std::uint8_t* buffer, std::size_t,
                               std::size_t valid);
// ,"at":[...] from unwound return addresses, remembering them to be named at the end
// (under out_mutex)
int write_frames(char* buf, std::size_t size, const std::uintptr_t* frames, int count);
// Take the queue and write it (from the writer thread, an activity buffer's completion, or the
// end). The queue is taken under out_mutex, so the end never misses calls being written.
void drain();
void writer();  // the writer thread: drains the queue every 100 ms, or sooner when it grows
// The trace's last lines (the queue drained, totals, costs, the callers' names, the end), and
// the file closed.
void write_end();

// ---- callbacks.cpp: the callbacks on the API calls worth a record ----

extern std::atomic<std::uint64_t> unwound;  // copy and pin calls seen
// filled once at initialization, read without a lock after
const std::string& api_name(CUpti_CallbackDomain domain, CUpti_CallbackId cbid);
void CUPTIAPI on_api(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data);
// The callbacks on the calls worth a record (interesting()), on or off.
void enable_callbacks(std::uint32_t on);
// The driver's callbacks turned off for good where the program's driver calls all came from
// runtime calls (callbacks.cpp, kDriverProbe): true when this call turned them off. Not under
// control.mutex: it takes it. drop: how long turning them off took, and the runtime calls held
// meanwhile and those that went on before they were off (their correlation ids stuck).
struct DriverDrop {
  std::uint64_t took_ns = 0;
  std::uint32_t held = 0, went_on = 0;
};
bool drop_driver_callbacks(DriverDrop& drop);

// ---- python_stacks.cpp: the Python stacks of calls made from Python ----

// FNV-1a: the offset basis, and one step of it
constexpr std::uint64_t kFnvBasis = 1469598103934665603ull;
constexpr std::uint64_t fnv(std::uint64_t h, std::uint64_t v) { return (h ^ v) * 1099511628211ull; }

// The id of the calling thread's Python stack (0: none), its definition queued when new.
std::uint32_t python_stack();
// Writes the stacks named since the last call (under out_mutex).
void write_stacks();

// ---- looks.cpp: where a Python process's main thread is, looked at from a thread of ours ----

// The main thread's PyThreadState, once a call from it (or CUDA's initialization on it) showed it
extern std::atomic<const void*> main_state;
void note_main_state(const void* tstate);  // from the main thread only; others are ignored
// Starts the looks where $XFERSCOPE_TRACE_SAMPLE_S asks for them in a Python process; their
// records in DIRECTORY/pysamples-<pid>.jsonl.
void start_looks(const std::string& directory);
void looks_every(const std::string& directory, double period_s);  // the same, its period given
void end_looks();        // the looks' file closed (from the end of the trace)
std::uint64_t now_ns();  // CUPTI's clock (the realtime clock where CUPTI is not loaded)

// ---- signals.cpp: signals and fork ----

// A handler on the signals that end a process, the trace ended by `end` on a thread of its own
// before any of them acts; fork handlers that keep a child from recording. From the process
// that records, once.
void watch_signals(void (*end)());
bool recording_here();  // whether this process is the one that records (not a forked child)

}  // namespace xferscope::trace
