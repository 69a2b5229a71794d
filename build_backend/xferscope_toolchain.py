"""Which CUDA toolchain builds xferscope's engine, and whether this machine can build it at all:
the one place these rules live (the build backend asks; tests/unit/test_toolchain.py checks).

A CUDA toolkit is used where one is found, in this order: $CUDACXX, nvcc on PATH, then
$CUDA_HOME/bin, $CUDA_PATH/bin and /usr/local/cuda/bin. Without one, or with XFERSCOPE_CUDA=pypi,
the build takes NVIDIA's CUDA toolchain from PyPI (the cuda-toolkit wheels: nvcc, cicc, the
runtime's headers and static library, CCCL, CUPTI's header), which install into
site-packages/nvidia/cu13, a tree shaped like a toolkit. XFERSCOPE_CUDA=system never does.

Before CMake runs, whatever would make the build fail, or build an engine this machine cannot
run, is one line (BuildRefused): an unsupported platform, no C++ compiler, no Python headers, a
toolkit older than CUDA 12, a driver older than the toolkit's CUDA."""

from __future__ import annotations

import ctypes
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# NVIDIA's toolchain from PyPI, one CUDA minor for every part (the cuda-toolkit metapackage pins
# its components to one release). 13.0 runs on every CUDA 13 driver (580 or newer), so a wheel
# built with it runs on any of them, and its PTX is JIT-compiled by any of them.
PYPI_CUDA = (13, 0)
PYPI_TOOLCHAIN = "cuda-toolkit[nvcc,nvvm,cudart,crt,cccl,cupti]==13.0.*"
PYPI_SUBDIR = Path("nvidia") / "cu13"
OLDEST_TOOLKIT = (12, 0)
# The first driver branch of each CUDA major (NVIDIA's CUDA toolkit release notes, table 3).
FIRST_DRIVER = {12: "525", 13: "580"}
CHOICES = ("auto", "system", "pypi")
DEFAULT_ROOT = "/usr/local/cuda"
PLATFORMS = {("linux", "x86_64"), ("linux", "aarch64")}
COMPILERS = ("c++", "g++", "clang++")


class BuildRefused(Exception):
    """This machine cannot build xferscope as configured; the message is one line saying why
    and what to do."""


@dataclass(frozen=True)
class Toolchain:
    """The toolchain a build uses: a CUDA toolkit found on this machine (nvcc, and where it was
    found), or NVIDIA's wheels from PyPI (nvcc None until they are installed)."""

    source: str  # "system" or "pypi"
    nvcc: str | None = None
    found_by: str = ""  # "CUDACXX", "PATH", "$CUDA_HOME", "$CUDA_PATH" or the default place

    def describe(self) -> str:
        if self.source == "pypi":
            return f"NVIDIA's CUDA {_dotted(PYPI_CUDA)} toolchain from PyPI ({PYPI_TOOLCHAIN})"
        return f"the CUDA toolkit's {self.nvcc} (found by {self.found_by})"


def _dotted(version: Sequence[int]) -> str:
    return ".".join(str(v) for v in version)


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def find_system_nvcc(
    env: Mapping[str, str], default_root: str = DEFAULT_ROOT
) -> tuple[str, str] | None:
    """nvcc of a CUDA toolkit on this machine and what found it, or None. A CUDACXX that names
    no executable is refused, not passed over."""
    named = env.get("CUDACXX", "").strip()
    if named:
        if not _executable(named):
            raise BuildRefused(f"CUDACXX names '{named}', which is not an executable nvcc")
        return named, "CUDACXX"
    on_path = shutil.which("nvcc", path=env.get("PATH", ""))
    if on_path:
        return on_path, "PATH"
    for label, root in (
        ("$CUDA_HOME", env.get("CUDA_HOME", "")),
        ("$CUDA_PATH", env.get("CUDA_PATH", "")),
        (default_root, default_root),
    ):
        if root and _executable(os.path.join(root, "bin", "nvcc")):
            return os.path.join(root, "bin", "nvcc"), label
    return None


