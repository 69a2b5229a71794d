// Many small copies at once (`xferscope batch`, issue 13): N copies of given sizes between host
// memory (pinned or pageable) and one GPU, or between two buffers of one GPU, contiguous or
// scattered, made by one of several methods, each verified:
//   loop         a cudaMemcpyAsync per copy
//   batch        one cudaMemcpyBatchAsync, with a source access order (stream, during_call, any)
//   pack         the pieces packed into one pinned staging buffer by the CPU, one copy, and a
//                scatter kernel on the GPU (for readback: a gather kernel, one copy, unpacked)
//   staged       pageable memory only: the staged copy's threads pack the pieces chunk by chunk
//                into pinned buffers while the copy engine moves the chunks before, and a
//                scatter kernel on the GPU (readback: gather kernel, chunks out to the pieces);
//                timed on the host, as its threads work on streams of their own
//   kernel       one SM copy kernel over the list of pointers, reading or writing pinned host
//                memory mapped into the GPU
//   graph        a CUDA graph of the loop's copies, captured once and launched
// Timed per batch: host time from the first call to the batch's completion, and device time
// between events around it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "xferscope/cases.hpp"

namespace xferscope::batch {

struct BatchSpec {
  int device = 0;
  std::string direction = "h2d";   // h2d, d2h, d2d
  std::string memory = "pinned";   // pinned, pageable (host side); d2d: device
  std::vector<std::size_t> sizes;  // one per copy
  bool scattered = false;          // each piece followed by a gap as large as itself
  std::uint64_t seed = Limits::default_seed;
};

// The methods, and why one cannot run with a spec ("" when it can) on a machine whose driver
// is `driver_version` (cudaDriverGetVersion) and whose GPUs can or cannot reach pageable
// memory; the Batch asks the machine it runs on.
const std::vector<std::string>& methods();
std::string refusal(const BatchSpec& spec, const std::string& method, int driver_version,
                    bool pageable_access);
// The methods xferscope.copy_many makes (no graph), and why one cannot make this batch.
const std::vector<std::string>& copy_many_methods();
std::string copy_many_refusal(const BatchSpec& spec, const std::string& method, int driver_version);
// Whether a method's device time is its host time: its work runs on streams of its own (the
// staged copy's threads), so events around the batch's stream would time nothing.
bool host_timed(const std::string& method);

struct BatchTiming {
  double host_s = 0;    // per batch: first call to completion, host clock
  double device_s = 0;  // per batch: between events around it
};

class Batch {
 public:
  explicit Batch(const BatchSpec& spec);
  ~Batch();
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  // `iterations` batches made by `method`, back to back; the mean per batch. `as_copy_many`:
  // each batch made as xferscope.copy_many makes it (many.hpp): the pointers' kinds looked up,
  // the tables built and uploaded, and the batch waited for, every time.
  BatchTiming time(const std::string& method, std::int64_t iterations, bool as_copy_many = false);
  // One batch by `method` into cleared destinations, then every byte compared with its source;
  // returns the number of copies that arrived wrong.
  std::int64_t verify(const std::string& method, bool as_copy_many = false);
  std::size_t bytes() const;  // the payload of one batch

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace xferscope::batch
