// xferscope's CUPTI injection library (`xferscope trace`): CUDA loads it into an unmodified
// program through CUDA_INJECTION64_PATH and calls InitializeInjection() when the program first
// initializes CUDA. It records, as JSON lines in $XFERSCOPE_TRACE_DIR/trace-<pid>.jsonl:
//   memcpy, memset and kernel activity (kind, bytes, memory kinds, device, stream, GPU start
//   and end, correlation ids); from callbacks on the runtime and driver API calls that copy,
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
// crash signals flush first and then do what they would have done.
// Kernel records cost every launch (CUPTI instruments the kernel for its timestamps), so
// $XFERSCOPE_TRACE_KERNELS chooses: all, none, or ON/PERIOD (milliseconds): kernels recorded
// in windows of ON, at most one every PERIOD, each opened by a copy call, each written as
// "kwin" lines; copies, sets and calls are always all recorded.
// libcupti is opened at run time, not linked: $XFERSCOPE_LIBCUPTI (which `xferscope trace` sets
// to the one cuda-pathfinder finds: NVIDIA's wheels, the loader path, the toolkit), else the
// soname of the CUDA major it was built with; without it the program runs untraced, with a
// warning in its records.
#include <cupti.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dynlib.hpp"
#include "trace/pystack.hpp"

namespace pystack = xferscope::pystack;

