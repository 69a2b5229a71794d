"""Untraced runs of the trace corpus's Python programs that import PyTorch, forked from a process
that has imported it once (the others run afresh: forkable). On the device machines importing
torch takes 8-12 s a process, several times a program's loop; a program's own clock
(corpus.Loop) starts after its warm-up, so how its modules came to be imported does not change
what it measures (on 2 x H200, forked and fresh runs of three host-bound programs, alternated,
spread alike: docs/trace.md). Traced runs never come from here: `xferscope trace` runs the
program as a user does.

    with Zygote() as z:
        rc, stdout, stderr = z.run([sys.executable, "prog.py", "--fixed"], env, timeout_s)

The server (`python3 corpus_zygote.py`) reads one JSON request a line on stdin, forks, runs the
script as __main__ in the child with the request's argv and environment (CUDA is never
initialized before the fork), and answers one JSON line: the child's exit status."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import gc
import json
import os
import re
import runpy
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from types import TracebackType

PRELOAD = ("numpy", "torch", "torch.nn.functional", "torch.utils.data", "torchvision")


# a script that imports PyTorch, at a line's start (indented too: an import in a function)
IMPORTS_TORCH = re.compile(r"^\s*(import torch\b|from torch[ .])", re.MULTILINE)


def forkable(argv: list[str]) -> bool:
    """A plain Python script, which the server can run (not torchrun, not a binary), that
    imports PyTorch: one that does not gains nothing from the fork and would run beside
    libraries it never loads itself (JAX and CuPy would find PyTorch's CUDA libraries loaded
    under the names of their own), so it runs as a fresh process, as its traced runs do."""
    if not (len(argv) >= 2 and argv[0] == sys.executable and argv[1].endswith(".py")):
        return False
    try:
        return IMPORTS_TORCH.search(Path(argv[1]).read_text(errors="replace")) is not None
    except OSError:
        return False


class Zygote:
    """One server: one run at a time (a stream of trace_corpus.py holds its own)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.files = Path(tempfile.mkdtemp(prefix="xfs-zygote-"))

    def __enter__(self) -> Zygote:
        self.proc = subprocess.Popen(
            [sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the corpus zygote did not start")
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()

    def run(self, argv: list[str], env: dict[str, str], timeout_s: float) -> tuple[int, str, str]:
        assert self.proc is not None and self.proc.stdin is not None
        assert self.proc.stdout is not None
        out, err = self.files / "stdout", self.files / "stderr"
        request = {"argv": argv[1:], "env": env, "stdout": str(out), "stderr": str(err),
                   "timeout_s": timeout_s}  # fmt: skip
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if not answer:
            raise RuntimeError("the corpus zygote stopped")
        rc = int(json.loads(answer)["rc"])
        if rc == -signal.SIGKILL:
            raise subprocess.TimeoutExpired(argv, timeout_s)
        return rc, out.read_text(errors="replace"), err.read_text(errors="replace")


def child(request: dict) -> None:
    """In the forked child: the script as __main__, its output to the request's files."""
    os.environ.clear()
    os.environ.update(request["env"])
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    script = request["argv"][0]
    sys.argv = list(request["argv"])
    sys.path[0] = str(Path(script).resolve().parent)
    code = 0
    # the script's globals live through its exit functions and are freed after them, as a
    # script's own are. Freed before them, a DataLoader's iterator shuts its workers down itself,
    # joining each for up to 5 s, which at a script's own end PyTorch leaves to multiprocessing's
    # exit function: the runs with 4 persistent workers ended 20 s after their loop here
    # (2 x H200), traced ones not. An ending exception keeps them too: its traceback holds the
    # script's frames.
    kept: list[object] = []
    try:
        kept.append(runpy.run_path(script, run_name="__main__"))
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        kept.append(stop)
    except BaseException as failed:
        traceback.print_exc()
        code = 1
        kept.append(failed)
    sys.stdout.flush()
    sys.stderr.flush()
    # the end a script's process has: Python's exit functions, then its objects freed (a file
    # left open is closed), then the C library's exit functions (where a traced child's
    # injection library flushes its records), never the server's own loop
    atexit._run_exitfuncs()
    kept.clear()
    gc.collect()
    sys.stdout.flush()
    sys.stderr.flush()
    ctypes.CDLL(None).exit(code)


def serve() -> None:
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            __import__(name)
    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            child(request)
        deadline = time.monotonic() + float(request["timeout_s"])
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)
        print(json.dumps({"rc": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    try:
        serve()
    except KeyboardInterrupt:  # the terminal's Ctrl-C reaches the whole group: no traceback
        sys.exit(130)
