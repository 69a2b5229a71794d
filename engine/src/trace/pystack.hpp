// The Python stack of the thread making a CUDA call, read without the GIL: PyTorch, CuPy and
// JAX release the GIL around their copies, and while the thread sits in the call its own frames
// do not change (only it can push or pop them), so the frame chain its thread state points to
// can be walked as it is. No Python API that allocates, takes references or needs the GIL is
// called; the few fields read are at offsets taken from each CPython minor's headers
// (scripts/python-offsets prints them), and only for the minors listed here. Every object is
// type-checked as it is read, and the first walks read through a pipe (a bad address is
// EFAULT, not a crash); anything unexpected turns the reading off for the process.
//
// A capture is the raw chain: (code object, instruction offset) per frame, innermost first,
// which costs a few pointer loads a frame. Names and lines are resolved once per distinct
// chain (PyCode_Addr2Line reads the code's immutable line table), while the frames are alive.
// Internal to the injection library (header-only, so the tests can load the same code).
#pragma once

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace xferscope::pystack {

// Where a CPython minor keeps what is read (offsets in bytes; -1: not in this minor).
struct Layout {
  int minor;
  std::ptrdiff_t tstate_frame;    // PyThreadState: frame (3.10), cframe (3.11, 3.12), current_frame
  std::ptrdiff_t cframe_current;  // _PyCFrame.current_frame (3.11, 3.12), else -1
  std::ptrdiff_t frame_code;      // PyFrameObject.f_code / _PyInterpreterFrame.f_code|f_executable
  std::ptrdiff_t frame_back;      // f_back / previous
  std::ptrdiff_t frame_instr;     // f_lasti (int, 3.10) / prev_instr / instr_ptr
  std::ptrdiff_t frame_owner;     // _PyInterpreterFrame.owner (char), else -1
  std::ptrdiff_t code_filename;   // PyCodeObject.co_filename
  std::ptrdiff_t code_name;       // co_qualname (3.11+) / co_name
  std::ptrdiff_t code_adaptive;   // co_code_adaptive: where instructions start (3.11+)
  std::ptrdiff_t code_traceable;  // _co_firsttraceable (int, 3.11+): frames before it are
                                  // being set up (incomplete)
  std::ptrdiff_t ascii_data;      // sizeof(PyASCIIObject): a compact ASCII string's characters
  char cstack_owner;              // _PyInterpreterFrame.owner of a C stack's entry frame (3.12+)
  std::uintptr_t executable_tags;   // f_executable's tag bits (3.14: a _PyStackRef), else 0
  std::ptrdiff_t code_firstlineno;  // PyCodeObject.co_firstlineno (int)
  std::ptrdiff_t code_linetable;    // PyCodeObject.co_linetable (bytes: line_at's table)
};
// From CPython 3.10.13, 3.11.7, 3.12.1, 3.13.0 and 3.14.10's headers (offsetof, Py_BUILD_CORE),
// x86-64 and aarch64 alike (LP64), as scripts/python-offsets prints them; checked against each
// minor's headers by tests/unit/test_python_offsets.py, and at run time by
// tests/unit/test_pystack.py, on every minor the machine has. 3.14 (the default build) tags
// f_executable's low 2 bits (Py_TAG_BITS) and numbers the C stack's owner 4
// (FRAME_OWNED_BY_INTERPRETER took 3). A free-threaded build lays its objects out otherwise and is
// not read.
constexpr Layout kLayouts[] = {
    {10, 24, -1, 32, 24, 96, -1, 104, 112, -1, -1, 48, -1, 0, 40, 120},
    {11, 56, 8, 32, 48, 56, 69, 112, 128, 184, 168, 48, -1, 0, 72, 136},
    {12, 56, 0, 0, 8, 56, 70, 112, 128, 192, 176, 40, 3, 0, 68, 136},
    {13, 72, -1, 0, 8, 56, 70, 112, 128, 200, 184, 40, 3, 0, 68, 136},
    {14, 72, -1, 0, 8, 56, 74, 112, 128, 208, 192, 40, 4, 3, 68, 136},
};
constexpr char kOwnedByGenerator = 1;
constexpr std::ptrdiff_t kStateOffset = 32;    // PyASCIIObject.state, every minor
constexpr unsigned kCompactAscii = 0x60;       // state's compact and ascii bits
constexpr std::ptrdiff_t kTypeOffset = 8;      // PyObject.ob_type
constexpr std::ptrdiff_t kAsciiLength = 16;    // PyASCIIObject.length
constexpr std::ptrdiff_t kBytesSize = 16;      // PyVarObject.ob_size of a bytes object
constexpr std::ptrdiff_t kBytesData = 32;      // PyBytesObject.ob_sval
constexpr std::ptrdiff_t kMaxTable = 1 << 20;  // a line table longer than this is not read
constexpr std::size_t kMaxFrames = 48;
constexpr int kCheckedWalks = 64;  // walks read through the pipe before reads are trusted

struct Frame {
  const void* code = nullptr;
  int offset = 0;  // bytes into the code's instructions
};

struct Api {
  const Layout* layout = nullptr;
  int (*is_initialized)() = nullptr;
  void* (*this_thread_state)() = nullptr;
  const void* code_type = nullptr;
  const void* unicode_type = nullptr;
  const void* bytes_type = nullptr;
  int pipe_fds[2] = {-1, -1};
};

// The interpreter in this process, if it is one of the minors above; else nothing is read.
inline Api resolve() {
  Api api;
  auto get = [](const char* name) { return dlsym(RTLD_DEFAULT, name); };
  auto version = reinterpret_cast<const char* (*)()>(get("Py_GetVersion"));
  api.is_initialized = reinterpret_cast<int (*)()>(get("Py_IsInitialized"));
  api.this_thread_state = reinterpret_cast<void* (*)()>(get("PyGILState_GetThisThreadState"));
  api.code_type = get("PyCode_Type");
  api.unicode_type = get("PyUnicode_Type");
  api.bytes_type = get("PyBytes_Type");
  if (!version || !api.is_initialized || !api.this_thread_state || !api.code_type ||
      !api.unicode_type || !api.bytes_type)
    return api;
  int major = 0, minor = 0;
  const char* said = version();
  if (std::sscanf(said, "%d.%d", &major, &minor) != 2 || major != 3) return api;
  if (std::strstr(said, "free-threading")) return api;  // objects laid out otherwise
  for (const Layout& l : kLayouts)
    if (l.minor == minor) api.layout = &l;
  if (api.layout && pipe2(api.pipe_fds, O_CLOEXEC) != 0) api.layout = nullptr;  // not inherited
  return api;
}

// Reads T at `address`: directly once trusted, else through the pipe (false: not readable).
class Reader {
 public:
  Reader(const Api& api, bool checked) : api_(api), checked_(checked) {}
  template <typename T>
  bool read(const void* address, std::ptrdiff_t offset, T& into) const {
    const char* at = static_cast<const char*>(address) + offset;
    if (!address || reinterpret_cast<std::uintptr_t>(at) < 4096) return false;
    if (!checked_) {
      std::memcpy(&into, at, sizeof into);
      return true;
    }
    if (write(api_.pipe_fds[1], at, sizeof into) != static_cast<ssize_t>(sizeof into)) return false;
    return ::read(api_.pipe_fds[0], &into, sizeof into) == static_cast<ssize_t>(sizeof into);
  }
  bool is(const void* object, const void* type) const {
    const void* t = nullptr;
    return read(object, kTypeOffset, t) && t == type;
  }
  // `n` bytes at `address` (false: not readable), through the pipe in pieces when checked
  bool read_bytes(const void* address, std::size_t n, char* into) const {
    const char* at = static_cast<const char*>(address);
    if (!address || reinterpret_cast<std::uintptr_t>(at) < 4096) return false;
    if (!checked_) {
      std::memcpy(into, at, n);
      return true;
    }
    for (std::size_t done = 0; done < n;) {
      const std::size_t piece = n - done < 4096 ? n - done : 4096;
      if (write(api_.pipe_fds[1], at + done, piece) != static_cast<ssize_t>(piece) ||
          ::read(api_.pipe_fds[0], into + done, piece) != static_cast<ssize_t>(piece))
        return false;
      done += piece;
    }
    return true;
  }

 private:
  const Api& api_;
  bool checked_;
};

// The frame a thread state runs now (nullptr: none; false: not readable).
inline bool current_frame(const Layout* l, const Reader& r, const void* tstate,
                          const char*& frame) {
  frame = nullptr;
  if (!r.read(tstate, l->tstate_frame, frame)) return false;
  return l->cframe_current < 0 || !frame || r.read(frame, l->cframe_current, frame);
}

// A thread's frames from its thread state, innermost first: how many, or -1 when they could
// not be read as expected. Its own thread's, while it sits in a call (capture), or another's
// (the main thread's, looked at by the sampler: its frames change as they are read, so the
// reader must be checked and the caller validates what it read).
inline int capture_state(const Api& api, const Reader& r, const void* tstate, Frame* out,
                         std::size_t max) {
  const Layout* l = api.layout;
  const char* frame = nullptr;
  if (!current_frame(l, r, tstate, frame)) return -1;
  const bool running = frame != nullptr;  // a thread running Python has a code frame
  std::size_t n = 0;
  for (int hops = 0; frame && n < max && hops < 4096; ++hops) {
    const char* code = nullptr;
    const char* back = nullptr;
    if (!r.read(frame, l->frame_code, code) || !r.read(frame, l->frame_back, back)) return -1;
    code =
        reinterpret_cast<const char*>(reinterpret_cast<std::uintptr_t>(code) & ~l->executable_tags);
    char owner = 0;
    if (l->frame_owner >= 0 && !r.read(frame, l->frame_owner, owner)) return -1;
    const bool shim = l->minor >= 12 && owner == l->cstack_owner;  // an entry frame of C
    if (!shim && r.is(code, api.code_type)) {
      int offset = 0;
      if (l->code_adaptive < 0) {  // 3.10: f_lasti counts 2-byte code units
        int lasti = 0;
        if (!r.read(frame, l->frame_instr, lasti)) return -1;
        offset = lasti * 2;
      } else {
        const char* instr = nullptr;
        int traceable = 0;
        if (!r.read(frame, l->frame_instr, instr) || !r.read(code, l->code_traceable, traceable))
          return -1;
        offset = static_cast<int>(instr - (code + l->code_adaptive));
        if (owner != kOwnedByGenerator && offset < traceable * 2) offset = -1;  // incomplete
      }
      if (offset >= 0) out[n++] = {code, offset};
    } else if (!shim && l->minor < 13) {
      return -1;  // before 3.13 every frame runs a code object: the layout is not as expected
    }
    frame = back;
  }
  if (running && n == 0) return -1;  // frames, and none ran code: not laid out as expected
  return static_cast<int>(n);
}

// The calling thread's frames, innermost first: how many, or -1 when they could not be read
// as expected (the caller then stops reading for good).
inline int capture(const Api& api, bool checked, Frame* out, std::size_t max) {
  if (!api.layout || !api.is_initialized()) return 0;
  void* tstate = api.this_thread_state();
  if (!tstate) return 0;  // a thread Python does not know
  return capture_state(api, Reader(api, checked), tstate, out, max);
}

// A string object's characters when it is compact ASCII (file and function names nearly always
// are), else "?": anything else would need the GIL.
inline std::string ascii(const Api& api, const Reader& r, const void* object) {
  unsigned state = 0;
  std::ptrdiff_t length = 0;
  if (!r.is(object, api.unicode_type) || !r.read(object, kStateOffset, state) ||
      (state & kCompactAscii) != kCompactAscii || !r.read(object, kAsciiLength, length) ||
      length < 0 || length > 4096)
    return "?";
  std::string text(static_cast<std::size_t>(length), '\0');
  const char* data = static_cast<const char*>(object) + api.layout->ascii_data;
  for (std::ptrdiff_t i = 0; i < length; ++i)
    if (!r.read(data, i, text[static_cast<std::size_t>(i)])) return "?";
  return text;
}

// A code object's first line and line table (its bytes), read through the reader alone, so a
// code object freed while it is read gives a wrong table or none, never a crash.
inline bool line_table(const Api& api, const Reader& r, const void* code, int& first,
                       std::string& bytes) {
  const Layout& l = *api.layout;
  const void* table = nullptr;
  std::ptrdiff_t size = 0;
  if (!r.read(code, l.code_firstlineno, first) || !r.read(code, l.code_linetable, table) ||
      !r.is(table, api.bytes_type) || !r.read(table, kBytesSize, size) || size < 0 ||
      size > kMaxTable)
    return false;
  bytes.assign(static_cast<std::size_t>(size), '\0');
  return !size ||
         r.read_bytes(static_cast<const char*>(table) + kBytesData, bytes.size(), bytes.data());
}

// The line of the instruction `offset` bytes into a code object whose first line and line
// table are given, decoded as CPython does (PyCode_Addr2Line): 3.10's pairs of (bytes, line
// delta), 3.11's and later's location table (Objects/locations.md in CPython). -1: no line.
inline int decode_line(int minor, int line, const std::string& table, int offset) {
  if (offset < 0) return -1;
  const auto* p = reinterpret_cast<const unsigned char*>(table.data());
  const unsigned char* end = p + table.size();
  int start = 0, stop = 0;
  if (minor == 10) {  // pairs: (bytes of instructions, line delta; -128: no line)
    for (; p + 1 < end; p += 2) {
      start = stop;
      stop += p[0];
      const int delta = static_cast<signed char>(p[1]);
      if (delta != -128) line += delta;
      if (start <= offset && offset < stop) return delta == -128 ? -1 : line;
    }
    return -1;
  }
  auto varint = [&](const unsigned char*& at) {  // 6 bits a byte, bit 6: more follow
    unsigned value = 0, shift = 0;
    unsigned char b = 0;
    do {
      if (at >= end || shift > 28) return 0u;
      b = *at++;
      value |= static_cast<unsigned>(b & 63) << shift;
      shift += 6;
    } while (b & 64);
    return value;
  };
  while (p < end) {  // an entry: 1, a 4-bit code, its length less one in 2-byte code units
    const unsigned char head = *p;
    if (!(head & 128)) return -1;
    const int kind = (head >> 3) & 15;
    const unsigned char* next = p + 1;
    if (kind == 13 || kind == 14) {  // no column, or the long form: a signed line delta first
      const unsigned v = varint(next);
      line += (v & 1) ? -static_cast<int>(v >> 1) : static_cast<int>(v >> 1);
    } else if (kind >= 10 && kind <= 12) {  // one line: the delta in the code
      line += kind - 10;
    }
    start = stop;
    stop += ((head & 7) + 1) * 2;
    if (start <= offset && offset < stop) return kind == 15 ? -1 : line;
    for (p = next; p < end && !(*p & 128); ++p) {
    }
  }
  return -1;
}

// The line of the instruction `offset` bytes into a code object (line_table, decode_line).
inline int line_at(const Api& api, const Reader& r, const void* code, int offset) {
  int first = 0;
  std::string table;
  if (offset < 0 || !line_table(api, r, code, first, table)) return -1;
  return decode_line(api.layout->minor, first, table, offset);
}

// One frame's file, line and function, read while it is alive.
struct Named {
  std::string file, function;
  int line = 0;
};
inline Named name(const Api& api, bool checked, const Frame& f) {
  const Reader r(api, checked);
  const void* file = nullptr;
  const void* function = nullptr;
  Named out;
  if (r.read(f.code, api.layout->code_filename, file)) out.file = ascii(api, r, file);
  if (r.read(f.code, api.layout->code_name, function)) out.function = ascii(api, r, function);
  out.line = line_at(api, r, f.code, f.offset);
  return out;
}

}  // namespace xferscope::pystack
