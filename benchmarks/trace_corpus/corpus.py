"""What every Python program of the trace corpus shares: its command line (--steps, --fixed:
the program with its fix, --resident: its data kept on the GPU, where it has such a form) and
the one JSON line benchmarks/trace_corpus.py reads from it:
{"corpus": name, "variant": before|fixed|resident, "seconds": the loop's own time,
 "steps": its steps, "startup_s": from the process's start to the loop's first step, and where
 the loop calls Loop.step(), "steady_s" and "steady_steps": the steps after the first}.
Nothing here touches CUDA itself: the only waits placed at its lines are the framework's
synchronize a program hands to Loop, before its loop's first step and after its last
(Loop.timed) and between the blocks of an alternated run (Blocks), never inside a step."""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import time
from collections.abc import Callable

# The default --steps multiplied by this (trace_overhead.py: a loop long enough that the trace's
# first window, where it records every kernel, is a small part of it: its steady step)
STEPS_TIMES = "TRACE_CORPUS_STEPS_TIMES"
STEPS_TIMES_MOST = 1000
# MODE:BLOCK (detach:50): the loop's steps timed in blocks with the tracing off and on in turn,
# in the one traced process (Blocks; trace_overhead.py's alternated variants)
ALTERNATE = "TRACE_CORPUS_ALTERNATE"
# the injection's switch (xferscope_trace_pause) for a block with the tracing off: CUPTI
# detached (cuptiFinalize), or every record paused with CUPTI attached
OFF_MODES = {"detach": 2, "pause": 1}
SETTLE = 20  # steps untimed after each switch: attaching CUPTI again costs the first ones


def options(steps: int, resident: bool = False, **more: tuple[type, object]) -> argparse.Namespace:
    """The command line, with `steps` steps by default; --resident only where the program has
    that form; `more`: a program's own options, name=(type, default)."""
    parser = argparse.ArgumentParser(
        description=(sys.modules["__main__"].__doc__ or "").split("\n\n")[0]
    )
    times = os.environ.get(STEPS_TIMES, "1")
    if not times.isdigit() or not 1 <= int(times) <= STEPS_TIMES_MOST:
        parser.error(
            f"${STEPS_TIMES}: '{times}' is not a whole number from 1 to {STEPS_TIMES_MOST}"
        )
    parser.add_argument("--steps", type=int, default=steps * int(times))
    parser.add_argument("--fixed", action="store_true", help="run the program with its fix")
    if resident:
        parser.add_argument("--resident", action="store_true", help="keep the data on the GPU")
    for name, (kind, default) in more.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=kind, default=default)
    args = parser.parse_args()
    if args.steps < 1:
        parser.error("--steps must be 1 or more")
    return args


def variant(args: argparse.Namespace) -> str:
    if getattr(args, "resident", False):
        return "resident"
    return "fixed" if args.fixed else "before"


def process_age_s() -> float:
    """Seconds since this process started (Linux: /proc), else since this module was imported."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            started_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        return max(uptime - started_ticks / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError):
        return time.perf_counter() - _IMPORTED


_IMPORTED = time.perf_counter()


def tracing_pause(option: str) -> Callable[[int], int]:
    """The injection's switch (xferscope_trace_pause: 0 traced, 1 paused, 2 CUPTI detached), in
    the library CUDA loaded; `option` names what asked for it in the line said without one."""
    path = os.environ.get("CUDA_INJECTION64_PATH")
    if not path:
        raise SystemExit(f"{option}: run under xferscope trace (CUDA_INJECTION64_PATH unset)")
    try:
        switch: Callable[[int], int] = ctypes.CDLL(path).xferscope_trace_pause
    except (OSError, AttributeError) as exc:
        raise SystemExit(f"{option}: {path} has no pause switch ({exc})") from None
    return switch


class Blocks:
    """A loop's steps in blocks with the tracing off and on in turn (off, on, on, off, ...: each
    as often first), in one traced process: at a block's start the device synchronized
    (`sync`) and the injection's switch set (`off_mode`, or 0), its first `settle` steps
    untimed, then `block` steps timed, the device synchronized at both ends. Processes of a
    host-bound loop differ by 10-20% (recsys_small_copies's untraced runs: 8.35-10.13 s at
    3,000 steps on 1 x H200); blocks of one process tell the tracing's cost apart from that."""

    def __init__(self, switch: Callable[[int], int], sync: Callable[[], object], block: int,
                 off_mode: int, settle: int = SETTLE,
                 clock: Callable[[], float] = time.perf_counter) -> None:  # fmt: skip
        self.switch, self.sync, self.clock = switch, sync, clock
        self.block, self.off_mode, self.settle = block, off_mode, settle
        self.off: list[float] = []  # each timed block's seconds a step, tracing off
        self.on: list[float] = []  # and on
        self.index = self.count = 0
        self.is_off = self.timing = False
        self.began = 0.0

    def begin(self) -> None:
        """Before the loop's first step: its first block begins."""
        self._next()

    def step(self) -> None:
        """After each step of the loop."""
        self.count += 1
        if self.timing and self.count == self.block:
            self.sync()
            (self.off if self.is_off else self.on).append((self.clock() - self.began) / self.block)
            self._next()
        elif not self.timing and self.count == self.settle:
            self._time()

    def end(self) -> None:
        """After the loop's last step: a block cut short is not kept; the tracing back on."""
        self.sync()
        self.switch(0)

    def figures(self) -> dict[str, object]:
        return {"off_step_s": self.off, "on_step_s": self.on, "block": self.block,
                "settle": self.settle}  # fmt: skip

    def _next(self) -> None:
        self.sync()  # nothing in flight while CUPTI is detached or attached again
        self.is_off = self.index % 4 in (0, 3)
        if self.switch(self.off_mode if self.is_off else 0) != 0:
            raise SystemExit(f"${ALTERNATE}: the tracing could not be switched (not tracing)")
        self.index += 1
        self.count, self.timing = 0, False
        if not self.settle:
            self._time()

    def _time(self) -> None:
        self.sync()
        self.began, self.count, self.timing = self.clock(), 0, True