def choose(env: Mapping[str, str], default_root: str = DEFAULT_ROOT) -> Toolchain:
    """The toolchain XFERSCOPE_CUDA and this machine give."""
    choice = env.get("XFERSCOPE_CUDA", "").strip().lower() or "auto"
    if choice not in CHOICES:
        raise BuildRefused(
            f"XFERSCOPE_CUDA: '{choice}' is not one of {', '.join(CHOICES)} (auto: a CUDA "
            "toolkit where one is found, else NVIDIA's toolchain from PyPI)"
        )
    if choice == "pypi":
        return Toolchain("pypi")
    found = find_system_nvcc(env, default_root)
    if found:
        return Toolchain("system", found[0], found[1])
    if choice == "system":
        raise BuildRefused(
            "XFERSCOPE_CUDA=system, but no CUDA toolkit was found: not CUDACXX, nor nvcc on PATH, "
            f"in $CUDA_HOME/bin, $CUDA_PATH/bin or {default_root}/bin. Install the CUDA toolkit "
            "12 or newer, or leave XFERSCOPE_CUDA unset to build with NVIDIA's toolchain from PyPI"
        )
    return Toolchain("pypi")


def nvcc_version(nvcc: str) -> tuple[int, int]:
    """The CUDA release nvcc reports (`nvcc --version`: "release 13.0, V13.0.88")."""
    try:
        out = subprocess.run(
            [nvcc, "--version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildRefused(
            f"{nvcc} does not run ({exc}); name a working nvcc with CUDACXX"
        ) from None
    match = re.search(r"release (\d+)\.(\d+)", out.stdout)
    if out.returncode != 0 or not match:
        raise BuildRefused(
            f"{nvcc} --version did not say its CUDA release (exit {out.returncode}); name a "
            "working nvcc with CUDACXX"
        )
    return int(match.group(1)), int(match.group(2))


def driver_cuda_version() -> tuple[int, int] | None:
    """The newest CUDA the NVIDIA driver on this machine supports (cuDriverGetVersion, which
    needs neither a GPU nor cuInit), or None with no driver: a wheel built to ship elsewhere."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int(0)
        if cuda.cuDriverGetVersion(ctypes.byref(version)) != 0 or version.value <= 0:
            return None
    except (OSError, AttributeError):
        return None
    return version.value // 1000, (version.value % 1000) // 10


def _compiler(env: Mapping[str, str]) -> str | None:
    named = env.get("CXX", "").strip()
    if named:
        program = named.split()[0]
        return shutil.which(program, path=env.get("PATH", "")) or (
            program if _executable(program) else None
        )
    for name in COMPILERS:
        found = shutil.which(name, path=env.get("PATH", ""))
        if found:
            return found
    return None


def check_machine(
    env: Mapping[str, str],
    system: str = sys.platform,
    machine: str = platform.machine(),
    python_include: str | None = None,
) -> None:
    """What every build needs, whichever toolchain: a supported platform, a C++ compiler and
    Python's headers. Raises BuildRefused naming the first thing missing."""
    if (system, machine.lower()) not in PLATFORMS:
        raise BuildRefused(
            f"xferscope builds on Linux on x86-64 or aarch64, where NVIDIA's CUDA toolchain and "
            f"drivers are; this is {system} on {machine}"
        )
    if _compiler(env) is None:
        named = env.get("CXX", "").strip()
        where = (
            f"CXX names '{named}', which is not found"
            if named
            else ("CXX is unset and none of " + ", ".join(COMPILERS) + " is on PATH")
        )
        raise BuildRefused(
            f"xferscope needs a C++17 compiler to build its engine, and found none ({where}): "
            "install one (Debian/Ubuntu: apt install g++; Fedora/RHEL: dnf install gcc-c++)"
        )
    include = python_include if python_include is not None else sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").is_file():
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        raise BuildRefused(
            f"xferscope needs Python's C headers to build its engine, and {include} has no "
            f"Python.h: install them (Debian/Ubuntu: apt install python{version}-dev; "
            f"Fedora/RHEL: dnf install python{version}-devel)"
        )


def check_toolchain(
    toolchain: Toolchain, env: Mapping[str, str], driver: tuple[int, int] | None
) -> None:
    """A toolkit new enough, and a driver that runs what it builds (unless
    XFERSCOPE_IGNORE_DRIVER=1, for a wheel built here to run elsewhere)."""
    if toolchain.source == "system":
        assert toolchain.nvcc is not None
        version = nvcc_version(toolchain.nvcc)
        if version < OLDEST_TOOLKIT:
            raise BuildRefused(
                f"the CUDA toolkit at {toolchain.nvcc} is CUDA {_dotted(version)}; xferscope "
                f"needs {_dotted(OLDEST_TOOLKIT)} or newer: install a newer one, or build with "
                "NVIDIA's toolchain from PyPI (XFERSCOPE_CUDA=pypi)"
            )
    else:
        version = PYPI_CUDA
    if driver is None or env.get("XFERSCOPE_IGNORE_DRIVER", "") == "1":
        return
    if driver[0] < version[0]:
        first = FIRST_DRIVER.get(version[0], "a newer one")
        what = (
            f"the CUDA toolkit at {toolchain.nvcc}"
            if toolchain.source == "system"
            else "NVIDIA's toolchain on PyPI"
        )
        fix = (
            f"or install a CUDA {driver[0]} toolkit (CUDACXX names its nvcc)"
            if driver[0] >= OLDEST_TOOLKIT[0]
            else "xferscope needs a driver for CUDA 12 or newer"
        )
        raise BuildRefused(
            f"the NVIDIA driver here supports CUDA {_dotted(driver)}, and {what} is CUDA "
            f"{_dotted(version)}, whose programs need driver {first} or newer: update the driver, "
            f"{fix}; XFERSCOPE_IGNORE_DRIVER=1 builds anyway, for another machine"
        )


def pypi_root(paths: Sequence[str] = tuple(sys.path)) -> Path:
    """The toolkit-shaped tree the PyPI toolchain installed into this (build) environment."""
    for entry in paths:
        root = Path(entry) / PYPI_SUBDIR
        if (root / "bin" / "nvcc").is_file():
            return root
    raise BuildRefused(
        "the build was to use NVIDIA's CUDA toolchain from PyPI, and it is not in the build "
        "environment: build with pip's build isolation (the default), or pip install "
        f'"{PYPI_TOOLCHAIN}" into this environment first, or install a CUDA toolkit'
    )


def prepare_pypi_root(root: Path) -> None:
    """Makes the wheels' tree work as a toolkit does: the tools nvcc runs executable (wheels may
    drop the bit); lib64, where nvcc.profile has nvcc link from, naming the wheels' lib (else the
    linker takes libcudart_static from wherever else it finds one, or none); and the unversioned
    names a toolkit gives its shared libraries (libcudart.so), which CMake's FindCUDAToolkit
    looks for and the wheels, made for running, leave out."""
    for tool in [*(root / "bin").iterdir(), root / "nvvm" / "bin" / "cicc"]:
        if tool.is_file() and not tool.name.endswith((".profile", ".h")):
            tool.chmod(tool.stat().st_mode | 0o111)
    lib = root / "lib"
    if not lib.is_dir():
        return
    lib64 = root / "lib64"
    if not lib64.exists() and not lib64.is_symlink():
        lib64.symlink_to("lib")
    for versioned in lib.glob("lib*.so.*"):
        plain = lib / (versioned.name.split(".so.")[0] + ".so")
        if not plain.exists() and not plain.is_symlink():
            plain.symlink_to(versioned.name)
