// The one shape of every native object the bindings hand to Python: owned until close(), so
// Python frees pinned and device memory (and joins threads) at a point it chooses (a `with`
// block) rather than whenever the garbage collector runs; made and freed with the GIL released;
// a use after close() is the engine's own error, naming what was closed.
#pragma once

#include <nanobind/nanobind.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "xferscope/error.hpp"

namespace xferscope::bindings {

// Releases the GIL around freeing native resources, unless the interpreter is finalizing: there
// a release and re-acquire aborts the process ("PyThreadState_Get: ... finalizing"), and no
// other Python thread can run anyway. The CLI closes everything before it exits; this keeps a
// library user's leftover handle from crashing the interpreter's teardown.
class ReleaseUnlessFinalizing {
 public:
  ReleaseUnlessFinalizing() {
#if PY_VERSION_HEX >= 0x030D0000
    const bool finalizing = Py_IsFinalizing();
#else
    const bool finalizing = _Py_IsFinalizing();
#endif
    if (!finalizing) release_.emplace();
  }

 private:
  std::optional<nanobind::gil_scoped_release> release_;
};

// Owns a T until close(). `what` names it in the error a use after close() raises (Error, the
// engine's UsageError unless the object's family has its own). `keep` holds what the object
// refers to and must outlive it (a GL scenario's context).
template <typename T, typename Error = UsageError>
class Handle {
 public:
  template <typename... Args>
  explicit Handle(const char* what, std::shared_ptr<void> keep, Args&&... args)
      : what_(what), keep_(std::move(keep)) {
    nanobind::gil_scoped_release release;
    object_ = std::make_shared<T>(std::forward<Args>(args)...);
  }

  T& get() const {
    if (!object_) throw Error(std::string("this ") + what_ + " is closed");
    return *object_;
  }

  bool closed() const noexcept { return !object_; }

  // The object, shared, for a handle whose object must outlive this one's close().
  std::shared_ptr<T> share() const {
    get();
    return object_;
  }

  void close() {
    ReleaseUnlessFinalizing release;
    object_.reset();
    keep_.reset();
  }

 private:
  const char* what_;
  std::shared_ptr<void> keep_;
  std::shared_ptr<T> object_;
};

}  // namespace xferscope::bindings