def alternation(sync: Callable[[], object] | None) -> Blocks | None:
    """The Blocks $TRACE_CORPUS_ALTERNATE asks for (MODE:BLOCK), None where it is unset; a
    value that is not one, or a program with no `sync` to give, ends the program with one
    line."""
    spec = os.environ.get(ALTERNATE, "")
    if not spec:
        return None
    mode, _, block = spec.partition(":")
    if mode not in OFF_MODES or not block.isdigit() or not 1 <= int(block) <= 100_000:
        raise SystemExit(f"${ALTERNATE}: '{spec}' is not MODE:BLOCK, MODE one of "
                         f"{', '.join(OFF_MODES)} and BLOCK steps from 1 to 100000")  # fmt: skip
    if sync is None:
        raise SystemExit(f"${ALTERNATE}: this program does not time its steps in blocks")
    return Blocks(tracing_pause(f"${ALTERNATE}"), sync, int(block), OFF_MODES[mode])


class Loop:
    """The loop's clock: `start()` just before its first step (after any warm-up, the GPU
    synchronized), `step()` after each step, `stop()` after its last (the GPU synchronized),
    then `report()`. With `sync` (the framework's device synchronize), the steps can be timed
    in blocks with the tracing off and on ($TRACE_CORPUS_ALTERNATE: Blocks), reported as
    "blocks"; a program that gives none is refused that."""

    def __init__(self, args: argparse.Namespace, sync: Callable[[], object] | None = None) -> None:
        self.args = args
        self.started = self.stopped = 0.0
        self.startup_s = 0.0
        self.sync = sync
        self.blocks = alternation(sync)
        # when step() was first called (the first step done) and how often: the steady steps
        # are those after the first, as a trace's steps start at the first step's mark
        self.first_step = 0.0
        self.steps_seen = 0

    def start(self) -> None:
        self.startup_s = process_age_s()
        self.started = time.perf_counter()
        if self.blocks is not None:
            self.blocks.begin()

    def step(self) -> None:
        self.steps_seen += 1
        if self.steps_seen == 1:
            self.first_step = time.perf_counter()
        if self.blocks is not None:
            self.blocks.step()

    def stop(self) -> None:
        if self.blocks is not None:
            self.blocks.end()
        self.stopped = time.perf_counter()

    def timed(self, step: Callable[[int], object], first: int = 0) -> Loop:
        """The loop timed as a whole: the GPU synchronized (the framework's, given as `sync`),
        start(), `step(i)` for each of --steps steps from `first` (the steps after a warm-up's,
        where the step's index picks its data) with step() after each, the GPU synchronized,
        stop(); report() is left to the caller (with its own figures)."""
        if self.sync is None:
            raise SystemExit("corpus.Loop.timed needs the framework's synchronize (sync=)")
        self.sync()
        self.start()
        for i in range(first, first + self.args.steps):
            step(i)
            self.step()
        self.sync()
        self.stop()
        return self

    def steady(self) -> dict[str, float]:
        """From the first step's end to the last's: the steps after the first (a first batch's
        wait, an epoch's workers started, left out as a trace leaves out its start-up), where
        the loop calls step()."""
        if self.steps_seen < 2:
            return {}
        return {"steady_s": self.stopped - self.first_step, "steady_steps": self.steps_seen - 1}

    def report(self, steps: int | None = None, **extra: object) -> None:
        name = os.path.splitext(os.path.basename(sys.modules["__main__"].__file__ or "?"))[0]
        print(
            json.dumps(
                {
                    "corpus": name,
                    "variant": variant(self.args),
                    "seconds": self.stopped - self.started,
                    "steps": self.args.steps if steps is None else steps,
                    "startup_s": self.startup_s,
                    **self.steady(),
                    **({"blocks": self.blocks.figures()} if self.blocks is not None else {}),
                    **extra,
                }
            ),
            flush=True,
        )
