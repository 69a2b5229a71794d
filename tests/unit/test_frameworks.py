"""The frameworks written once (core/frameworks.py): a package, a native library's file or an
option's word names the same framework for the trace, `load` and the copy API alike."""

from __future__ import annotations

import pytest

from xferscope.core import frameworks
from xferscope.trace.records import PyFrame, native_framework
from xferscope.transfer.loading import load


@pytest.mark.parametrize(
    ("package", "library", "name"),
    [("torch", "libtorch_cuda.so", "PyTorch"), ("cupyx", "cupy_backends.so", "CuPy"),
     ("jaxlib", "xla_cuda_plugin.so", "JAX"), ("numba", "numba_cuda.so", "Numba")],
)  # fmt: skip
def test_a_package_and_a_library_name_the_same_framework(package, library, name):
    assert frameworks.by_package(package).name == name  # type: ignore[union-attr]
    assert frameworks.by_library(library).name == name  # type: ignore[union-attr]
    frame = PyFrame(f"/venv/lib/python3.12/site-packages/{package}/x.py", 3, "f")
    assert frame.framework == name
    assert native_framework(f"{library}+0x10 (f)") == name


def test_others_are_no_framework_and_load_takes_the_words_it_has_kits_for():
    assert frameworks.by_package("numpy") is None and frameworks.by_library("libc.so.6") is None
    assert frameworks.by_option("torch") is frameworks.PYTORCH
    assert sorted(load.KITS) == ["cupy", "torch"]
    with pytest.raises(ValueError, match=r"^framework: 'jax' is not one of torch, cupy$"):
        load._kit("jax")
