"""The trace's reading of Python stacks without the GIL (engine/src/trace/pystack.hpp), through
the injection library's test entry point: called by ctypes with the GIL released (CDLL, as
PyTorch's copies are made) and held (PyDLL), the first walks read through a pipe and the later
ones directly, from a function, a method, a thread and a generator. Every CPython this machine
has (this one, and python3.10 to python3.14 where found) loads the same library, so the offsets
of each minor are checked against its real interpreter."""

from __future__ import annotations

import json
import subprocess

import pytest

from xferscope.trace.runner import injection_library

from .offsets_script import offsets_script

PROBE = """
import ctypes, json, sys, threading

def stack(dll, checked):
    lib = dll(sys.argv[1])
    call = lib.xferscope_python_stack
    call.restype = ctypes.c_int
    call.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int]
    buf = ctypes.create_string_buffer(1 << 16)
    n = call(buf, len(buf), checked)  # AT_CALL
    return json.loads(buf.value) if n > 0 else n

class Model:
    def forward(self, dll, checked):
        return stack(dll, checked)  # AT_FORWARD

def outer(dll, checked):
    return Model().forward(dll, checked)  # AT_OUTER

out = {}
for dll in (ctypes.CDLL, ctypes.PyDLL):
    for checked in (1, 0):
        out[dll.__name__ + str(checked)] = outer(dll, checked)  # AT_MODULE
box = {}
worker = threading.Thread(target=lambda: box.update(s=outer(ctypes.CDLL, 0)))  # AT_THREAD
worker.start()
worker.join()
out["thread"] = box["s"]
out["generator"] = next(outer(ctypes.CDLL, 0) for _ in range(1))  # AT_GENERATOR
print(json.dumps(out))
"""


def _line(marker: str) -> int:
    return next(i for i, text in enumerate(PROBE.splitlines(), 1) if f"# {marker}" in text)


def _interpreters() -> list[str]:
    """This Python, and the other CPython minors on PATH or under pyenv (the offsets script's
    discovery, scripts/python-offsets)."""
    return offsets_script().interpreters()  # type: ignore[no-any-return]


@pytest.mark.parametrize("python", _interpreters())
def test_the_stack_is_read_with_and_without_the_gil(tmp_path, python):
    version = subprocess.run(
        [
            python,
            "-c",
            "import sys, sysconfig; "
            "print(sys.version_info[1], bool(sysconfig.get_config_var('Py_GIL_DISABLED')))",
        ],
        capture_output=True,
        text=True,
    )
    if version.returncode != 0:
        pytest.skip(f"{python} does not run")
    minor, free_threaded = version.stdout.split()
    if free_threaded == "True":
        pytest.skip(f"{python} is a free-threaded build, whose stacks the trace does not read")
    if not 10 <= int(minor) <= 14:
        pytest.skip(f"{python} is a CPython minor the trace does not read (3.10 to 3.14)")
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    ran = subprocess.run(
        [python, str(probe), str(injection_library())], capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 0, ran.stderr
    stacks = json.loads(ran.stdout)
    method = "forward" if int(minor) == 10 else "Model.forward"  # co_qualname from 3.11
    head = [
        [str(probe), _line("AT_CALL"), "stack"],
        [str(probe), _line("AT_FORWARD"), method],
        [str(probe), _line("AT_OUTER"), "outer"],
    ]
    for how in ("CDLL1", "CDLL0", "PyDLL1", "PyDLL0"):
        assert stacks[how] == [*head, [str(probe), _line("AT_MODULE"), "<module>"]], how
    assert stacks["thread"][:4] == [*head, [str(probe), _line("AT_THREAD"), "<lambda>"]]
    assert stacks["thread"][4][0].endswith("threading.py")  # the thread's own run()
    assert stacks["generator"][3] == [str(probe), _line("AT_GENERATOR"), "<genexpr>"]
    assert stacks["generator"][4] == [str(probe), _line("AT_GENERATOR"), "<module>"]


def test_a_stack_too_long_for_the_buffer_is_refused_not_overrun():
    import ctypes

    lib = ctypes.CDLL(str(injection_library()))
    call = lib.xferscope_python_stack
    call.restype = ctypes.c_int
    call.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int]
    buf = ctypes.create_string_buffer(b"x" * 15, 16)
    assert call(buf, 8, 0) == -1
    assert buf.raw == b"x" * 15 + b"\0"
