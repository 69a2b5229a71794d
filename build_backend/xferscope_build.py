"""xferscope's PEP 517 build backend: scikit-build-core's, with xferscope_toolchain's checks run
first, so a machine that cannot build gets one line before any CMake output, and with NVIDIA's
CUDA toolchain wheels added to the build requirements when no CUDA toolkit is used. CMake is then
pointed at the chosen nvcc (CUDACXX) and, for the wheels, at their toolkit-shaped tree."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from scikit_build_core import build as _build
from scikit_build_core.build import (  # noqa: F401 (hooks passed on as they are)
    build_sdist,
    get_requires_for_build_sdist,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

import xferscope_toolchain as tc


def _refuse(exc: tc.BuildRefused) -> NoReturn:
    sys.exit(f"xferscope cannot be built here: {exc}")


def _toolchain() -> tc.Toolchain:
    """The toolchain, after every check that can be made before it is installed."""
    try:
        tc.check_machine(os.environ)
        toolchain = tc.choose(os.environ)
        tc.check_toolchain(toolchain, os.environ, tc.driver_cuda_version())
    except tc.BuildRefused as exc:
        _refuse(exc)
    return toolchain


def _extra_requires() -> list[str]:
    return [tc.PYPI_TOOLCHAIN] if _toolchain().source == "pypi" else []


def _point_cmake(config_settings: dict[str, Any] | None) -> dict[str, Any]:
    """Points CMake at the toolchain; returns the settings for scikit-build-core, with a build
    directory of the PyPI toolchain's own, so the two never share a CMake cache."""
    settings = dict(config_settings or {})
    toolchain = _toolchain()
    if toolchain.source == "pypi":
        try:
            root = tc.pypi_root()
        except tc.BuildRefused as exc:
            _refuse(exc)
        tc.prepare_pypi_root(root)
        os.environ["CUDACXX"] = str(root / "bin" / "nvcc")
        os.environ["CUDAToolkit_ROOT"] = str(root)  # noqa: SIM112 (CMake reads it so)
        settings.setdefault("build-dir", "build/{wheel_tag}-pypi")
    else:
        assert toolchain.nvcc is not None
        os.environ["CUDACXX"] = toolchain.nvcc
    print(f"xferscope: building with {toolchain.describe()}", file=sys.stderr)
    return settings


def _requires(hook: Callable[..., list[str]]) -> Callable[..., list[str]]:
    """scikit-build-core's requirements hook, with the PyPI toolchain added where it is used."""

    def requires(config_settings: dict[str, Any] | None = None) -> list[str]:
        return [*hook(config_settings), *_extra_requires()]

    return requires


def _builds(hook: Callable[..., Any]) -> Callable[..., str]:
    """scikit-build-core's build hook, run with CMake pointed at the toolchain."""

    def build(
        wheel_directory: str,
        config_settings: dict[str, Any] | None = None,
        metadata_directory: str | None = None,
    ) -> str:
        settings = _point_cmake(config_settings)
        return str(hook(wheel_directory, settings, metadata_directory))

    return build


get_requires_for_build_wheel = _requires(_build.get_requires_for_build_wheel)
get_requires_for_build_editable = _requires(_build.get_requires_for_build_editable)
build_wheel = _builds(_build.build_wheel)
build_editable = _builds(_build.build_editable)
