"""What every Python program of the trace corpus shares: its command line (--steps, --fixed:
the program with its fix, --resident: its data kept on the GPU, where it has such a form) and
the one JSON line benchmarks/trace_corpus.py reads from it:
{"corpus": name, "variant": before|fixed|resident, "seconds": the loop's own time,
 "steps": its steps, "startup_s": from the process's start to the loop's first step}.
Nothing here touches CUDA, so no copy or wait is ever placed at a line of this file."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

# The default --steps multiplied by this (trace_overhead.py: a loop long enough that the trace's
# first window, where it records every kernel, is a small part of it: its steady step)
STEPS_TIMES = "TRACE_CORPUS_STEPS_TIMES"
STEPS_TIMES_MOST = 1000


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


class Loop:
    """The loop's clock: `start()` just before its first step (after any warm-up, the GPU
    synchronized), `stop()` after its last (the GPU synchronized), then `report()`."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.started = self.stopped = 0.0
        self.startup_s = 0.0

    def start(self) -> None:
        self.startup_s = process_age_s()
        self.started = time.perf_counter()

    def stop(self) -> None:
        self.stopped = time.perf_counter()

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
                    **extra,
                }
            ),
            flush=True,
        )