namespace {

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
Cupti cupti;

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

constexpr std::size_t kBufferBytes = 8u << 20;
constexpr int kFrames = 12;
// 8-byte words read from a host source (and its last one): each is a cache line, and on a large
// buffer a page, the copy's thread reads, so few (256 cost 1.8 us per 1 MiB upload on an H100)
constexpr std::size_t kHashSamples = 32;
constexpr std::uint64_t kFramesAll = 1000;  // copy calls whose callers are all unwound
constexpr std::uint64_t kFramesEvery = 64;  // ... then one in this many
constexpr std::size_t kWakeWriter = 8192;   // queued calls that wake the writer early

std::mutex out_mutex;
FILE* out = nullptr;
std::uint64_t limit = 1000000;
std::atomic<bool> closed{false};

struct Totals {
  std::uint64_t records = 0, written = 0, bytes = 0, gpu_ns = 0;
};
enum Type { kMemcpy, kMemset, kKernel, kRuntime, kDriver, kCall, kPin, kTypes };
const char* const kTypeNames[kTypes] = {"memcpy", "memset", "kernel", "runtime",
                                        "driver", "call",   "pin"};
Totals totals[kTypes];                      // by record type, under out_mutex
std::set<std::uintptr_t> frames_seen;       // return addresses to name at the end
std::vector<std::string> names[2];          // runtime [0] and driver [1] API names, by callback id
thread_local bool in_runtime_call = false;  // a driver call made by a runtime call is its own
thread_local std::uint64_t entered[2] = {0, 0};  // when this thread entered a runtime / driver call
thread_local unsigned thread_id = 0;
std::atomic<std::uint64_t> unwound{0};  // copy and pin calls seen
// CUPTI numbers correlation ids afresh each time it is attached (xferscope_trace_pause(2), then
// 0): every id written is the attachment's number times 2^32 plus CUPTI's own, so a copy never
// joins a call of an earlier attachment.
std::atomic<std::uint64_t> attachment{0};
std::uint64_t correlation(std::uint32_t id) {
  return (attachment.load(std::memory_order_relaxed) << 32) | id;
}
// XFERSCOPE_TRACE_KNOBS (for measuring the library's own cost, several may be given): idle
// (loaded, nothing enabled), noapi, nocall, noframes, nohash, nopython, noactivity, nodriver,
// noruntime, nosubscribe, nokernel; CUPTI's own settings: hostbuf
// (its device-side records in pinned host memory), nothreadbuf (one activity buffer, not per
// thread)
std::string knobs;
bool knob(const char* name) { return knobs.find(name) != std::string::npos; }
bool knob_api = true, knob_call = true, knob_frames = true, knob_hash = true, knob_activity = true,
     knob_driver = true, knob_python = true;

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
Control& control = *new Control;  // never destroyed: the sampler may still wait on it at exit
enum class Kernels { kAll, kNone, kSampled };
Kernels kernel_mode = Kernels::kAll;
unsigned kernel_on_ms = 0, kernel_period_ms = 0;  // the windows of Kernels::kSampled
constexpr CUpti_ActivityKind kCopyKinds[] = {
    CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMCPY2, CUPTI_ACTIVITY_KIND_MEMSET};

// What the tracing costs the traced program's own threads, timed on them: the time in this
// library's callbacks, and within it hashing host sources, unwinding callers and reading Python
// stacks (hashing and stacks timed on a sample of calls, below, unwinding on every call that
// unwinds); and the time CUPTI took to turn kernel records on or off (on the sampler's thread);
// written as a "cost" line at the end: per part [calls, ns].
enum Part { kInCallbacks, kHashing, kUnwinding, kPythonStacks, kKernelSwitch, kParts };
const char* const kPartNames[kParts] = {"callbacks", "hash", "unwind", "python", "kernel_switch"};
std::atomic<std::uint64_t> part_ns[kParts], part_count[kParts];
// The parts within a copy's callback are timed on one copy call in kTimeEvery and scaled, so
// that their clock reads and atomic adds are not paid on every copy: weight kTimeEvery, else 0.
constexpr std::uint64_t kTimeEvery = 16;
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

// One API call as its callbacks saw it, formatted later by the writer thread.
struct Call {
  std::uint64_t start = 0, end = 0, hash = 0;
  std::uintptr_t src = 0, dst = 0, frames[kFrames] = {};
  std::size_t bytes = 0;
  std::uint64_t correlation = 0;
  std::uint32_t thread = 0, cbid = 0;
  int kind = -1;
  bool runtime = false, copy = false, hashed = false;
  int frame_count = -1;      // -1: not unwound
  std::uint32_t python = 0;  // its Python stack's id, 0: none
};
// The queue of calls, never destroyed: the writer thread may still wait on it at exit.
struct Queue {
  std::mutex mutex;
  std::condition_variable wake;
  std::vector<Call> calls;  // under mutex
};
Queue& queue = *new Queue;

bool keep(Type type, std::uint64_t bytes, std::uint64_t ns) {
  Totals& t = totals[type];
  ++t.records;
  t.bytes += bytes;
  t.gpu_ns += ns;
  if (t.written >= limit) return false;
  ++t.written;
  return true;
}

void line(const char* text) {
  if (out) {
    std::fputs(text, out);
    std::fputc('\n', out);
  }
}

std::string escaped(const char* s) {
  std::string r;
  for (const char* p = s ? s : ""; *p; ++p) {
    if (*p == '"' || *p == '\\') r += '\\';
    if (static_cast<unsigned char>(*p) < 0x20) continue;
    r += *p;
  }
  return r;
}

// filled once at initialization, read without a lock after
const std::string& api_name(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  std::vector<std::string>& table = names[domain == CUPTI_CB_DOMAIN_RUNTIME_API ? 0 : 1];
  if (cbid >= table.size()) table.resize(cbid + 1);
  if (table[cbid].empty()) {
    const char* name = nullptr;
    cupti.cuptiGetCallbackName(domain, cbid, &name);
    table[cbid] = name ? name : "?";
  }
  return table[cbid];
}

// The API calls worth a record: copies, sets, synchronizations, host memory pinning.
bool interesting(const std::string& n) {
  for (const char* prefix : {"cudaMemcpy",
                             "cudaMemset",
                             "cudaMallocHost",
                             "cudaHostAlloc",
                             "cudaFreeHost",
                             "cudaHostRegister",
                             "cudaHostUnregister",
                             "cudaDeviceSynchronize",
                             "cudaStreamSynchronize",
                             "cudaEventSynchronize",
                             "cuMemcpy",
                             "cuMemset",
                             "cuMemAllocHost",
                             "cuMemHostAlloc",
                             "cuMemFreeHost",
                             "cuMemHostRegister",
                             "cuMemHostUnregister",
                             "cuCtxSynchronize",
                             "cuStreamSynchronize",
                             "cuEventSynchronize"}) {
    if (n.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

void write_record(const CUpti_Activity* record) {
  char buf[1024];
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      if (!keep(kMemcpy, m->bytes, m->end - m->start)) return;
      std::snprintf(buf, sizeof buf,
                    "{\"t\":\"memcpy\",\"k\":%u,\"s\":%u,\"d\":%u,\"async\":%d,\"b\":%" PRIu64
                    ",\"st\":%" PRIu64 ",\"en\":%" PRIu64 ",\"dev\":%u,\"str\":%u,\"c\":%" PRIu64
                    ",\"rc\":%" PRIu64 "}",
                    m->copyKind, m->srcKind, m->dstKind,
                    (m->flags & CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC) ? 1 : 0, m->bytes, m->start,
                    m->end, m->deviceId, m->streamId, correlation(m->correlationId),
                    m->runtimeCorrelationId ? correlation(m->runtimeCorrelationId) : 0);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY2: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpyPtoP4*>(record);
      if (!keep(kMemcpy, m->bytes, m->end - m->start)) return;
      std::snprintf(buf, sizeof buf,
                    "{\"t\":\"memcpy\",\"k\":%u,\"s\":%u,\"d\":%u,\"async\":%d,\"b\":%" PRIu64
                    ",\"st\":%" PRIu64 ",\"en\":%" PRIu64 ",\"dev\":%u,\"str\":%u,\"c\":%" PRIu64
                    ",\"peer\":%u}",
                    m->copyKind, m->srcKind, m->dstKind,
                    (m->flags & CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC) ? 1 : 0, m->bytes, m->start,
                    m->end, m->srcDeviceId, m->streamId, correlation(m->correlationId),
                    m->dstDeviceId);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      if (!keep(kMemset, m->bytes, m->end - m->start)) return;
      std::snprintf(buf, sizeof buf,
                    "{\"t\":\"memset\",\"m\":%u,\"b\":%" PRIu64 ",\"st\":%" PRIu64
                    ",\"en\":%" PRIu64 ",\"dev\":%u,\"str\":%u,\"c\":%" PRIu64 "}",
                    m->memoryKind, m->bytes, m->start, m->end, m->deviceId, m->streamId,
                    correlation(m->correlationId));
      break;
    }
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      if (!keep(kKernel, 0, k->end - k->start)) return;
      std::snprintf(buf, sizeof buf,
                    "{\"t\":\"kernel\",\"n\":\"%.300s\",\"st\":%" PRIu64 ",\"en\":%" PRIu64
                    ",\"dev\":%u,\"str\":%u,\"c\":%" PRIu64 "}",
                    escaped(k->name).c_str(), k->start, k->end, k->deviceId, k->streamId,
                    correlation(k->correlationId));
      break;
    }
    default: return;
  }
  line(buf);
}

void drain();

void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
  *buffer = static_cast<std::uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, std::uint32_t, std::uint8_t* buffer, std::size_t,
                               std::size_t valid) {
  drain();
  {
    std::lock_guard<std::mutex> lock(out_mutex);
    CUpti_Activity* record = nullptr;
    while (cupti.cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS)
      write_record(record);
    std::size_t dropped = 0;
    cupti.cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped);
    if (dropped) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "{\"t\":\"dropped\",\"n\":%zu}", dropped);
      line(buf);
    }
    if (out) std::fflush(out);
  }
  std::free(buffer);
}

