"""Runs a program unchanged under xferscope's CUPTI injection library: the program is started
directly (no shell) with CUDA_INJECTION64_PATH naming the library, which CUDA loads into it (and
into its child processes, which inherit the environment) when it first initializes CUDA. The
program runs in a session of its own, so a Ctrl-C at the terminal reaches xferscope alone, which
forwards it, and SIGTERM, to the program's process group once (its workers and ranks too, as the
terminal would untraced); the library lets it flush its records first. The
program's exit status, or the signal that ended it, comes back as it was, with the first signal
forwarded (the command ends as a stop ends it: 130 after Ctrl-C)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core import libraries
from ..core.compiled import engine_module
from ..core.errors import OptionError, XferscopeError

LIBRARY = "libxferscope_inject.so"
# The injection library's looks at where a Python process's main thread is, every SAMPLE_S
# (engine/src/trace/looks.cpp: read from a thread of the library, without the GIL), so that GPU
# idle with no CUDA call to name is named by the program's line
SAMPLE_S = 0.01
DEFAULT_LIMIT = 1_000_000  # records of each kind written; beyond, counted
# Kernel records: CUPTI times each kernel by instrumenting it, which costs every launch (5-8%
# of a PyTorch training step of 25 kernels, measured on an H100; 12-15% of a host-bound trainer
# of 400 kernels a micro-step on an H200), so by default every kernel is recorded from the
# first copy for FIRST milliseconds or until COUNT kernels were recorded, whichever comes first
# (a short program's first steps, which windows alone misjudged: a loop of 0.8 s had no wait
# inside one and its waits were priced at a tenth of what fixing them saved), then in windows
# of ON milliseconds, at most one every PERIOD, each opened by a copy (so they fall where the
# program copies). FIRST is 30 s: it runs from the first copy, which is often the model's upload
# before seconds of start-up (5 s ended before a short PyTorch loop began, on an H100). COUNT
# is 20,000: the trace corpus's kept records judged with the kernels past it dropped kept every
# headline and step line on both hosts, where 10,000 lost loader_per_epoch's prediction (error
# 0.03 -> 0.40) (docs/trace.md). Copies are always all recorded.
KERNEL_WINDOW_MS = (200, 2000, 30_000)
FIRST_KERNELS = 20_000
KERNELS_DEFAULT = "sampled"


def kernels_setting(value: str) -> str:
    """The injection's XFERSCOPE_TRACE_KERNELS for `--kernels VALUE`: all, none, sampled (the
    default windows) or ON/PERIOD[/FIRST[/COUNT]]: milliseconds, and COUNT kernels."""
    if value in ("all", "none"):
        return value
    if value == "sampled":
        return "{}/{}/{}/{}".format(*KERNEL_WINDOW_MS, FIRST_KERNELS)
    window = re.fullmatch(r"([0-9]{1,7})/([0-9]{1,7})(?:/([0-9]{1,8})(?:/([0-9]{1,9}))?)?", value)
    counted = window is None or window[4] is None or int(window[3]) > 0  # a count ends a FIRST
    if window and 0 < int(window[1]) < int(window[2]) <= 3_600_000 and counted:
        first = "" if window[3] is None else f"/{int(window[3])}"
        count = "" if window[4] is None else f"/{int(window[4])}"
        return f"{int(window[1])}/{int(window[2])}{first}{count}"
    raise OptionError(
        "--kernels",
        f"'{value}' is not all, none, sampled, or ON/PERIOD[/FIRST[/COUNT]]: milliseconds "
        "(0 < ON < PERIOD) and the most kernels of the first window (COUNT needs FIRST above "
        "0), such as 100/1000, 100/1000/5000 or 100/1000/5000/20000",
    )


class TraceError(XferscopeError):
    """The program could not be traced; the message says why."""


def injection_library() -> Path:
    """The injection library built beside the engine module."""
    here = Path(engine_module().__file__).parent
    path = here / LIBRARY
    if not path.exists():
        raise TraceError(
            f"the CUPTI injection library {LIBRARY} is not beside {here}; reinstall xferscope"
        )
    return path


@dataclass(frozen=True, slots=True)
class Ran:
    """How the program ended, and where its records are."""

    command: tuple[str, ...]
    returncode: int  # as subprocess reports it: negative for a signal
    wall_s: float
    files: tuple[Path, ...]
    stop_signal: int  # the first Ctrl-C or SIGTERM forwarded to it (0: none)
    samples: tuple[Path, ...] = ()  # where each Python process's main thread was, sampled
    started_ns: int = 0  # when the program was started (CLOCK_REALTIME, the records' clock)
    stopped_at: float | None = None  # when stop_signal came (time.monotonic(); None: none)

    @property
    def interrupted(self) -> bool:
        return self.stop_signal != 0

    @property
    def signal(self) -> str | None:
        if self.returncode >= 0:
            return None
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"

    @property
    def exit_status(self) -> int:
        """The status xferscope exits with: the program's, or 128 + its signal, as a shell
        reports it."""
        return self.returncode if self.returncode >= 0 else 128 - self.returncode


def resolve(command: Sequence[str]) -> list[str]:
    """The command with its program found on PATH; a missing one is a one-line error."""
    if not command:
        raise OptionError("COMMAND", "give the program to trace after --, such as: -- ./app")
    program = command[0]
    found = program if os.sep in program else shutil.which(program)
    if not found or not os.path.exists(found):
        raise OptionError("COMMAND", f"'{program}' was not found (not a file, nor on PATH)")
    if not os.access(found, os.X_OK) or os.path.isdir(found):
        raise OptionError("COMMAND", f"'{program}' is not an executable file")
    return [found, *command[1:]]


def traced_env(
    directory: Path,
    limit: int = DEFAULT_LIMIT,
    kernels: str = KERNELS_DEFAULT,
    look_every: float = SAMPLE_S,
) -> dict[str, str]:
    """The environment that makes a process that starts CUDA record itself into `directory`
    (run_traced's arguments): the injection library CUDA loads at its start, and its knobs."""
    setting = kernels_setting(kernels)
    library = injection_library()
    cupti = libraries.find("cupti", TraceError)
    return {
        "CUDA_INJECTION64_PATH": str(library),
        "XFERSCOPE_LIBCUPTI": cupti,
        # NVTX ranges the program pushes go to CUPTI, which records them (a program's own
        # NVTX tool, where it names one, is left in place)
        "NVTX_INJECTION64_PATH": os.environ.get("NVTX_INJECTION64_PATH") or cupti,
        "XFERSCOPE_TRACE_DIR": str(directory),
        "XFERSCOPE_TRACE_LIMIT": str(limit),
        "XFERSCOPE_TRACE_KERNELS": setting,
        # each traced Python process's main thread looked at (looks.cpp)
        "XFERSCOPE_TRACE_SAMPLE_S": str(look_every),
    }


def records_of(directory: Path) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    """A run's records (one file a traced process) and its looks (one a Python process), as
    the injection library names them."""
    return (tuple(sorted(directory.glob("trace-*.jsonl"))),
            tuple(sorted(directory.glob("pysamples-*.jsonl"))))  # fmt: skip


def run_traced(
    command: Sequence[str],
    directory: Path,
    limit: int = DEFAULT_LIMIT,
    kernels: str = KERNELS_DEFAULT,
    look_every: float = SAMPLE_S,
    on_stop: Callable[[Path, int], None] | None = None,
) -> Ran:
    """Runs `command` with the library injected, its records going to `directory`, its kernels
    recorded as `kernels` says (kernels_setting), each Python process's main thread looked at
    every `look_every` seconds (0: never). Its own output goes where ours goes, untouched.
    `on_stop(directory, started_ns)` is called once, from the signal handler, when the first
    stop is forwarded to the running program (early.EarlyAnalysis.start)."""
    argv = resolve(command)
    env = dict(os.environ) | traced_env(directory, limit, kernels, look_every)
    forwarded: list[tuple[int, float]] = []  # each signal and when it came
    early: list[int] = []  # signals that came before the program was there to take them
    children: list[subprocess.Popen[bytes]] = []  # the program, once started
    told: list[bool] = []  # on_stop called

    def send(signum: int) -> None:
        # to its process group, as the terminal would send it untraced: a DataLoader's workers
        # and torchrun's ranks are stopped by the program's own way, not by a lone parent
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(children[0].pid, signum)

    def forward(signum: int, _frame: object) -> None:
        forwarded.append((signum, time.monotonic()))
        if children:
            send(signum)
            stopped()
        else:
            early.append(signum)

    def stopped() -> None:  # the program was sent its stop: on_stop, once
        if on_stop is not None and not told:
            told.append(True)
            on_stop(directory, started_ns)

    # set before the program starts: a Ctrl-C while it starts goes to it as soon as it runs
    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    start = time.perf_counter()
    started_ns = time.time_ns()
    try:
        try:
            # a session of its own: the terminal's Ctrl-C reaches us alone, and goes on once
            children.append(subprocess.Popen(argv, env=env, start_new_session=True))
        except OSError as exc:
            raise OptionError("COMMAND", f"cannot start '{command[0]}': {exc.strerror}") from None
        for signum in early:  # arrived while it started
            send(signum)
            stopped()
        while True:
            try:
                returncode = children[0].wait()
                break
            except InterruptedError:
                continue
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    wall = time.perf_counter() - start
    files, samples = records_of(directory)
    stop, stopped_at = forwarded[0] if forwarded else (0, None)
    return Ran(tuple(argv), returncode, wall, files, stop, samples, started_ns, stopped_at)
