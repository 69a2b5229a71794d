#include "xferscope/pattern.hpp"

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

namespace xferscope {

namespace {

// Word-wise fill of words [first, last) of the buffer.
void fill_words(std::uint8_t* base, std::size_t first, std::size_t last, std::uint64_t seed,
                std::uint64_t mask) {
  for (std::size_t i = first; i < last; ++i) {
    const std::uint64_t word = pattern_word(seed, i) ^ mask;
    std::memcpy(base + i * 8, &word, 8);  // memcpy: the buffer may be any alignment
  }
}

}  // namespace

void fill_host(void* destination, std::size_t bytes, std::uint64_t seed, bool complement) {
  auto* base = static_cast<std::uint8_t*>(destination);
  const std::uint64_t mask = complement ? ~0ull : 0ull;
  const std::size_t words = bytes / 8;
  constexpr std::size_t kWordsPerThread = std::size_t{1} << 20;  // 8 MiB a thread at least
  const std::size_t threads = std::clamp<std::size_t>(
      words / kWordsPerThread, 1, std::max(1u, std::min(16u, std::thread::hardware_concurrency())));
  if (threads == 1) {
    fill_words(base, 0, words, seed, mask);
  } else {
    std::vector<std::thread> workers;
    const std::size_t chunk = (words + threads - 1) / threads;
    for (std::size_t t = 0; t < threads; ++t) {
      const std::size_t first = t * chunk;
      const std::size_t last = std::min(words, first + chunk);
      if (first < last) workers.emplace_back(fill_words, base, first, last, seed, mask);
    }
    for (auto& worker : workers) worker.join();
  }
  for (std::size_t offset = words * 8; offset < bytes; ++offset) {
    base[offset] = static_cast<std::uint8_t>(pattern_byte(seed, offset) ^ mask);
  }
}

}  // namespace xferscope