// FNV-1a: the offset basis, and one step of it
constexpr std::uint64_t kFnvBasis = 1469598103934665603ull;
constexpr std::uint64_t fnv(std::uint64_t h, std::uint64_t v) { return (h ^ v) * 1099511628211ull; }

std::uint64_t sampled_hash(const void* src, std::size_t bytes) {
  // FNV-1a over up to kHashSamples words spread over the buffer, its last word and its size
  std::uint64_t h = kFnvBasis ^ bytes;
  const auto* p = static_cast<const unsigned char*>(src);
  const std::size_t words = bytes / 8;
  const std::size_t step = words > kHashSamples ? words / kHashSamples : 1;
  std::uint64_t w;
  for (std::size_t i = 0; i < words; i += step) {
    std::memcpy(&w, p + i * 8, 8);
    h = fnv(h, w);
  }
  if (words) {
    std::memcpy(&w, p + (words - 1) * 8, 8);
    h = fnv(h, w);
  }
  for (std::size_t i = words * 8; i < bytes; ++i) h = fnv(h, p[i]);
  return h;
}

// The Python stacks of copies and pinnings made from Python (pystack.hpp): captured for every
// call, the same chain named once and written as a "pystack" line; a call carries its id.
struct PythonStacks {
  std::mutex mutex;
  pystack::Api api;
  std::atomic<int> walks{0};   // checked walks made: the first kCheckedWalks read through the pipe
  std::atomic<bool> on{true};  // false once a walk found what it did not expect
  std::unordered_map<std::uint64_t, std::uint32_t> ids;  // chain -> id, under mutex
  std::vector<std::string> definitions;                  // to be written, under mutex
};
PythonStacks& stacks = *new PythonStacks;  // never destroyed: threads may still use it at exit
std::once_flag stacks_once;

// The JSON of a named chain: [["file",line,"function"],...], innermost first.
std::string stack_json(const pystack::Frame* frames, int count, bool checked) {
  std::string text = "[";
  for (int i = 0; i < count; ++i) {
    const pystack::Named n = pystack::name(stacks.api, checked, frames[i]);
    text += (i ? ",[\"" : "[\"") + escaped(n.file.c_str()) + "\"," + std::to_string(n.line) +
            ",\"" + escaped(n.function.c_str()) + "\"]";
  }
  return text + "]";
}

