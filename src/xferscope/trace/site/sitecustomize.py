"""Loaded by every Python process `xferscope trace` runs (its directory leads PYTHONPATH): a
thread that looks where the process's main thread is in Python every XFERSCOPE_TRACE_SAMPLE_S
seconds, so that the trace can say where the host was while the GPU sat idle with no CUDA call
to name (the input pipeline's `for x, y in loader`, or the step's own Python). Standard library
only, and nothing of the program's is touched: it reads `sys._current_frames()`.

Records, one JSON object a line, in XFERSCOPE_TRACE_DIR/pysamples-<pid>.jsonl: first
{"t": "samples", "pid", "period_s"}; a stack the first time it is seen, {"t": "pystack", "id",
"f": [[file, line, function], ...]} innermost first (as the injection library writes them);
then {"t": "sample", "ts": ns, "id"} (CLOCK_REALTIME, the clock of CUPTI's records). At most
MOST_SAMPLES are kept; written every FLUSH_EVERY samples and at exit; anything amiss stops
the looks, never the program. The thread ends when the main thread does (within
MAIN_EVERY_S), before the interpreter finalizes: a daemon thread still sleeping then is ended by
Python 3.12 with pthread_exit, and in a PyTorch program that aborted the process at exit
("terminate called without an active exception", measured on an H100 in 5 of 6 traced runs,
none without the looks). The program's own sitecustomize, where it has one, is loaded after.
Being a thread, it makes Python 3.12's warning that a process forked with threads running (a
DeprecationWarning, shown where the program's own __main__ forks) come sooner."""

from __future__ import annotations

import atexit
import importlib
import json
import os
import sys
import threading
import time
from types import FrameType

MOST_SAMPLES = 1_000_000
FLUSH_EVERY = 100
MOST_FRAMES = 48  # as the injection library's stacks
NAME = "xferscope_trace_looks"  # this module's second name in sys.modules
THREAD = "xferscope-sampler"
MAIN_EVERY_S = 0.05  # how often a long period's sleep looks whether the main thread has ended


class _Sampler:
    def __init__(self, directory: str, period: float) -> None:
        self.path = os.path.join(directory, f"pysamples-{os.getpid()}.jsonl")
        self.period = period
        self.main = threading.main_thread().ident or 0
        self.ids: dict[tuple[tuple[int, int], ...], int] = {}
        self.lines: list[str] = [json.dumps({"t": "samples", "pid": os.getpid(),
                                             "period_s": period})]  # fmt: skip
        self.taken = 0
        self.lock = threading.Lock()
        self.on = True
        self.paused = False  # no looks while set (benchmarks/torch_train_loop.py's untraced blocks)

    def run(self) -> None:
        main = threading.main_thread()
        try:
            while self.on and self.taken < MOST_SAMPLES and self.slept(main):
                if self.paused:
                    continue
                frame = sys._current_frames().get(self.main)
                ts = time.time_ns()
                if frame is None:
                    continue
                self.take(frame, ts)
                if self.taken % FLUSH_EVERY == 0:
                    self.flush()
        except Exception:  # never the program's trouble: the looks stop, what was seen is kept
            self.on = False
        self.flush()

    def slept(self, main: threading.Thread) -> bool:
        """One period asleep; False as soon as the main thread has ended (looked at every
        MAIN_EVERY_S at most), so that the interpreter's shutdown, which waits for this thread,
        is not held up by a long period."""
        left = self.period
        while left > 0:
            time.sleep(min(left, MAIN_EVERY_S))
            left -= MAIN_EVERY_S
            if not main.is_alive():
                return False
        return True

    def take(self, frame: FrameType, ts: int) -> None:
        key: list[tuple[int, int]] = []
        at: FrameType | None = frame
        while at is not None and len(key) < MOST_FRAMES:
            key.append((id(at.f_code), at.f_lineno))
            at = at.f_back
        seen = tuple(key)
        ident = self.ids.get(seen)
        with self.lock:
            if ident is None:
                ident = self.ids[seen] = len(self.ids) + 1
                self.lines.append(json.dumps({"t": "pystack", "id": ident,
                                              "f": _named(frame)}))  # fmt: skip
            self.lines.append(f'{{"t": "sample", "ts": {ts}, "id": {ident}}}')
            self.taken += 1

    def flush(self) -> None:
        with self.lock:
            lines, self.lines = self.lines, []
        if lines:
            try:
                with open(self.path, "a", encoding="utf-8") as out:
                    out.write("\n".join(lines) + "\n")
            except OSError:  # the directory went away: stop looking
                self.on = False

    def forked(self) -> None:
        """In a forked child (a DataLoader's worker): the thread is not there, and what the
        parent had not written yet is the parent's."""
        self.on = False
        self.lines = []


def _named(frame: FrameType) -> list[list[object]]:
    named: list[list[object]] = []
    at: FrameType | None = frame
    while at is not None and len(named) < MOST_FRAMES:
        code = at.f_code
        name = getattr(code, "co_qualname", code.co_name)
        named.append([code.co_filename, at.f_lineno, name])
        at = at.f_back
    return named


def start() -> _Sampler | None:
    """The sampler, started, where the trace asked for one (else None)."""
    directory = os.environ.get("XFERSCOPE_TRACE_DIR")
    try:
        period = float(os.environ.get("XFERSCOPE_TRACE_SAMPLE_S", "0"))
    except ValueError:
        return None
    if not directory or not period > 0 or not os.path.isdir(directory):
        return None
    sampler = _Sampler(directory, period)
    # not a daemon: the interpreter's shutdown waits for it, and it ends with the main thread
    threading.Thread(target=sampler.run, name=THREAD, daemon=False).start()
    atexit.register(sampler.flush)
    os.register_at_fork(after_in_child=sampler.forked)
    return sampler


def _chain() -> None:
    """The program's own sitecustomize, found past this directory, loaded as Python would."""
    here = os.path.dirname(os.path.abspath(__file__))
    mine = sys.modules.pop("sitecustomize", None)
    kept = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        importlib.import_module("sitecustomize")
    except ImportError:
        if mine is not None:
            sys.modules["sitecustomize"] = mine
    finally:
        sys.path[:] = kept


SAMPLER = start()
# findable after the program's own sitecustomize takes the name (torch_train_loop.py pauses it)
sys.modules[NAME] = sys.modules[__name__]
_chain()
