// Looks at where a traced Python process's main thread is (inject.hpp): a thread of this
// library, started only in a Python process that initialized CUDA, reads the main thread's
// frame chain every $XFERSCOPE_TRACE_SAMPLE_S seconds without the GIL (pystack.hpp), as py-spy
// and austin read a program from outside: no Python thread in the program, no lock it waits
// for. Every read goes through the reader's pipe, so a frame freed while it is read gives
// EFAULT, never a crash; a look is kept only where the main thread's top frame (its address and
// its code) is the same after the walk as before it (its frames below cannot change without the
// top changing), else it is tried once more and dropped. Names come from the code objects'
// strings and line tables read the same way (pystack::line_at), each code object's names
// cached with the fields that identify it (its file and function objects, its first line), so
// a code object freed and another made at its address is named anew.
// Records, in $XFERSCOPE_TRACE_DIR/pysamples-<pid>.jsonl (samples.py reads them): first
// {"t":"samples","pid","period_s"}; a stack the first time it is seen, {"t":"pystack","id",
// "f":[[file,line,function],...]} innermost first; then {"t":"sample","ts","id"}: the time the
// look was asked for (CUPTI's clock, as its records'), and the stack seen.
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <unordered_map>

#include "trace/inject.hpp"
#include "trace/pystack.hpp"