// The id of the calling thread's Python stack (0: none), its definition queued when new.
std::uint32_t python_stack() {
  if (!knob_python || !stacks.on.load(std::memory_order_relaxed)) return 0;
  std::call_once(stacks_once, [] { stacks.api = pystack::resolve(); });
  if (!stacks.api.layout) return 0;
  const bool checked = stacks.walks.load(std::memory_order_relaxed) < pystack::kCheckedWalks;
  std::unique_lock<std::mutex> lock(stacks.mutex, std::defer_lock);
  if (checked) lock.lock();  // the pipe is shared
  pystack::Frame frames[pystack::kMaxFrames];
  const int count = pystack::capture(stacks.api, checked, frames, pystack::kMaxFrames);
  if (checked) stacks.walks.fetch_add(1, std::memory_order_relaxed);  // past them, never again
  if (count < 0) {
    stacks.on.store(false);
    return 0;
  }
  if (count == 0) return 0;
  std::uint64_t key = kFnvBasis;
  for (int i = 0; i < count; ++i)
    key = fnv(fnv(key, reinterpret_cast<std::uintptr_t>(frames[i].code)),
              static_cast<std::uint64_t>(frames[i].offset));
  if (!checked) lock.lock();
  auto [at, added] = stacks.ids.try_emplace(key, static_cast<std::uint32_t>(stacks.ids.size() + 1));
  if (added) {
    stacks.definitions.push_back("{\"t\":\"pystack\",\"id\":" + std::to_string(at->second) +
                                 ",\"f\":" + stack_json(frames, count, checked) + "}");
  }
  return at->second;
}

// Writes the stacks named since the last call (under out_mutex).
void write_stacks() {
  std::vector<std::string> definitions;
  {
    std::lock_guard<std::mutex> lock(stacks.mutex);
    definitions.swap(stacks.definitions);
  }
  for (const std::string& d : definitions) line(d.c_str());
}

// What a copy call's entry learned, queued with its exit.
thread_local Call pending;

// the caller's return addresses, for the n-th copy or pin call (unwound's count): the first
// kFramesAll calls, then one in kFramesEvery; a call from Python, whose line its Python stack
// gives, one in kFramesEvery from the start (unwinding through a framework's libraries is the
// costliest part of a record: 10 us a call in libtorch)
bool unwinds(std::uint64_t n, bool from_python) {
  return knob_frames && !((from_python || n >= kFramesAll) && n % kFramesEvery != 0);
}

// The return addresses, as unwinds() says; -1 when not sampled
int unwind(std::uintptr_t* into, std::uint64_t n, bool from_python) {
  if (!unwinds(n, from_python)) return -1;
  void* frames[kFrames + 3];
  const int count = backtrace(frames, kFrames + 3);
  int kept = 0;
  for (int i = 3; i < count; ++i)  // 0-2: here, CUPTI
    into[kept++] = reinterpret_cast<std::uintptr_t>(frames[i]);
  return kept;
}

// ,"at":[...] from unwound return addresses, remembering them to be named at the end
// (under out_mutex)
int write_frames(char* buf, std::size_t size, const std::uintptr_t* frames, int count) {
  if (count < 0) return 0;
  int used = std::snprintf(buf, size, ",\"at\":[");
  for (int i = 0; i < count && used + 24 < static_cast<int>(size); ++i) {
    frames_seen.insert(frames[i]);
    used += std::snprintf(buf + used, size - used, "%s%" PRIuPTR, i ? "," : "", frames[i]);
  }
  used += std::snprintf(buf + used, size - used, "]");
  return used;
}

