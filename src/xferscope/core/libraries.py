"""Where the NVIDIA libraries the engine opens at run time are: cuBLASLt (`gemm`), CUPTI (the
injection library of `trace`) and NCCL (GPU pairs of `fleet`). None is linked, so xferscope
builds, installs and imports without them.

cuda-pathfinder, NVIDIA's finder for these libraries, looks where NVIDIA's own Python packages
look: the NVIDIA wheels in this environment (PyTorch installs cuBLAS, CUPTI and NCCL as wheels),
conda, the loader path, $CUDA_PATH or $CUDA_HOME, and the toolkit. The file found is given to the
engine in the variable it reads ($XFERSCOPE_LIBCUBLASLT, ...), which a user may also set to
choose one. A library that cannot be found, or is of another CUDA major than the engine's, is
one line naming the pip package that provides it."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .compiled import engine_module
from .errors import XferscopeError


class LibraryMissingError(XferscopeError):
    """An NVIDIA library a command needs is not found; the message names the package."""


@dataclass(frozen=True, slots=True)
class NvidiaLibrary:
    """One library the engine opens: cuda-pathfinder's name for it, what people call it, the
    variable the engine reads, its file name, and the pip package for a CUDA major."""

    name: str
    title: str
    variable: str
    stem: str  # libcupti.so
    package: Callable[[int], str]
    soname_major: Callable[[int], int]  # the .so's major for a CUDA major
    used_by: str

    def soname(self, cuda_major: int) -> str:
        return f"{self.stem}.{self.soname_major(cuda_major)}"


def _ctk_package(base: str) -> Callable[[int], str]:
    """NVIDIA's toolkit wheels: `nvidia-cublas` for CUDA 13 on, `nvidia-cublas-cu12` before."""
    return lambda major: base if major >= 13 else f"{base}-cu{major}"


LIBRARIES = {
    lib.name: lib
    for lib in (
        NvidiaLibrary(
            "cublasLt",
            "cuBLASLt",
            "XFERSCOPE_LIBCUBLASLT",
            "libcublasLt.so",
            _ctk_package("nvidia-cublas"),
            lambda major: major,
            "xferscope gemm",
        ),
        NvidiaLibrary(
            "cupti",
            "CUPTI",
            "XFERSCOPE_LIBCUPTI",
            "libcupti.so",
            _ctk_package("nvidia-cuda-cupti"),
            lambda major: major,
            "xferscope trace",
        ),
        NvidiaLibrary(
            "nccl",
            "NCCL",
            "XFERSCOPE_LIBNCCL",
            "libnccl.so",
            lambda major: f"nvidia-nccl-cu{major}",
            lambda _major: 2,
            "GPU pairs over NCCL",
        ),
    )
}


def cuda_major() -> int:
    """The CUDA major the engine was built with: the libraries must be of the same."""
    return int(engine_module().CUDA_BUILT) // 1000


def _search(library: NvidiaLibrary) -> tuple[str | None, str]:
    """cuda-pathfinder's answer: the file, or None and why."""
    try:
        from cuda import pathfinder  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None, "cuda-pathfinder is not installed (pip install cuda-pathfinder)"
    try:
        loaded = pathfinder.load_nvidia_dynamic_lib(library.name)
    except (pathfinder.DynamicLibNotFoundError, RuntimeError, OSError) as exc:
        return None, " ".join(str(exc).split())[:200]
    return (str(loaded.abs_path) if loaded.abs_path else None), "found without a path"


def find(name: str, error: type[XferscopeError] = LibraryMissingError) -> str:
    """The file of library `name` for this engine's CUDA major; `error` says what to install
    when there is none."""
    library = LIBRARIES[name]
    major = cuda_major()
    soname = library.soname(major)
    named = os.environ.get(library.variable, "").strip()
    if named:
        if not Path(named).is_file():
            raise error(
                f"${library.variable} names '{named}', which is not a file; unset it, or name "
                f"{soname}"
            )
        return named
    path, why = _search(library)
    if path and Path(path).name.startswith(soname):
        return path
    found = f"only {path}, of another CUDA major, was found" if path else f"not found: {why}"
    raise error(
        f"{library.used_by} needs {library.title} ({soname}, CUDA {major}), {found}. Install it "
        f"with `pip install {library.package(major)}`, or the CUDA toolkit {major}, or name the "
        f"file with ${library.variable}"
    )


def point_engine_at(name: str, error: type[XferscopeError] = LibraryMissingError) -> str:
    """Finds library `name` and gives its file to the engine; returns the file."""
    path = find(name, error)
    os.environ[LIBRARIES[name].variable] = path
    return path
