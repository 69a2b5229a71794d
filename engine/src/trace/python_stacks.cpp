// The injection library's Python stacks (inject.hpp, pystack.hpp): each distinct stack of a copy
// or pinning made from Python named once as a "pystack" line, and the reader the tests call.
#include <cstring>
#include <unordered_map>

#include "trace/inject.hpp"
#include "trace/pystack.hpp"

namespace xferscope::trace {

namespace {

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

}  // namespace

std::uint32_t python_stack() {
  if (!knob_python || !stacks.on.load(std::memory_order_relaxed)) return 0;
  std::call_once(stacks_once, [] { stacks.api = pystack::resolve(); });
  if (!stacks.api.layout) return 0;
  thread_local bool seen = false;  // whether this thread was offered as the main one
  if (!seen) {
    seen = true;
    if (stacks.api.is_initialized()) note_main_state(stacks.api.this_thread_state());
  }
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
  // a chain is known by its code objects, offsets and what identifies each code object (its
  // file and function objects, its first line): a code object freed and another made at its
  // address is not taken for it
  const pystack::Reader r(stacks.api, checked);
  const pystack::Layout& l = *stacks.api.layout;
  std::uint64_t key = kFnvBasis;
  for (int i = 0; i < count; ++i) {
    const void *file = nullptr, *function = nullptr;
    int first = 0;
    r.read(frames[i].code, l.code_filename, file);
    r.read(frames[i].code, l.code_name, function);
    r.read(frames[i].code, l.code_firstlineno, first);
    key = fnv(fnv(key, reinterpret_cast<std::uintptr_t>(frames[i].code)),
              static_cast<std::uint64_t>(frames[i].offset));
    key = fnv(fnv(fnv(key, reinterpret_cast<std::uintptr_t>(file)),
                  reinterpret_cast<std::uintptr_t>(function)),
              static_cast<std::uint64_t>(first));
  }
  if (!checked) lock.lock();
  auto [at, added] = stacks.ids.try_emplace(key, static_cast<std::uint32_t>(stacks.ids.size() + 1));
  if (added) {
    stacks.definitions.push_back("{\"t\":\"pystack\",\"id\":" + std::to_string(at->second) +
                                 ",\"f\":" + stack_json(frames, count, checked) + "}");
  }
  return at->second;
}

void write_stacks() {
  std::vector<std::string> definitions;
  {
    std::lock_guard<std::mutex> lock(stacks.mutex);
    definitions.swap(stacks.definitions);
  }
  for (const std::string& d : definitions) line(d.c_str());
}

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

}  // namespace xferscope::trace