// A copy call's entry (runtime, or driver as JAX makes them): its pointers, size, kind
// (cudaMemcpyKind: 1 host to device, 2 device to host), a sampled hash of a host source and its
// callers, into `pending` (no lock taken, nothing formatted). False for any other call.
bool copy_entry(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const CUpti_CallbackData* cb) {
  const void *dst = nullptr, *src = nullptr;
  std::size_t count = 0;
  int kind = -1;
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
    switch (cbid) {
      case CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2:
      case CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2_ptds: {
        const auto* p = static_cast<const cuMemcpyHtoD_v2_params*>(cb->functionParams);
        dst = reinterpret_cast<const void*>(p->dstDevice), src = p->srcHost, count = p->ByteCount,
        kind = 1;
        break;
      }
      case CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2:
      case CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2_ptsz: {
        const auto* p = static_cast<const cuMemcpyHtoDAsync_v2_params*>(cb->functionParams);
        dst = reinterpret_cast<const void*>(p->dstDevice), src = p->srcHost, count = p->ByteCount,
        kind = 1;
        break;
      }
      case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2:
      case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2_ptds: {
        const auto* p = static_cast<const cuMemcpyDtoH_v2_params*>(cb->functionParams);
        dst = p->dstHost, src = reinterpret_cast<const void*>(p->srcDevice), count = p->ByteCount,
        kind = 2;
        break;
      }
      case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2:
      case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2_ptsz: {
        const auto* p = static_cast<const cuMemcpyDtoHAsync_v2_params*>(cb->functionParams);
        dst = p->dstHost, src = reinterpret_cast<const void*>(p->srcDevice), count = p->ByteCount,
        kind = 2;
        break;
      }
      default: return false;
    }
  } else {
    switch (cbid) {
      case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020: {
        const auto* p = static_cast<const cudaMemcpy_v3020_params*>(cb->functionParams);
        dst = p->dst, src = p->src, count = p->count, kind = p->kind;
        break;
      }
      case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_ptds_v7000: {
        const auto* p = static_cast<const cudaMemcpy_ptds_v7000_params*>(cb->functionParams);
        dst = p->dst, src = p->src, count = p->count, kind = p->kind;
        break;
      }
      case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020: {
        const auto* p = static_cast<const cudaMemcpyAsync_v3020_params*>(cb->functionParams);
        dst = p->dst, src = p->src, count = p->count, kind = p->kind;
        break;
      }
      case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000: {
        const auto* p = static_cast<const cudaMemcpyAsync_ptsz_v7000_params*>(cb->functionParams);
        dst = p->dst, src = p->src, count = p->count, kind = p->kind;
        break;
      }
      default: return false;
    }
  }
  pending.src = reinterpret_cast<std::uintptr_t>(src);
  pending.dst = reinterpret_cast<std::uintptr_t>(dst);
  pending.bytes = count;
  pending.kind = kind;
  // only an explicit host-to-device source is host memory for certain: reading a device
  // address from the host would fault
  pending.hashed = knob_hash && kind == 1 && src && count;
  const std::uint64_t n = unwound.fetch_add(1, std::memory_order_relaxed);
  const std::uint64_t weight = n % kTimeEvery == 0 ? kTimeEvery : 0;
  if (pending.hashed) {
    Timed timed{kHashing, weight};
    pending.hash = sampled_hash(src, count);
  }
  {
    Timed timed{kPythonStacks, weight};
    pending.python = python_stack();
  }
  // timed on every call that unwinds, unscaled: unwinding is itself sampled, and timing one
  // call in kTimeEvery would meet every unwound call (kFramesEvery is a multiple) and scale it
  Timed timed{kUnwinding, unwinds(n, pending.python != 0) ? 1u : 0u};
  pending.frame_count = unwind(pending.frames, n, pending.python != 0);
  return true;
}

// Host memory pinned or registered, at its call's exit: address and size as a "pin" line.
bool pin_record(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const CUpti_CallbackData* cb,
                char* buf, std::size_t size) {
  const void* ptr = nullptr;
  std::size_t bytes = 0;
  const char* what = nullptr;
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
    switch (cbid) {
      case CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020: {
        const auto* p = static_cast<const cudaMallocHost_v3020_params*>(cb->functionParams);
        ptr = p->ptr ? *p->ptr : nullptr, bytes = p->size, what = "alloc";
        break;
      }
      case CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020: {
        const auto* p = static_cast<const cudaHostAlloc_v3020_params*>(cb->functionParams);
        ptr = p->pHost ? *p->pHost : nullptr, bytes = p->size, what = "alloc";
        break;
      }
      case CUPTI_RUNTIME_TRACE_CBID_cudaHostRegister_v4000: {
        const auto* p = static_cast<const cudaHostRegister_v4000_params*>(cb->functionParams);
        ptr = p->ptr, bytes = p->size, what = "register";
        break;
      }
      default: return false;
    }
  } else {
    switch (cbid) {
      case CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc: {
        const auto* p = static_cast<const cuMemHostAlloc_params*>(cb->functionParams);
        ptr = p->pp ? *p->pp : nullptr, bytes = p->bytesize, what = "alloc";
        break;
      }
      case CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2: {
        const auto* p = static_cast<const cuMemAllocHost_v2_params*>(cb->functionParams);
        ptr = p->pp ? *p->pp : nullptr, bytes = p->bytesize, what = "alloc";
        break;
      }
      case CUPTI_DRIVER_TRACE_CBID_cuMemHostRegister_v2: {
        const auto* p = static_cast<const cuMemHostRegister_v2_params*>(cb->functionParams);
        ptr = p->p, bytes = p->bytesize, what = "register";
        break;
      }
      default: return false;
    }
  }
  int used = std::snprintf(
      buf, size,
      "{\"t\":\"pin\",\"how\":\"%s\",\"f\":\"%s\",\"p\":%" PRIuPTR ",\"b\":%zu,\"c\":%" PRIu64,
      what, cb->functionName ? cb->functionName : "?", reinterpret_cast<std::uintptr_t>(ptr), bytes,
      correlation(cb->correlationId));
  std::uintptr_t frames[kFrames];
  // pins are few: unwound as the first calls are
  const int count = unwind(frames, unwound.fetch_add(1, std::memory_order_relaxed), false);
  if (const std::uint32_t py = python_stack())
    used += std::snprintf(buf + used, size - used, ",\"py\":%u", py);
  std::lock_guard<std::mutex> lock(out_mutex);
  write_stacks();
  used += write_frames(buf + used, size - used, frames, count);
  std::snprintf(buf + used, size - used, "}");
  return true;
}

