"""The build finds the CUDA toolkit where the README says (cmake/find_nvcc.cmake, run alone by
CMake in script mode): nvcc on PATH first, then $CUDA_HOME, $CUDA_PATH and /usr/local/cuda; and
with none of them, one line that says where it looked. Fake toolkits in a temporary directory
stand in for real ones, so the test runs on any machine with CMake."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "cmake" / "find_nvcc.cmake"
CMAKE = shutil.which("cmake")


def _cmake_version() -> tuple[int, ...]:
    if CMAKE is None:
        return ()
    out = subprocess.run([CMAKE, "--version"], capture_output=True, text=True).stdout.split()
    return tuple(int(x) for x in out[2].split(".")[:2] if x.isdigit()) if len(out) > 2 else ()


# find_program's NO_CACHE, which the script uses, came with CMake 3.21.
pytestmark = pytest.mark.skipif(_cmake_version() < (3, 21), reason="needs CMake 3.21 or newer")


def _toolkit(root: Path) -> Path:
    """A directory that looks like a toolkit to a search for nvcc: bin/nvcc, executable."""
    nvcc = root / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    return nvcc


def _find(tmp_path: Path, path: list[Path], **env: Path) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    environment["PATH"] = os.pathsep.join(str(p) for p in path)
    environment.update({k: str(v) for k, v in env.items()})
    default = tmp_path / "usr-local-cuda"
    return subprocess.run(
        [str(CMAKE), f"-DXFS_CUDA_DEFAULT_ROOT={default}", "-P", str(SCRIPT)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_nvcc_on_path_comes_first(tmp_path):
    on_path = _toolkit(tmp_path / "path")
    _toolkit(tmp_path / "home")
    found = _find(tmp_path, [on_path.parent], CUDA_HOME=tmp_path / "home")
    assert found.returncode == 0, found.stderr
    assert f"CUDA compiler {on_path}" in found.stdout + found.stderr


@pytest.mark.parametrize("variable", ["CUDA_HOME", "CUDA_PATH"])
def test_a_toolkit_named_by_the_environment_is_found(tmp_path, variable):
    nvcc = _toolkit(tmp_path / "toolkit")
    found = _find(tmp_path, [tmp_path / "empty"], **{variable: tmp_path / "toolkit"})
    assert found.returncode == 0, found.stderr
    assert f"CUDA compiler {nvcc}" in found.stdout + found.stderr


def test_the_default_place_is_found_with_nothing_else(tmp_path):
    nvcc = _toolkit(tmp_path / "usr-local-cuda")
    found = _find(tmp_path, [tmp_path / "empty"])
    assert found.returncode == 0, found.stderr
    assert f"CUDA compiler {nvcc}" in found.stdout + found.stderr


def test_no_toolkit_is_one_clear_message(tmp_path):
    found = _find(tmp_path, [tmp_path / "empty"])
    assert found.returncode != 0
    message = " ".join(found.stderr.split())
    assert "found none: not on PATH, nor in $CUDA_HOME/bin, $CUDA_PATH/bin" in message
    assert "CUDACXX=/path/to/nvcc" in message
