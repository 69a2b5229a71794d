// Walking a range of the concatenation of many pieces: what the staged copy's threads do for
// each chunk of a batch of host pieces; and the groups copy_many hands cudaMemcpyBatchAsync.
// Header-only and free of CUDA, so a host test checks it.
// Internal to the engine.
#pragma once

#include <algorithm>
#include <cstddef>

namespace xferscope::detail {

// Bytes [at, at + n) of a range in which piece i (sizes[i] bytes) starts at starts[i], as runs
// inside single pieces: calls part(i, inside, done, bytes) for each, where `inside` is the run's
// offset in piece i and `done` its offset from `at`. The starts rise and pieces do not overlap;
// gaps between pieces (padding that keeps a piece's alignment) and empty pieces are passed over.
template <class Part>
void for_each_part(const std::size_t* starts, const std::size_t* sizes, std::size_t count,
                   std::size_t at, std::size_t n, Part&& part) {
  // the last piece starting at or before `at` (an empty piece there is skipped below)
  std::size_t i = static_cast<std::size_t>(std::upper_bound(starts, starts + count, at) - starts);
  i = i == 0 ? 0 : i - 1;
  for (std::size_t done = 0; done < n && i < count; ++i) {
    if (at + done < starts[i]) {  // a gap before piece i
      done += std::min(starts[i] - (at + done), n - done);
      if (done == n) break;
    }
    const std::size_t inside = at + done - starts[i];
    if (inside >= sizes[i]) continue;  // empty, or ends before the range (only the first)
    const std::size_t bytes = std::min(sizes[i] - inside, n - done);
    part(i, inside, done, bytes);
    done += bytes;
  }
}

// copy_many's cudaMemcpyBatchAsync in several calls (batch/batch_api.hpp): pieces [0, count) as
// group(start, n) runs, kFirstGroup pieces first, then twice as many each time, in order, each
// piece once.
constexpr std::size_t kFirstGroup = 32;

template <class Group>
void for_each_group(std::size_t count, Group&& group) {
  for (std::size_t start = 0, n = kFirstGroup; start < count; start += n, n *= 2) {
    n = std::min(n, count - start);
    group(start, n);
  }
}

}  // namespace xferscope::detail