void CUPTIAPI on_api(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  const bool enter = cb->callbackSite == CUPTI_API_ENTER;
  const bool runtime = domain == CUPTI_CB_DOMAIN_RUNTIME_API;
  if (!runtime && in_runtime_call) return;  // the runtime call that made it is recorded
  if (runtime) in_runtime_call = enter;
  if (closed.load(std::memory_order_relaxed)) return;
  Timed timed{kInCallbacks};
  std::uint64_t now = 0;
  cupti.cuptiGetTimestamp(&now);
  if (enter) {
    entered[runtime ? 0 : 1] = now;
    pending.copy = knob_call && copy_entry(domain, cbid, cb);
    return;
  }
  if (!thread_id) thread_id = static_cast<unsigned>(gettid());
  char pin[512];
  if (pin_record(domain, cbid, cb, pin, sizeof pin)) {
    std::lock_guard<std::mutex> lock(out_mutex);
    if (keep(kPin, 0, 0)) line(pin);
  }
  if (!knob_api && !pending.copy) return;
  Call call;
  if (pending.copy) {
    call = std::move(pending);
    pending.copy = false;
  }
  call.start = entered[runtime ? 0 : 1];
  call.end = now;
  call.correlation = correlation(cb->correlationId);
  call.thread = thread_id;
  call.cbid = cbid;
  call.runtime = runtime;
  std::size_t queued;
  {
    std::lock_guard<std::mutex> lock(queue.mutex);
    queue.calls.push_back(std::move(call));
    queued = queue.calls.size();
  }
  if (queued == kWakeWriter) queue.wake.notify_one();
}

// Format and write the queued calls (under out_mutex).
void write_calls(const std::vector<Call>& calls) {
  char buf[2304];
  for (const Call& c : calls) {
    if (c.copy) keep(kCall, 0, 0);
    if (!knob_api || !keep(c.runtime ? kRuntime : kDriver, 0, c.end - c.start)) continue;
    const CUpti_CallbackDomain domain =
        c.runtime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API;
    int used = std::snprintf(buf, sizeof buf,
                             "{\"t\":\"api\",\"rt\":%d,\"f\":\"%s\",\"st\":%" PRIu64
                             ",\"en\":%" PRIu64 ",\"tid\":%u,\"c\":%" PRIu64,
                             c.runtime ? 1 : 0, api_name(domain, c.cbid).c_str(), c.start, c.end,
                             c.thread, c.correlation);
    if (c.copy) {
      used += std::snprintf(buf + used, sizeof buf - used,
                            ",\"src\":%" PRIuPTR ",\"dst\":%" PRIuPTR ",\"b\":%zu,\"kind\":%d",
                            c.src, c.dst, c.bytes, c.kind);
      if (c.hashed) used += std::snprintf(buf + used, sizeof buf - used, ",\"h\":%" PRIu64, c.hash);
      used += write_frames(buf + used, sizeof buf - used, c.frames, c.frame_count);
      if (c.python) used += std::snprintf(buf + used, sizeof buf - used, ",\"py\":%u", c.python);
    }
    std::snprintf(buf + used, sizeof buf - used, "}");
    line(buf);
  }
}

