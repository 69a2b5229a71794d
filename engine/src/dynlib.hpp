// A shared library opened at run time (dlopen) and its entry points resolved by name: how the
// engine reaches cuBLASLt, NCCL and CUPTI, none of which it links, so it builds and imports
// without them and says in one line what is missing. Internal to the engine and the trace's
// injection library.
#pragma once

#include <dlfcn.h>

#include <string>
#include <vector>

namespace xferscope::dynlib {

struct Opened {
  void* handle = nullptr;
  std::string path;  // the candidate that opened
};

// The first of `candidates` that dlopen opens (paths, or sonames the loader searches for).
inline Opened open_first(const std::vector<std::string>& candidates, int flags) {
  for (const std::string& name : candidates) {
    if (name.empty()) continue;
    if (void* handle = dlopen(name.c_str(), flags)) return {handle, name};
  }
  return {};
}

// Resolves `name` into `slot`; the first name not found is kept in `missing`.
template <typename F>
void resolve(F& slot, void* handle, const char* name, std::string& missing) {
  slot = reinterpret_cast<F>(dlsym(handle, name));
  if (!slot && missing.empty()) missing = name;
}

}  // namespace xferscope::dynlib