namespace xferscope::trace {

std::atomic<const void*> main_state{nullptr};

namespace {

constexpr std::uint64_t kMostLooks = 1000000;  // looks kept at most
constexpr int kFlushEvery = 100;               // looks written between flushes
constexpr int kGivingUp = 64;                  // unreadable looks in a row end the looking

struct Names {  // a code object's names, its line table, and what identifies it
  const void* file = nullptr;
  const void* function = nullptr;
  int first_line = 0;
  std::string file_text, function_text, lines;
  bool read = false;
};

struct Looks {
  std::timed_mutex mutex;  // the file, while a look is written or the file closed
  FILE* file = nullptr;
  pystack::Api api;
  std::unordered_map<const void*, Names> names;          // by code object
  std::unordered_map<std::uint64_t, std::uint32_t> ids;  // named chain -> id
  std::uint64_t taken = 0;
};
Looks& looks = *new Looks;  // never destroyed: the thread may still look at exit

// The names of a code object, cached while the fields that identify it stay the same.
const Names* named(const pystack::Reader& r, const void* code) {
  const pystack::Layout& l = *looks.api.layout;
  Names now;
  if (!r.read(code, l.code_filename, now.file) || !r.read(code, l.code_name, now.function) ||
      !r.read(code, l.code_firstlineno, now.first_line))
    return nullptr;
  Names& cached = looks.names[code];
  if (cached.file != now.file || cached.function != now.function ||
      cached.first_line != now.first_line || !cached.read) {
    now.file_text = pystack::ascii(looks.api, r, now.file);
    now.function_text = pystack::ascii(looks.api, r, now.function);
    int first = 0;
    if (!pystack::line_table(looks.api, r, code, first, now.lines)) return nullptr;
    now.read = true;
    cached = std::move(now);
  }
  return &cached;
}

// One look at the main thread: the id of the stack it was seen in (0: none, or not read as it
// was), its definition written when new.
std::uint32_t look(const void* tstate) {
  const pystack::Reader r(looks.api, true);
  const pystack::Layout* l = looks.api.layout;
  pystack::Frame frames[pystack::kMaxFrames];
  for (int attempt = 0; attempt < 2; ++attempt) {
    const char *top = nullptr, *again = nullptr;
    const void *code = nullptr, *code_again = nullptr;
    if (!pystack::current_frame(l, r, tstate, top)) return 0;
    if (!top) return 0;  // not running Python (in C, the GIL released: its last frame is gone)
    r.read(top, l->frame_code, code);
    const int count = pystack::capture_state(looks.api, r, tstate, frames, pystack::kMaxFrames);
    if (!pystack::current_frame(l, r, tstate, again) || !again) return 0;
    r.read(again, l->frame_code, code_again);
    if (count <= 0 || again != top || code_again != code) continue;  // it moved: once more
    std::string text = "[";
    std::uint64_t key = kFnvBasis;
    for (int i = 0; i < count; ++i) {
      const Names* n = named(r, frames[i].code);
      if (!n) return 0;
      const int line = pystack::decode_line(l->minor, n->first_line, n->lines, frames[i].offset);
      text += (i ? ",[\"" : "[\"") + escaped(n->file_text.c_str()) + "\"," + std::to_string(line) +
              ",\"" + escaped(n->function_text.c_str()) + "\"]";
      for (const char c : n->file_text) key = fnv(key, static_cast<unsigned char>(c));
      key = fnv(fnv(key, static_cast<std::uint64_t>(line)), n->function_text.size());
      for (const char c : n->function_text) key = fnv(key, static_cast<unsigned char>(c));
    }
    auto [at, added] = looks.ids.try_emplace(key, static_cast<std::uint32_t>(looks.ids.size() + 1));
    if (added) {
      std::fprintf(looks.file, "{\"t\":\"pystack\",\"id\":%u,\"f\":%s]}\n", at->second,
                   text.c_str());
    }
    return at->second;
  }
  return 0;
}

void looking(double period_s) {
  const auto period = std::chrono::nanoseconds(static_cast<std::int64_t>(period_s * 1e9));
  auto next = std::chrono::steady_clock::now() + period;
  int failed = 0;
  while (!closed.load(std::memory_order_relaxed) && looks.taken < kMostLooks &&
         failed < kGivingUp) {
    std::this_thread::sleep_until(next);
    next += period;
    const void* tstate = main_state.load(std::memory_order_acquire);
    if (!tstate || control.paused || !looks.api.is_initialized()) continue;
    const std::uint64_t asked = now_ns();  // the look's time: when it was asked for
    std::lock_guard<std::timed_mutex> lock(looks.mutex);
    if (!looks.file) return;
    const std::uint32_t id = look(tstate);
    failed = id ? 0 : failed + 1;
    if (!id) continue;
    std::fprintf(looks.file, "{\"t\":\"sample\",\"ts\":%" PRIu64 ",\"id\":%u}\n", asked, id);
    if (++looks.taken % kFlushEvery == 0) std::fflush(looks.file);
  }
}

}  // namespace

namespace {

// fork: the looks' file flushed and held still while the process forks; a child (whose
// looking thread fork did not copy) forgets the parent's file, never writing or closing it
void hold_looks() {
  looks.mutex.lock();
  if (looks.file) std::fflush(looks.file);
}
void let_go() { looks.mutex.unlock(); }
void drop_looks() {
  looks.file = nullptr;
  main_state.store(nullptr);
  looks.mutex.unlock();
}

}  // namespace

std::uint64_t now_ns() {
  std::uint64_t now = 0;
  if (cupti.cuptiGetTimestamp && cupti.cuptiGetTimestamp(&now) == CUPTI_SUCCESS) return now;
  timespec ts{};  // CUPTI not loaded (the tests): the realtime clock, as CUPTI's on Linux
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

void note_main_state(const void* tstate) {
  if (tstate && static_cast<pid_t>(gettid()) == getpid())
    main_state.store(tstate, std::memory_order_release);
}

void start_looks(const std::string& directory) {
  const char* every = std::getenv("XFERSCOPE_TRACE_SAMPLE_S");
  looks_every(directory, every ? std::strtod(every, nullptr) : 0.0);
}

void looks_every(const std::string& directory, double period_s) {
  if (!(period_s > 0.0) || period_s > 60.0) return;
  looks.api = pystack::resolve();
  if (!looks.api.layout) return;  // not a Python process (or not a minor read): no looks
  if (looks.api.is_initialized() && static_cast<pid_t>(gettid()) == getpid())
    note_main_state(looks.api.this_thread_state());  // CUDA initialized from the main thread
  const std::string path = directory + "/pysamples-" + std::to_string(getpid()) + ".jsonl";
  looks.file = std::fopen(path.c_str(), "w");
  if (!looks.file) return;
  pthread_atfork(hold_looks, let_go, drop_looks);
  std::fprintf(looks.file, "{\"t\":\"samples\",\"pid\":%d,\"period_s\":%g,\"native\":1}\n",
               getpid(), period_s);
  std::thread(looking, period_s).detach();
}

void end_looks() {
  // a look takes well under a millisecond; a thread stopped by a signal may hold the lock
  std::unique_lock<std::timed_mutex> lock(looks.mutex, std::chrono::milliseconds(200));
  if (!lock.owns_lock() || !looks.file) return;
  std::fclose(looks.file);
  looks.file = nullptr;
}

}  // namespace xferscope::trace

// For tests/unit/test_trace_samples.py, in a Python process with no CUDA: the looks started
// from its main thread (called through ctypes.PyDLL, the GIL held), every `period_s`, their
// records in DIRECTORY; and ended. 0 when started.
extern "C" __attribute__((visibility("default"))) int xferscope_looks_start(const char* directory,
                                                                            double period_s) {
  xferscope::trace::looks_every(directory, period_s);
  return xferscope::trace::main_state.load() ? 0 : -1;
}
extern "C" __attribute__((visibility("default"))) void xferscope_looks_end() {
  xferscope::trace::end_looks();
}
