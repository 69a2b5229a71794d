"""The batch kernels' tables (engine/src/batch/kernels.hpp), compiled into a small host program
and checked: a copy cut into parts covers its bytes once, in order, with parts of at most
kPartBytes that keep both ends' alignment; a packed piece's place starts at or after the end
before it, within 15 bytes, as far past 16 bytes as its other end (so the kernel moves 16-byte
words). The GPU tests of copy_many move real bytes through both."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = r"""
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "batch/kernels.hpp"

using namespace xferscope::batch::kernels;

int main() {
  std::mt19937_64 rng(11);
  long checked = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const std::uintptr_t src = 0x100000 + rng() % 4096, dst = 0x900000000 + rng() % 4096;
    const std::size_t bytes = trial % 3 == 0 ? rng() % 64 : rng() % (5 * kPartBytes);
    std::vector<Piece> table;
    add(table, reinterpret_cast<const void*>(src), reinterpret_cast<void*>(dst), bytes);
    if (table.size() != parts(bytes)) return std::printf("FAIL parts %zu\n", bytes), 1;
    std::size_t done = 0;
    for (const Piece& p : table) {
      const auto s = reinterpret_cast<std::uintptr_t>(p.src);
      const auto d = reinterpret_cast<std::uintptr_t>(p.dst);
      if (s != src + done || d != dst + done || p.bytes == 0 || p.bytes > kPartBytes ||
          (s - src) % 16 != 0)
        return std::printf("FAIL part of %zu at %zu\n", bytes, done), 1;
      done += p.bytes;
    }
    if (done != bytes) return std::printf("FAIL cover %zu\n", bytes), 1;
    const std::size_t end = rng() % 100000;
    const std::size_t at = packed_at(end, reinterpret_cast<const void*>(dst));
    if (at < end || at > end + 15 || (at - dst) % 16 != 0)
      return std::printf("FAIL packed_at %zu %zu\n", end, at), 1;
    ++checked;
  }
  std::printf("OK %ld\n", checked);
  return 0;
}
"""


def test_tables_cover_every_byte_and_keep_alignment(tmp_path):
    compiler = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    nvcc = shutil.which("nvcc")
    places = [Path(nvcc).resolve().parents[1] / "include"] if nvcc else []
    places.append(Path("/usr/local/cuda/include"))
    cuda = next((p for p in places if (p / "cuda_runtime_api.h").exists()), None)
    if compiler is None or cuda is None:
        pytest.skip("no C++ compiler or CUDA headers here")
    source = tmp_path / "table.cpp"
    source.write_text(PROGRAM)
    binary = tmp_path / "table"
    subprocess.run(
        [compiler, "-std=c++17", "-O1", "-I", str(ROOT / "engine" / "src"), "-I",
         str(ROOT / "engine" / "include"), "-isystem", str(cuda), str(source), "-o", str(binary)],
        check=True,
    )  # fmt: skip
    done = subprocess.run([str(binary)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout
    assert done.stdout.startswith("OK ") and int(done.stdout.split()[1]) == 20000
