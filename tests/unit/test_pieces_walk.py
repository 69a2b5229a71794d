"""The staged copy's walk over many host pieces (engine/include/xferscope/detail/pieces.hpp),
compiled into a small host program with the system's C++ compiler and checked against one flat
buffer: every range, over pieces of random sizes and empty ones, packed or with gaps between them
(the padding that keeps each piece's alignment), comes out byte for byte, in order, once; a gap's
bytes are left alone. And the groups in which copy_many hands cudaMemcpyBatchAsync its pieces:
each piece once, in order, 32 first, then twice as many each time. (The GPU tests of copy_many
move real bytes.)"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = r"""
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "xferscope/detail/pieces.hpp"

int main() {
  std::mt19937_64 rng(7);
  long ranges = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const std::size_t count = 1 + rng() % 40;
    std::vector<std::size_t> sizes(count), starts(count);
    const bool gaps = trial % 2 == 1;
    std::size_t total = 0;
    for (std::size_t i = 0; i < count; ++i) {
      sizes[i] = rng() % 4 == 0 ? 0 : 1 + rng() % (rng() % 2 ? 7 : 5000);
      if (gaps) total += rng() % 16;
      starts[i] = total;
      total += sizes[i];
    }
    if (total == 0) continue;
    std::vector<std::vector<unsigned char>> pieces(count);
    std::vector<unsigned char> flat(total, 0);  // a gap's bytes are 0 here and never written
    for (std::size_t i = 0; i < count; ++i) {
      for (std::size_t b = 0; b < sizes[i]; ++b) pieces[i].push_back(1 + rng() % 255);
      std::memcpy(flat.data() + starts[i], pieces[i].data(), sizes[i]);
    }
    for (int r = 0; r < 50; ++r, ++ranges) {
      const std::size_t at = rng() % total;
      const std::size_t n = 1 + rng() % (total - at);
      std::vector<unsigned char> out(n, 0);
      std::size_t expected_done = 0, written = 0;
      bool ok = true;
      xferscope::detail::for_each_part(
          starts.data(), sizes.data(), count, at, n,
          [&](std::size_t i, std::size_t inside, std::size_t done, std::size_t bytes) {
            ok = ok && done >= expected_done && done + bytes <= n && bytes > 0 &&
                 inside + bytes <= sizes[i] && starts[i] + inside == at + done;
            std::memcpy(out.data() + done, pieces[i].data() + inside, bytes);
            expected_done = done + bytes;
            written += bytes;
          });
      std::size_t gap_bytes = 0;  // of the range, in gaps
      for (std::size_t b = at; b < at + n; ++b) {
        bool inside_piece = false;
        for (std::size_t i = 0; i < count && !inside_piece; ++i)
          inside_piece = b >= starts[i] && b < starts[i] + sizes[i];
        gap_bytes += inside_piece ? 0 : 1;
      }
      if (!ok || written + gap_bytes != n || std::memcmp(out.data(), flat.data() + at, n) != 0) {
        std::printf("FAIL trial %d at %zu n %zu\n", trial, at, n);
        return 1;
      }
    }
  }
  // copy_many's groups: every piece once, in order, 32 first, then twice as many each time
  for (std::size_t count = 0; count <= 3000; ++count) {
    std::size_t next = 0, expected = xferscope::detail::kFirstGroup, groups = 0;
    bool ok = true;
    xferscope::detail::for_each_group(count, [&](std::size_t start, std::size_t n) {
      ok = ok && start == next && n > 0 && (n == expected || start + n == count);
      next = start + n;
      expected *= 2;
      ++groups;
    });
    if (!ok || next != count || (count == 1024 && groups != 6)) {
      std::printf("FAIL groups of %zu\n", count);
      return 1;
    }
  }
  std::printf("OK %ld\n", ranges);
  return 0;
}
"""


def test_every_range_of_the_pieces_comes_out_in_order(tmp_path):
    compiler = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if compiler is None:
        pytest.skip("no C++ compiler here")
    source = tmp_path / "pieces.cpp"
    source.write_text(PROGRAM)
    binary = tmp_path / "pieces"
    subprocess.run(
        [compiler, "-std=c++17", "-O1", "-I", str(ROOT / "engine" / "include"), str(source),
         "-o", str(binary)],
        check=True,
    )  # fmt: skip
    done = subprocess.run([str(binary)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout
    assert done.stdout.startswith("OK ") and int(done.stdout.split()[1]) > 10000