// Take the queue and write it (from the writer thread, an activity buffer's completion, or the
// end). The queue is taken under out_mutex, so the end never misses calls being written.
void drain() {
  std::lock_guard<std::mutex> lock(out_mutex);
  std::vector<Call> calls;
  {
    std::lock_guard<std::mutex> taken(queue.mutex);
    calls.swap(queue.calls);
  }
  if (!out) return;
  write_stacks();  // before the calls that name them
  write_calls(calls);
}

void writer() {
  while (!closed.load(std::memory_order_relaxed)) {
    {
      std::unique_lock<std::mutex> lock(queue.mutex);
      queue.wake.wait_for(lock, std::chrono::milliseconds(100),
                          [] { return queue.calls.size() >= kWakeWriter; });
    }
    if (!closed.load(std::memory_order_relaxed)) drain();
  }
}

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

// The callbacks on the calls worth a record (interesting()), on or off.
void enable_callbacks(std::uint32_t on) {
  if (!control.subscriber) return;
  for (CUpti_CallbackId id = 1; id < CUPTI_RUNTIME_TRACE_CBID_SIZE; ++id) {
    if (interesting(api_name(CUPTI_CB_DOMAIN_RUNTIME_API, id)) && !knob("noruntime")) {
      cupti.cuptiEnableCallback(on, control.subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, id);
    }
  }
  for (CUpti_CallbackId id = 1; id < CUPTI_DRIVER_TRACE_CBID_SIZE; ++id) {
    if (interesting(api_name(CUPTI_CB_DOMAIN_DRIVER_API, id)) && knob_driver) {
      cupti.cuptiEnableCallback(on, control.subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id);
    }
  }
}

// Opens and closes the kernel windows (Kernels::kSampled) until the trace closes: a window
// opens at the first copy call after the gap (so windows fall where the program copies, not in
// its start-up), stays open kernel_on_ms, and the next may open kernel_period_ms after it did.
void sampler() {
  std::unique_lock<std::mutex> lock(control.mutex);
  const auto stopped = [] { return closed.load(); };
  bool first = true;  // the first window opens at the first copy call
  while (!closed.load(std::memory_order_relaxed)) {
    const unsigned ms = control.window ? kernel_on_ms : first ? 0 : kernel_period_ms - kernel_on_ms;
    first = false;
    if (control.wake.wait_for(lock, std::chrono::milliseconds(ms), stopped)) break;
    if (!control.window) {  // wait for a copy call, looking every 10 ms
      const std::uint64_t seen = unwound.load(std::memory_order_relaxed);
      while (unwound.load(std::memory_order_relaxed) == seen) {
        if (control.wake.wait_for(lock, std::chrono::milliseconds(10), stopped)) return;
      }
    }
    control.window = !control.window;
    set_kernels(kernels_wanted());
  }
}

void finish() {
  if (closed.exchange(true)) return;
  {
    // a signal may arrive while the sampler holds the lock: then the window stays open
    std::unique_lock<std::mutex> lock(control.mutex, std::try_to_lock);
    if (lock.owns_lock() && kernel_mode == Kernels::kSampled) set_kernels(false);
    control.wake.notify_all();
  }
  // detached, CUPTI has nothing left to flush (and a call would attach it again)
  if (!control.detached.load()) cupti.cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  drain();
  std::lock_guard<std::mutex> lock(out_mutex);
  if (!out) return;
  char buf[1024];
  for (int type = 0; type < kTypes; ++type) {
    const Totals& t = totals[type];
    if (!t.records) continue;
    std::snprintf(buf, sizeof buf,
                  "{\"t\":\"totals\",\"of\":\"%s\",\"records\":%" PRIu64 ",\"written\":%" PRIu64
                  ",\"b\":%" PRIu64 ",\"ns\":%" PRIu64 "}",
                  kTypeNames[type], t.records, t.written, t.bytes, t.gpu_ns);
    line(buf);
  }
  std::string cost = "{\"t\":\"cost\"";
  for (int part = 0; part < kParts; ++part) {
    cost += ",\"" + std::string(kPartNames[part]) + "\":[" +
            std::to_string(part_count[part].load()) + "," + std::to_string(part_ns[part].load()) +
            "]";
  }
  line((cost + "}").c_str());
  // name the callers' return addresses: the object, the symbol where exported, the offset
  for (std::uintptr_t a : frames_seen) {
    Dl_info info{};
    if (!dladdr(reinterpret_cast<void*>(a), &info) || !info.dli_fname) continue;
    std::snprintf(buf, sizeof buf,
                  "{\"t\":\"frame\",\"a\":%" PRIuPTR ",\"obj\":\"%s\",\"off\":%" PRIuPTR
                  ",\"sym\":\"%.200s\"}",
                  a, escaped(info.dli_fname).c_str(),
                  a - reinterpret_cast<std::uintptr_t>(info.dli_fbase),
                  escaped(info.dli_sname).c_str());
    line(buf);
  }
  std::uint64_t now = 0;
  cupti.cuptiGetTimestamp(&now);
  std::snprintf(buf, sizeof buf, "{\"t\":\"end\",\"ts\":%" PRIu64 "}", now);
  line(buf);
  std::fclose(out);
  out = nullptr;
}

