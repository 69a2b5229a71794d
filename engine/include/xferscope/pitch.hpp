// 2D and 3D copies (`xferscope pitch`, issue 13): the same bytes as `rows` rows of `width`
// bytes, between host rows `host_pitch` apart (pinned or pageable) and device rows that are
// pitched (cudaMallocPitch) or packed, made by one of several methods, each verified:
//   contiguous   the reference: one cudaMemcpyAsync of all the bytes, packed on both sides
//   loop         a cudaMemcpyAsync per row
//   2d           cudaMemcpy2D, synchronous
//   2d-async     cudaMemcpy2DAsync on a stream
//   3d           cudaMemcpy3DAsync of the same rows as slices of rows
//   pack         the CPU packs the rows into a pinned buffer, one copy, and a kernel places
//                them at the device pitch (for readback: a kernel packs, one copy, the CPU
//                places the rows)
//   span         upload only: one copy of the host span, gaps between rows included, and a
//                kernel that keeps the rows (a readback would overwrite the host's gaps)
// Timed per copy: host time from the first call to completion, device time between events.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "xferscope/cases.hpp"

namespace xferscope::pitch {

struct PitchSpec {
  int device = 0;
  std::string direction = "h2d";  // h2d, d2h
  std::string memory = "pinned";  // pinned, pageable (host side)
  std::size_t width = 0;          // bytes per row
  std::size_t rows = 0;
  std::size_t host_pitch = 0;  // bytes from one host row to the next, at least `width`
  bool pitched = true;         // device rows: cudaMallocPitch's pitch, or packed (pitch = width)
  std::uint64_t seed = Limits::default_seed;
};

const std::vector<std::string>& methods();
// Why `method` cannot make this copy ("" when it can).
std::string refusal(const PitchSpec& spec, const std::string& method);
// The loop's most rows: beyond, one call per row takes seconds and says nothing new.
inline constexpr std::size_t kMostLoopRows = 65536;

struct PitchTiming {
  double host_s = 0;    // per copy: first call to completion, host clock
  double device_s = 0;  // per copy: between events around it
};

struct PitchVerification {
  std::int64_t wrong_rows = 0;  // rows with a byte that differs from its source
  std::int64_t gap_bytes = 0;   // host bytes between rows that a readback overwrote
  std::size_t bytes_checked = 0;
};

class Pitched {
 public:
  explicit Pitched(const PitchSpec& spec);
  ~Pitched();
  Pitched(const Pitched&) = delete;
  Pitched& operator=(const Pitched&) = delete;

  // `iterations` copies made by `method`, back to back; the mean per copy.
  PitchTiming time(const std::string& method, std::int64_t iterations);
  // One copy by `method` into a poisoned destination, then every row (and, for a readback,
  // every gap) compared.
  PitchVerification verify(const std::string& method);
  std::size_t bytes() const;         // width x rows: the payload of one copy
  std::size_t device_pitch() const;  // cudaMallocPitch's pitch, or the width
  std::size_t depth() const;         // 3d: slices of rows / depth rows each

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace xferscope::pitch
