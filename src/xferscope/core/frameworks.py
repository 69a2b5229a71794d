"""The frameworks xferscope knows, written once: what each is called in words (the advice's
"PyTorch"), the Python packages and native libraries that are its, and its word where an option
names it (`xferscope.load(framework="torch")`). The trace tells a call's framework by them
(trace/records.py), the copy API moves their objects (transfer/frameworks/), and `load` makes
their tensors (transfer/loading/). No framework is imported here."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Framework:
    name: str  # in words, as the advice says it
    packages: tuple[str, ...]  # the Python packages whose objects and frames are its
    libraries: tuple[str, ...] = ()  # names within its native libraries' file names
    option: str | None = None  # its word where an option names it (its first package)


PYTORCH = Framework("PyTorch", ("torch",), ("libtorch", "libc10"), "torch")
CUPY = Framework("CuPy", ("cupy", "cupyx", "cupy_backends"), ("cupy",), "cupy")
JAX = Framework("JAX", ("jax", "jaxlib"), ("jaxlib", "xla_extension", "xla_cuda_plugin"), "jax")
NUMBA = Framework("Numba", ("numba",), ("numba",), "numba")
FRAMEWORKS = (PYTORCH, CUPY, JAX, NUMBA)

_BY_PACKAGE = {p: f for f in FRAMEWORKS for p in f.packages}


def by_package(package: str) -> Framework | None:
    """The framework whose Python package (top-level name) this is."""
    return _BY_PACKAGE.get(package)


def by_library(file_name: str) -> Framework | None:
    """The framework a native library is part of, by its file's name (`libtorch_cuda.so`)."""
    return next((f for f in FRAMEWORKS if any(lib in file_name for lib in f.libraries)), None)


def by_option(word: str) -> Framework | None:
    """The framework an option's word names (`torch`, `cupy`)."""
    return next((f for f in FRAMEWORKS if f.option == word), None)
