// A batch of copy_many read and checked (bindings/resolve.cpp), for the copies that move it
// (bindings/copies.cpp); a broken rule of a batch is a CopyRefused, its message made here once.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "arrays.hpp"

namespace xferscope::bindings {

// Every piece's addresses and size, the direction, the GPU, whether every host piece is pinned
// (and each host piece's address on the GPU).
struct Resolved {
  std::vector<std::uintptr_t> destinations, sources, mapped;
  std::vector<std::size_t> sizes;
  std::vector<nanobind::object> keep;  // what the Python reader returned: held while copying
  bool upload = true, pinned = true;
  int device = 0;
  std::size_t total = 0;
  std::size_t started = 0;  // pieces 0 to started - 1 already queued by an Early
};

// Copies begun while a batch is still being read (copy_many's early pieces): told of pair 0's
// way and GPU, then of each pair in turn that continues the batch with a pinned host end, each
// of which it queues at once; the first pair that does not stops them. Whoever reads with one
// waits for its copies before raising the reader's error.
struct Early {
  virtual ~Early() = default;
  // whether to queue pieces while reading `count` pairs going `upload` to GPU `device`
  virtual bool begin(bool upload, int device, std::size_t count) = 0;
  virtual void queue(bool upload, std::uintptr_t destination, std::uintptr_t source,
                     std::size_t size) = 0;
};

// A T each thread keeps between calls, so that its vectors' memory is reused; a call made
// while the thread's is in use (from Python code that the first call ran) gets its own.
template <typename T>
class ThreadKept {
 public:
  ThreadKept() : mine_(!thread().busy) { thread().busy = true; }
  ~ThreadKept() {
    if (mine_) thread().busy = false;
  }
  ThreadKept(const ThreadKept&) = delete;
  ThreadKept& operator=(const ThreadKept&) = delete;
  T& get() { return mine_ ? thread().value : own_; }

 private:
  struct Kept {
    T value;
    bool busy = false;
  };
  static Kept& thread() {
    thread_local Kept kept;
    return kept;
  }
  bool mine_;
  T own_;
};

// A rule of a batch broken (one direction, one GPU, writable destinations, positive addresses
// and sizes, the way the caller named): Python's xferscope.transfer.CopyRefused, a ValueError.
struct CopyRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The pairs: each a (destination, source) tuple or list read natively, else given to
// `read_pair` (Python: (pair, index) -> (destination address, source address, nbytes,
// destination read-only, what to keep), or its error). `device` -1: the first piece's GPU.
// `classify`: Python's classify_pointers (the simulated engine's), or None for the driver's,
// remembered per live object. Read into `r` (its vectors' memory reused), and with `early`:
// where the driver classifies, pinned pieces queued while the rest are read (null: none).
void resolve_pairs(Resolved& r, nanobind::sequence pairs, int device, nanobind::handle classify,
                   nanobind::handle read_pair, Early* early);
Resolved resolve_pairs(nanobind::sequence pairs, int device, nanobind::handle classify,
                       nanobind::handle read_pair);

// Three arrays of addresses and sizes, read and checked as resolve_pairs' pairs.
Resolved resolve_addresses(Addresses destinations, Addresses sources, Addresses sizes, int device,
                           nanobind::handle classify);

// The CopyRefused of buffers that go the other way from the one copy_to_device (upload) or
// copy_to_host asked for.
[[noreturn]] void refuse_way(bool upload);

}  // namespace xferscope::bindings
