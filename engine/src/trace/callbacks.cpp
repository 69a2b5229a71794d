// The injection library's callbacks on the API calls worth a record (inject.hpp): a copy's
// pointers, sampled source hash and callers taken at its entry, host pinning at its exit, and
// every such call queued for the writer thread.
#include <execinfo.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstring>
#include <thread>
#include <utility>

#include "trace/inject.hpp"
#include "trace/pystack.hpp"

namespace xferscope::trace {

std::atomic<std::uint64_t> unwound{0};

namespace {

// 8-byte words read from a host source (and its last one): each is a cache line, and on a large
// buffer a page, the copy's thread reads, so few (256 cost 1.8 us per 1 MiB upload on an H100)
constexpr std::size_t kHashSamples = 32;
constexpr std::uint64_t kFramesAll = 1000;  // copy calls whose callers are all unwound
constexpr std::uint64_t kFramesEvery = 64;  // ... then one in this many
// The parts within a copy's callback are timed on one copy call in kTimeEvery and scaled, so
// that their clock reads and atomic adds are not paid on every copy: weight kTimeEvery, else 0.
// The first kTimeAll calls are each timed, unscaled: they are the costly ones (the first finds
// the interpreter's layout, the first pystack::kCheckedWalks read every stack through a pipe,
// and a stack is named the first time it is seen), and one of them scaled by kTimeEvery made
// the estimate wrong: on a 4 x H100 host the "python" part came to 10.58 ms, more than the
// 10.56 ms of callbacks it is part of, the very first copy's stack read counted 16 times.
constexpr std::uint64_t kTimeEvery = 16;
constexpr std::uint64_t kTimeAll =  // past the checked walks, a multiple: the sample's phase holds
    (pystack::kCheckedWalks + kTimeEvery - 1) / kTimeEvery * kTimeEvery;

std::vector<std::string> names[2];          // runtime [0] and driver [1] API names, by callback id
thread_local bool in_runtime_call = false;  // a driver call made by a runtime call is its own
thread_local std::uint64_t entered[2] = {0, 0};  // when this thread entered a runtime / driver call
thread_local unsigned thread_id = 0;
thread_local bool unrecorded = false;  // the call entered is not to be recorded (nod2dcalls)
std::vector<char> syncs[2];  // runtime [0] and driver [1]: whether a callback id synchronizes

// The driver's calls worth a record are the runtime's own where the program calls the runtime
// (PyTorch, CuPy, CUDA C++), its own where it calls the driver (JAX, XLA): while no driver call
// came from the program itself, the first kDriverProbe made by runtime calls mean the driver's
// callbacks only cost, and they are turned off (drop_driver_callbacks). CUPTI's driver
// callbacks cost a traced recsys loop of 27 small uploads a step, on 1 x H200 at 10x its
// steps: 0.863 of its untraced speed with them, 0.940 without.
constexpr std::uint64_t kDriverProbe = 2000;
std::atomic<std::uint64_t> driver_nested{0};  // driver entries made by a runtime call
std::atomic<bool> driver_direct{false};       // a driver entry made by the program itself
std::atomic<bool> driver_dropped{false};      // the driver's callbacks are off for good
// Turning a driver callback off between a call's entry and its exit leaves CUPTI's correlation
// ids stuck at that call's for the rest of the process (every later call, kernel and copy one id:
// a U-Net's cudaFree, nested cuMemFree waiting for the GPU, on 1 x H200). So they are turned off
// only while no thread is inside a recorded runtime call (the driver calls worth a record are
// made inside them), and a runtime call entered meanwhile is held until they are off.
std::atomic<int> runtime_open{0};  // threads inside a recorded runtime call, counted
// 0: not turning them off; kWaiting: waiting for the open calls to end (holds end after
// kHoldAtMost); kTurning: turning them off (holds last until done, kTurningAtMost at most)
std::atomic<int> dropping{0};
constexpr int kWaiting = 1, kTurning = 2;
thread_local bool counted_open = false;
constexpr auto kHoldAtMost = std::chrono::milliseconds(50);  // a hold past this goes on
// A hold while the callbacks are being turned off goes on only past this: going on then is
// what sticks the correlation ids (the freeing loop's GPU test at 186f098 on 1 x H200: one id
// stuck, 10,790 copies left without a line, a cudaFree entered while they were turned off)
constexpr auto kTurningAtMost = std::chrono::seconds(2);
// how long the writer waits for the open calls to end before it tries again at its next turn
constexpr auto kDropWaitAtMost = std::chrono::milliseconds(5);
// runtime calls held while the writer turned them off or waited to, and those that went on
// before they were off
std::atomic<std::uint32_t> held{0}, went_on{0};

// Whether a runtime call still needs counting: while the driver's callbacks may be turned off.
bool gated() {
  return knob_driver && !knob_keep_driver && !driver_dropped.load(std::memory_order_relaxed) &&
         !driver_direct.load(std::memory_order_relaxed);
}

// A recorded runtime call's entry (counted open; held while the driver's callbacks are being
// turned off) and its exit.
void runtime_entered() {
  if (counted_open || !gated()) return;
  const auto start = std::chrono::steady_clock::now();
  bool was_held = false;
  while (true) {
    runtime_open.fetch_add(1);  // sequentially consistent with dropping: one sees the other
    const int state = dropping.load();
    if (state == 0) break;
    const auto waited = std::chrono::steady_clock::now() - start;
    // held long enough: counted open, the writer sees it and tries again at its next turn
    if (state == kWaiting && waited >= kHoldAtMost) break;
    if (state == kTurning && waited >= kTurningAtMost) {  // its driver calls may be unseen
      went_on.fetch_add(1, std::memory_order_relaxed);
      break;
    }
    runtime_open.fetch_sub(1);
    if (!was_held) held.fetch_add(1);  // before the writer reads it: it waits for this hold
    was_held = true;
    // uncounted until the state changes or its bound passes
    const auto bound = state == kTurning ? kTurningAtMost : kHoldAtMost;
    while (dropping.load(std::memory_order_relaxed) == state &&
           std::chrono::steady_clock::now() - start < bound)
      std::this_thread::yield();
  }
  counted_open = true;
}

void runtime_left() {
  if (!counted_open) return;
  counted_open = false;
  runtime_open.fetch_sub(1);
}

// The calls that wait for the GPU's earlier work: the synchronizations, and the device frees,
// which wait for the whole device before they free (torch.cuda.empty_cache() and CuPy's
// free_all_blocks() make one a cached block); records.Call.synchronizes reads them alike.
bool waits_for_gpu(const std::string& n) {
  return n.find("Synchronize") != std::string::npos || n.rfind("cudaFree_v", 0) == 0 ||
         n == "cuMemFree" || n.rfind("cuMemFree_v", 0) == 0;
}

// Device allocations: where a loop frees its blocks (waits_for_gpu), the next step asks the
// driver for them again, and the GPU waits for that too (records.Call.allocates).
bool allocates(const std::string& n) {
  return n.rfind("cudaMalloc_v", 0) == 0 || n.rfind("cuMemAlloc_v", 0) == 0;
}

// The API calls worth a record: copies, waits for the GPU, device allocations, host memory
// pinning.
bool interesting(const std::string& n) {
  if (waits_for_gpu(n) || allocates(n)) return true;
  // A memset's call is not recorded, its GPU record is (knob keepsetcalls records the call):
  // no finding reads a set's call, and a launch-bound LSTM makes 1,180 a step, 0.792 -> 0.826
  // of its untraced speed without their callbacks (1 x H200, 15d5f85); the corpus's kept
  // traces judged without them kept every headline, step line and figure within 1.3%
  if ((n.rfind("cudaMemset", 0) == 0 || n.rfind("cuMemset", 0) == 0) && !knob("keepsetcalls"))
    return false;
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

// Each driver callback id worth a record on or off.
void enable_driver(std::uint32_t on) {
  for (CUpti_CallbackId id = 1; id < CUPTI_DRIVER_TRACE_CBID_SIZE; ++id) {
    if (interesting(api_name(CUPTI_CB_DOMAIN_DRIVER_API, id)))
      cupti.cuptiEnableCallback(on, control.subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id);
  }
}

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

// The n-th recorded call's Python stack and return addresses into `pending` (inlined, so that
// unwind() is as deep below the callback for every kind of call)
[[gnu::always_inline]] inline void callers(std::uint64_t n, std::uint64_t weight) {
  {
    Timed timed{kPythonStacks, weight};
    pending.python = python_stack();
  }
  // timed on every call that unwinds, unscaled: unwinding is itself sampled, and timing one
  // call in kTimeEvery would meet every unwound call (kFramesEvery is a multiple) and scale it
  Timed timed{kUnwinding, unwinds(n, pending.python != 0) ? 1u : 0u};
  pending.frame_count = unwind(pending.frames, n, pending.python != 0);
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
  if (kind == 3 && !knob_d2d_calls) {  // cudaMemcpyDeviceToDevice: its GPU record alone
    unrecorded = true;
    return false;
  }
  pending.src = reinterpret_cast<std::uintptr_t>(src);
  pending.dst = reinterpret_cast<std::uintptr_t>(dst);
  pending.bytes = count;
  pending.kind = kind;
  // only an explicit host-to-device source is host memory for certain: reading a device
  // address from the host would fault
  pending.hashed = knob_hash && kind == 1 && src && count;
  const std::uint64_t n = unwound.fetch_add(1, std::memory_order_relaxed);
  const std::uint64_t weight = n < kTimeAll ? 1 : n % kTimeEvery == 0 ? kTimeEvery : 0;
  if (pending.hashed) {
    Timed timed{kHashing, weight};
    pending.hash = sampled_hash(src, count);
  }
  callers(n, weight);
  return true;
}

// A wait's entry (cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize, cudaFree
// and the driver's: waits_for_gpu): its callers into `pending`, so that the wait is
// named at the program's line (PyTorch's .item() waits in one). False for any other call.
bool sync_entry(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  const std::vector<char>& table = syncs[domain == CUPTI_CB_DOMAIN_RUNTIME_API ? 0 : 1];
  if (cbid >= table.size() || !table[cbid]) return false;
  pending = Call{};
  pending.sync = true;
  // counted apart from the copies and pins: a program's waits leave their sampling as it was
  static std::atomic<std::uint64_t> waits{0};
  const std::uint64_t n = waits.fetch_add(1, std::memory_order_relaxed);
  callers(n, n < kTimeAll ? 1 : n % kTimeEvery == 0 ? kTimeEvery : 0);
  return true;
}

// Host memory pinned or registered, at its call's exit: address, size and callers into `pin`,
// queued as the calls are and written by the writer thread as a "pin" line (JAX pins and frees
// host memory hundreds of times a run: the line formatted here, under the lock the writer
// holds while it writes CUPTI's buffers, cost 8 us a pin on the program's thread). False for
// any other call.
bool pin_entry(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const CUpti_CallbackData* cb,
               Call& pin) {
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
  pin.pin = what;
  pin.function = cb->functionName ? cb->functionName : "?";  // CUPTI's: a global constant
  pin.src = reinterpret_cast<std::uintptr_t>(ptr);
  pin.bytes = bytes;
  pin.correlation = correlation(cb->correlationId);
  // pins are few: unwound as the first calls are
  pin.frame_count = unwind(pin.frames, unwound.fetch_add(1, std::memory_order_relaxed), false);
  pin.python = python_stack();
  return true;
}

// A call's record queued for the writer thread, woken once kWakeWriter wait.
void enqueue(Call&& call) {
  std::size_t queued;
  {
    std::lock_guard<std::mutex> lock(queue.mutex);
    queue.calls.push_back(std::move(call));
    queued = queue.calls.size();
  }
  if (queued == kWakeWriter) queue.wake.notify_one();
}

}  // namespace

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

void CUPTIAPI on_api(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  const bool enter = cb->callbackSite == CUPTI_API_ENTER;
  const bool runtime = domain == CUPTI_CB_DOMAIN_RUNTIME_API;
  if (!runtime && in_runtime_call) {  // the runtime call that made it is recorded
    // counted only while it can still decide (a relaxed load, not a shared add, from then on)
    if (enter && !driver_direct.load(std::memory_order_relaxed) &&
        driver_nested.load(std::memory_order_relaxed) < kDriverProbe)
      driver_nested.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (!runtime && enter && !driver_direct.load(std::memory_order_relaxed))
    driver_direct.store(true, std::memory_order_relaxed);
  if (runtime) {
    in_runtime_call = enter;
    enter ? runtime_entered() : runtime_left();
  }
  if (closed.load(std::memory_order_relaxed)) return;
  Timed timed{kInCallbacks};
  std::uint64_t now = 0;
  cupti.cuptiGetTimestamp(&now);
  if (enter) {
    pending.copy = knob_call && copy_entry(domain, cbid, cb);
    if (!pending.copy) pending.sync = knob_call && sync_entry(domain, cbid);
    // the call starts after its entry's record (callers, Python stack, hash): that work is the
    // tracing's, not the call's, and a call's time prices what waiting in it cost the program
    std::uint64_t started = now;
    if (pending.copy || pending.sync) cupti.cuptiGetTimestamp(&started);
    entered[runtime ? 0 : 1] = started;
    pending.own = static_cast<std::uint32_t>(started - now);
    return;
  }
  if (unrecorded) {
    unrecorded = false;
    return;
  }
  if (!thread_id) thread_id = static_cast<unsigned>(gettid());
  if (Call pin; pin_entry(domain, cbid, cb, pin)) {
    pin.thread = thread_id;
    enqueue(std::move(pin));
  }
  if (!knob_api && !pending.copy && !pending.sync) return;
  Call call;
  if (pending.copy || pending.sync) {
    call = std::move(pending);
    pending.copy = pending.sync = false;
  }
  call.start = entered[runtime ? 0 : 1];
  call.end = now;
  call.correlation = correlation(cb->correlationId);
  call.thread = thread_id;
  call.cbid = cbid;
  call.runtime = runtime;
  std::uint64_t done = now;
  cupti.cuptiGetTimestamp(&done);
  call.own += static_cast<std::uint32_t>(done - now);
  enqueue(std::move(call));
}

void enable_callbacks(std::uint32_t on) {
  if (!control.subscriber) return;
  if (syncs[0].empty()) {  // before any callback runs: read without a lock from then on
    syncs[0].assign(CUPTI_RUNTIME_TRACE_CBID_SIZE, 0);
    syncs[1].assign(CUPTI_DRIVER_TRACE_CBID_SIZE, 0);
    for (CUpti_CallbackId id = 1; id < CUPTI_RUNTIME_TRACE_CBID_SIZE; ++id)
      syncs[0][id] = waits_for_gpu(api_name(CUPTI_CB_DOMAIN_RUNTIME_API, id));
    for (CUpti_CallbackId id = 1; id < CUPTI_DRIVER_TRACE_CBID_SIZE; ++id)
      syncs[1][id] = waits_for_gpu(api_name(CUPTI_CB_DOMAIN_DRIVER_API, id));
  }
  for (CUpti_CallbackId id = 1; id < CUPTI_RUNTIME_TRACE_CBID_SIZE; ++id) {
    if (interesting(api_name(CUPTI_CB_DOMAIN_RUNTIME_API, id)) && !knob("noruntime")) {
      cupti.cuptiEnableCallback(on, control.subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, id);
    }
  }
  if (knob_driver && !driver_dropped.load()) enable_driver(on);
}

bool drop_driver_callbacks(DriverDrop& drop) {
  if (knob_keep_driver || !knob_driver || driver_dropped.load() ||
      driver_direct.load(std::memory_order_relaxed) ||
      driver_nested.load(std::memory_order_relaxed) < kDriverProbe)
    return false;
  std::lock_guard<std::mutex> lock(control.mutex);
  if (driver_direct.load() || driver_dropped.load()) return false;
  dropping.store(kWaiting);
  // the calls open now end soon (new ones are held meanwhile): a loop of back-to-back small
  // copies is inside one most of the time, and a single look at the count, retried at the
  // writer's turns, turned them off only after 174 of 203 steps (1 x H200)
  const auto start = std::chrono::steady_clock::now();
  while (runtime_open.load() != 0 && std::chrono::steady_clock::now() - start < kDropWaitAtMost)
    std::this_thread::yield();
  if (runtime_open.load() != 0) {  // a call still open (a long wait for the GPU): next turn
    dropping.store(0);
    return false;
  }
  dropping.store(kTurning);
  if (runtime_open.load() != 0) {  // a call held too long went on before it: next turn
    dropping.store(0);
    return false;
  }
  const auto turning = std::chrono::steady_clock::now();
  // detached or paused, the callbacks are off now and stay off when CUPTI is attached again
  if (control.subscriber && !control.detached.load() && !control.paused) enable_driver(0);
  // only now: while it is false, the runtime calls entered meanwhile are held (gated), and
  // turning them off takes 0.2-0.3 ms (the freeing loop, 1 x H200), in which a cudaFree or
  // cudaMalloc entered unheld stuck the ids in 4 of 5 runs at 4d2eb86
  driver_dropped.store(true);
  drop.took_ns = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                std::chrono::steady_clock::now() - turning)
                                                .count());
  dropping.store(0);
  drop.held = held.load(), drop.went_on = went_on.load();
  return true;
}

}  // namespace xferscope::trace