struct sigaction previous[32];

void on_signal(int sig, siginfo_t* info, void* context) {
  finish();
  const struct sigaction& old = previous[sig];
  if (old.sa_flags & SA_SIGINFO) {
    if (old.sa_sigaction) old.sa_sigaction(sig, info, context);
    return;
  }
  if (old.sa_handler == SIG_IGN) return;
  if (old.sa_handler != SIG_DFL && old.sa_handler) {
    old.sa_handler(sig);
    return;
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

void chain_signals() {
  for (int sig : {SIGINT, SIGTERM, SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL}) {
    struct sigaction action {};
    action.sa_sigaction = on_signal;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&action.sa_mask);
    sigaction(sig, &action, &previous[sig]);
  }
}

}  // namespace

// The calling thread's Python stack as the trace names it, for tests/unit/test_pystack.py, which
// calls it through ctypes with the GIL released (CDLL) and held (PyDLL). `checked`: read through
// the pipe, as the first walks do. The JSON's length, 0 for no stack, -1 when it could not be
// read or does not fit.
extern "C" __attribute__((visibility("default"))) int xferscope_python_stack(char* buf,
                                                                             std::size_t size,
                                                                             int checked) {
  std::call_once(stacks_once, [] { stacks.api = pystack::resolve(); });
  if (!stacks.api.layout) return -1;
  std::lock_guard<std::mutex> lock(stacks.mutex);
  pystack::Frame frames[pystack::kMaxFrames];
  const int count = pystack::capture(stacks.api, checked != 0, frames, pystack::kMaxFrames);
  if (count <= 0) return count;
  const std::string text = stack_json(frames, count, checked != 0);
  if (text.size() + 1 > size) return -1;
  std::memcpy(buf, text.c_str(), text.size() + 1);
  return static_cast<int>(text.size());
}

// Attaches CUPTI as this library uses it: its settings, activity buffers, the copy, memset
// and (per --kernels) kernel records, the callbacks on the calls worth a record. At
// initialization, and again after xferscope_trace_pause detached it. Under control.mutex.
static bool attach() {
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
  bool ok =
      cupti.cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) == CUPTI_SUCCESS;
  for (CUpti_ActivityKind kind : kCopyKinds) ok = switch_activity(kind, true) && ok;
  set_kernels(kernels_wanted());
  cupti.cuptiActivityFlushPeriod(1000);
  if (knob("nosubscribe")) {
  } else if (cupti.cuptiSubscribe(&control.subscriber, on_api, nullptr) == CUPTI_SUCCESS) {
    enable_callbacks(1);  // only the calls that copy, set, synchronize or pin
  } else {
    ok = false;
  }
  return ok;
}

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
  }
  if (knob("nokernel")) kernel_mode = Kernels::kNone;
  std::string kernels_bad;
  if (const char* k = std::getenv("XFERSCOPE_TRACE_KERNELS")) {
    unsigned on = 0, period = 0;
    char tail = 0;
    if (!std::strcmp(k, "none")) {
      kernel_mode = Kernels::kNone;
    } else if (std::sscanf(k, "%u/%u%c", &on, &period, &tail) == 2 && on > 0 && on < period) {
      kernel_mode = Kernels::kSampled, kernel_on_ms = on, kernel_period_ms = period;
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
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "{\"t\":\"start\",\"pid\":%d,\"ppid\":%d,\"ts\":%" PRIu64 ",\"limit\":%" PRIu64
                ",\"kernels\":\"%s\",\"on_ms\":%u,\"period_ms\":%u}",
                getpid(), getppid(), now, limit,
                kernel_mode == Kernels::kAll    ? "all"
                : kernel_mode == Kernels::kNone ? "none"
                                                : "sampled",
                kernel_on_ms, kernel_period_ms);
  line(buf);
  if (!kernels_bad.empty()) {
    line(("{\"t\":\"warning\",\"m\":\"XFERSCOPE_TRACE_KERNELS=" + escaped(kernels_bad.c_str()) +
          " is not all, none or ON/PERIOD in milliseconds (ON below PERIOD): all kernels "
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
  std::atexit(finish);
  chain_signals();
  std::thread(writer).detach();
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
