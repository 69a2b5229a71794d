"""scripts/python-offsets loaded as a module (it has no .py suffix): its table of where each
CPython minor keeps what the trace reads, and its discovery of the interpreters."""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "python-offsets"


@functools.cache
def offsets_script() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("python_offsets", str(SCRIPT))
    spec = importlib.util.spec_from_loader("python_offsets", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module
