"""trace_bench.py's parts for issue 68, what tracing costs programs it was not built around:
Part `corpus`: every program of benchmarks/trace_corpus/ this host can run (or those named in
$TRACE_CORPUS_PROGRAMS, comma-separated), its loop's own seconds untraced, traced as `trace`
does by default, with `--look-every 0` and with `--kernels none` (and where
$TRACE_CORPUS_VARIANTS names them, with `--kernels all`, no NVTX tool or a knob: CHOSEN; each
program as it is, or with its fix where $TRACE_CORPUS_FORM=fixed: FORMS),
alternated, `runs` rounds (3 or more), each round's order starting one later (order()). A
Python program of one process that imports PyTorch is forked from a process that imported it
once (corpus_zygote.py), traced with the environment `trace` gives it (runner.traced_env) and its
records thrown away: an import takes 8-12 s there and an analysis several more, neither of
them in the loop's clock; torchrun and CUDA C++ programs run under `xferscope trace` itself:
  trace_corpus_overhead_worst   the worst program's untraced / traced speed (goal >= 0.95)
  trace_corpus_overhead_looks   the same ratio's worst with the looks off: what they cost
  trace_corpus_overhead_no_kernels, trace_corpus_overhead_all_kernels
                                the same with no kernel recorded, and every one: what the
                                default's kernel recording costs
  trace_corpus_overhead_no_nvtx the same with no NVTX tool (one that cannot load named): what
                                naming one costs a framework that annotates for a tool
  trace_corpus_overhead_cupti_floor, _memcpy_records_only, _no_hash, _no_python_stacks, ...
                                the same with the injection's knobs (trace_runs.VARIANTS):
                                CUPTI's records alone (every kernel, or none), no content hash,
                                no callers read: what each part of the tracing costs;
                                copies_floor, subscribed_floor, attached_floor, loaded_floor
                                the floors beneath it (VARIANTS says what each keeps);
                                no_set_calls, no callback on memset calls; lean_calls,
                                and no record of device-to-device copy calls
  trace_corpus_overhead_alternated, _alternated_copies_floor
                                the same within each traced process: its steps timed in
                                blocks of 50 with CUPTI detached and attached in turn
                                (corpus.Blocks), each run's ratio of its blocks' medians, the
                                median over runs (the whole runs' ratio kept as _runs); only
                                the programs that time blocks (times_blocks)
  trace_corpus_overhead_programs
                                the programs these worst figures are of: those whose rounds
                                all ran (on Ctrl-C the figures are of the programs done, the
                                one cut short kept apart, marked interrupted)
  trace_corpus_overhead_surely_below
                                the programs whose traced ratio's 95% interval lies wholly
                                under the goal: the worst of a dozen noisy medians is low by
                                chance alone, these are not
  trace_looks_python_threads    Python threads a traced PyTorch program has beyond its own
                                untraced (goal 0)
Each program's entry holds its rounds' seconds, each variant's ratio and its 95% interval
(interval_<variant>: ratio_interval, the rounds resampled).
Part `sigint`: tests/trace_programs/loader_loop.py (a DataLoader with 4 workers) traced, Ctrl-C
(SIGINT to xferscope, which forwards it) at a random moment, 20 times, SIGINT_AT_ONCE at a time:
  trace_sigint_workers_clean    runs that exited 130 within 2 s with a readable trace (or,
                                stopped before CUDA started, none) (goal 20)
  trace_sigint_untraced_exit_s  the program's own exit after the terminal's Ctrl-C, untraced
                                (SIGINT to its process group; 3 runs, median): the floor
  trace_sigint_added_s          the traced runs' median exit time less that floor
  trace_sigint_program_exit_s, trace_sigint_after_program_s
                                of a traced run's exit (medians), the program's own (its
                                start and wall time) and xferscope's after it
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corpus_zygote import Zygote, forkable
from spread import interval, median_interval
from trace_corpus import CORPUS, RUN_TIMEOUT_S, base_command, missing, own_line, programs, untraced
from trace_corpus_judge import Program
from trace_idle import PROGRAMS
from trace_runs import VARIANTS as PARTS

sys.path.insert(0, str(CORPUS))
from corpus import ALTERNATE, STEPS_TIMES  # the corpus programs' own module

# blocks of 50 steps, each after 20 untimed (corpus.SETTLE), as the PyTorch loop's are timed
ALTERNATED = "detach:50"

THREADS = (
    "import threading, torch; torch.zeros(1, device='cuda').sum().item(); "
    "print('{\"threads\": %d}' % threading.active_count())"
)


# An NVTX tool that cannot load: the program runs with none (runner.traced_env keeps a tool
# the environment names, and NVTX gives up quietly on one it cannot open)
NO_NVTX_TOOL = {"NVTX_INJECTION64_PATH": "/nonexistent/no-nvtx-tool.so"}


def traced_run(
    argv: list[str],
    *more: str,
    env: dict[str, str] | None = None,
    read: Callable[[str], Any] = own_line,
) -> Any:
    """What `read` finds in the program's output (its own JSON line) when `xferscope trace`
    runs it (priced by nothing), with `env` added to its environment."""
    out = Path(tempfile.mkdtemp(prefix="xfs-overhead-"))
    proc = subprocess.run(
        [sys.executable, "-m", "xferscope", "trace", "--reference", "none", "--no-history",
         *more, "-o", str(out), "--", *argv], capture_output=True, text=True, timeout=300,
        env=dict(os.environ) | (env or {}),
    )  # fmt: skip
    shutil.rmtree(out, ignore_errors=True)
    if proc.returncode != 0:
        raise RuntimeError(f"trace of {argv} failed: {proc.stderr[-2000:]}")
    return read(proc.stdout)


def _forked(zygote: Zygote, argv: list[str], variant: Variant) -> dict:
    """The program's own line, forked from the zygote with the environment `trace` gives it
    (runner.traced_env): the same library, knobs and looks, without importing PyTorch anew
    and with no analysis after it; the records thrown away."""
    from xferscope.trace.runner import traced_env

    out = Path(tempfile.mkdtemp(prefix="xfs-overhead-"))
    env = dict(os.environ) | traced_env(out, kernels=variant.kernels,
                                        look_every=variant.look_every) | variant.env()  # fmt: skip
    rc, stdout, stderr = zygote.run(argv, env, RUN_TIMEOUT_S)
    shutil.rmtree(out, ignore_errors=True)
    if rc != 0:
        raise RuntimeError(f"traced {argv} failed ({rc}): {stderr[-2000:]}")
    return own_line(stdout)


@dataclass(frozen=True)
class Variant:
    """How a round traces the program: --kernels, --look-every, whether an NVTX tool is named
    (without one, a framework that builds its ranges only for a tool, as XLA does, builds
    none), and the injection's knobs (XFERSCOPE_TRACE_KNOBS, inject.hpp: what each part of
    the tracing costs)."""

    kernels: str = "sampled"
    look_every: float = 0.01
    nvtx: bool = True
    knobs: str = ""
    # MODE:BLOCK: the program times its steps in blocks with the tracing off and on in turn
    # (corpus.Blocks), and the variant's ratio is of those blocks, within each traced process
    alternate: str = ""

    def env(self) -> dict[str, str]:
        """What this variant adds to the environment `trace` gives the program."""
        return ({} if self.nvtx else NO_NVTX_TOOL) | (
            {"XFERSCOPE_TRACE_KNOBS": self.knobs} if self.knobs else {}) | (
            {ALTERNATE: self.alternate} if self.alternate else {})  # fmt: skip


# The variants timed each round: untraced, then traced with these
VARIANTS = {
    "traced": Variant(),
    "no_looks": Variant(look_every=0.0),
    "no_kernels": Variant(kernels="none"),
    "all_kernels": Variant(kernels="all"),
    "no_nvtx": Variant(nvtx=False),
    # what each part of the tracing costs, as the PyTorch loop's parts measure it (trace_runs):
    # CUPTI's records alone (with no callback no copy call opens a kernel window, so these
    # name their kernels), no Python stacks, native callers or content hash
    **{name: Variant(kernels=kernels, knobs=knobs)
       for name, (knobs, kernels) in PARTS.items() if knobs},
    # CUPTI's copy and memset records alone, no looks either: the floor under any tracer that
    # records every copy (Nsight Systems' CUDA trace records them as CUPTI does)
    "copies_floor": Variant(kernels="none", look_every=0.0, knobs="nosubscribe"),
    # the same with CUPTI's callbacks on the calls worth a record, which record nothing: what
    # the callbacks cost before any work of ours
    "subscribed_floor": Variant(kernels="none", look_every=0.0, knobs="nocall,noapi"),
    # CUPTI attached, its activity buffers registered, no kind of record enabled; and the
    # injection library loaded by CUDA, CUPTI never attached: under the copies' floor
    "attached_floor": Variant(kernels="none", look_every=0.0, knobs="nosubscribe,noactivity"),
    "loaded_floor": Variant(kernels="none", look_every=0.0, knobs="idle"),
    # traced by default but with a callback on each memset call too (the default until
    # 2026-11-29; their GPU records are kept either way): what recording each set's call
    # costs a loop that makes a thousand a step (lstm_packed_lengths)
    "set_calls": Variant(knobs="keepsetcalls"),
    # and no record of the device-to-device copy calls (their GPU records kept)
    "lean_calls": Variant(knobs="nod2dcalls"),
    # traced by default, and CUPTI's copy records alone, each against blocks of the same
    # process with CUPTI detached: the ratio without the 10-20% processes differ by (where
    # the program times blocks: corpus.Loop's sync; the others have none)
    "alternated": Variant(alternate=ALTERNATED),
    "alternated_copies_floor": Variant(kernels="none", look_every=0.0, knobs="nosubscribe",
                                       alternate=ALTERNATED),
}  # fmt: skip


# Timed unless $TRACE_CORPUS_VARIANTS names others (comma-separated): `all_kernels` was the
# default on a program shorter than its first window before the window closed at a count, and
# `no_nvtx` matters where a framework annotates for a tool (JAX)
CHOSEN = ("traced", "no_looks", "no_kernels")
GOAL = 0.95  # trace_corpus_overhead_worst's
FIGURES = {"traced": "trace_corpus_overhead_worst", "no_looks": "trace_corpus_overhead_looks"}


# $TRACE_CORPUS_FORM: which form of each program is timed: as it is (before), or with its fix
# (fixed: a loop that no longer waits, where the trace's records of every kernel can cost more)
FORMS = {"before": [], "fixed": ["--fixed"]}


def chosen_form() -> str:
    """The form $TRACE_CORPUS_FORM names (before where unset); one that is not is one line."""
    form = os.environ.get("TRACE_CORPUS_FORM", "") or "before"
    if form not in FORMS:
        raise SystemExit(f"TRACE_CORPUS_FORM: {form} is not one of {', '.join(FORMS)}")
    return form


def chosen_variants() -> dict[str, Variant]:
    """The variants $TRACE_CORPUS_VARIANTS names, else CHOSEN: a name of VARIANTS, or
    `kernels=SETTING`, traced by default but for `--kernels SETTING` (a window setting to
    choose the default by); anything else is one line naming what is accepted."""
    from xferscope.core.errors import OptionError
    from xferscope.trace.runner import kernels_setting

    def variant(name: str) -> Variant:
        if name in VARIANTS:
            return VARIANTS[name]
        with contextlib.suppress(OptionError):
            if name.startswith("kernels="):
                return Variant(kernels=kernels_setting(name.removeprefix("kernels=")))
        raise SystemExit(f"TRACE_CORPUS_VARIANTS: {name} not one of {', '.join(VARIANTS)} "
                         "or kernels=ON/PERIOD[/FIRST[/COUNT]]")  # fmt: skip

    named = [v for v in os.environ.get("TRACE_CORPUS_VARIANTS", "").split(",") if v] or CHOSEN
    return {name: variant(name) for name in named}


def ratio_interval(untraced: list[float], traced: list[float]) -> list[float]:
    """A 95% interval of median(untraced) / median(traced), the rounds resampled
    (spread.interval): how far the ratio of a few noisy rounds can be trusted
    (recsys_small_copies's untraced runs spread 0.70-0.98 s over 5 rounds)."""
    return interval(untraced, traced, lambda u, t: u / t)


def order(names: list[str], round_index: int) -> list[str]:
    """Round `round_index`'s order of the runs `names`: each round starts one later, so no
    variant always takes the first run, which is slower on some programs (a tokenizing loop's
    first run on 2 x H200: 3.66 s, the next four 2.35-2.88)."""
    shift = round_index % len(names)
    return names[shift:] + names[:shift]


def blocks_ratio(line: dict[str, Any]) -> float | None:
    """A run's untraced / traced speed from its blocks (corpus.Blocks): the median step with
    the tracing off over the median with it on; None without a block of each."""
    blocks = line.get("blocks") or {}
    off, on = blocks.get("off_step_s") or [], blocks.get("on_step_s") or []
    return statistics.median(off) / statistics.median(on) if off and on else None


def _round(base: list[str], zygote: Zygote, seconds: dict[str, list[float]],
           variants: dict[str, Variant], round_index: int) -> None:  # fmt: skip
    """One round of a program's variants and its untraced run, in order(): forked from the
    zygote where it is a Python script of one process, else run as a user runs it (torchrun,
    a CUDA C++ binary). An alternated variant's run adds its blocks' ratio to
    seconds["blocks_<variant>"]."""
    for name in order(["untraced", *variants], round_index):
        if name == "untraced":
            line = untraced(base, None, zygote)
        elif forkable(base):
            line = _forked(zygote, base, variants[name])
        else:
            variant = variants[name]
            line = traced_run(base, "--kernels", variant.kernels, "--look-every",
                           str(variant.look_every), env=variant.env())  # fmt: skip
        seconds[name].append(line["seconds"])
        if (ratio := blocks_ratio(line)) is not None:
            seconds.setdefault(f"blocks_{name}", []).append(ratio)


def _named_programs() -> list[Program]:
    """The corpus programs $TRACE_CORPUS_PROGRAMS names (all where unset); an unknown name is
    said in one line when this module is imported, so before trace_bench.py runs any part."""
    try:
        return programs(os.environ.get("TRACE_CORPUS_PROGRAMS", ""))
    except ValueError as exc:
        sys.exit(str(exc).replace("--programs", "$TRACE_CORPUS_PROGRAMS", 1))


NAMED_PROGRAMS = _named_programs()
chosen_form()  # a bad $TRACE_CORPUS_FORM is said before trace_bench.py runs any part


def entry(seconds: dict[str, list[float]]) -> dict[str, Any]:
    """A program's entry from its runs' seconds (untraced and each variant's): each variant's
    ratio of medians and its interval, where it has runs; an alternated variant's ratio is its
    runs' blocks' (blocks_<variant>: each run's, the median of them and its interval), and
    its ratio of whole runs is ratio_<variant>_runs."""
    own = statistics.median(seconds["untraced"])
    timed = [v for v in seconds if v != "untraced" and not v.startswith("blocks_") and seconds[v]]
    out = seconds | {f"ratio_{v}": own / statistics.median(seconds[v]) for v in timed} | {
        f"interval_{v}": ratio_interval(seconds["untraced"], seconds[v]) for v in timed
    } | {"steps_times": int(os.environ.get(STEPS_TIMES, "1"))}  # fmt: skip
    for v in timed:
        if ratios := seconds.get(f"blocks_{v}"):
            out[f"ratio_{v}_runs"] = out[f"ratio_{v}"]
            out[f"ratio_{v}"] = statistics.median(ratios)
            out[f"interval_{v}"] = median_interval(ratios)
    return out


def worst(found: dict[str, dict[str, Any]], variants: dict[str, Variant], figures: dict) -> None:
    """The worst program's untraced / traced speed in each variant, of the programs whose
    rounds all ran (one cut short by Ctrl-C has fewer: its entry is kept, not counted here),
    and how many programs that is (trace_corpus_overhead_programs)."""
    whole = {p: e for p, e in found.items() if not e.get("interrupted")}
    for v in variants:
        ratios = [e[f"ratio_{v}"] for e in whole.values() if f"ratio_{v}" in e]
        if ratios:
            figures[FIGURES.get(v, f"trace_corpus_overhead_{v}")] = min(ratios)
    figures["trace_corpus_overhead_programs"] = sum(
        1 for e in whole.values() if any(k.startswith("ratio_") for k in e)
    )
    if "traced" in variants:  # the worst of many noisy medians is low by chance alone
        figures["trace_corpus_overhead_surely_below"] = sorted(
            p for p, e in whole.items() if e.get("interval_traced", [0, 1])[1] < GOAL
        )


def times_blocks(program: Program) -> bool:
    """Whether a corpus program times its steps in blocks when asked (corpus.Loop's step(),
    or its timed(), with its framework's synchronize): the alternated variants run only those."""
    text = program.path.read_text()
    return "loop.step()" in text or ").timed(" in text


def corpus_part(_program: str, _engine: object, runs: int, comparisons: list, figures: dict):
    import torch

    variants, form = chosen_variants(), chosen_form()
    build = Path(tempfile.mkdtemp(prefix="xfs-overhead-build-"))
    found = figures.setdefault("corpus_overhead", {})
    gpus = torch.cuda.device_count()
    with Zygote() as zygote:
        for p in NAMED_PROGRAMS:
            if missing(p, gpus):
                continue
            base = [*base_command(p, build), *FORMS[form]]
            mine = {k: v for k, v in variants.items() if times_blocks(p) or not v.alternate}
            seconds: dict[str, list[float]] = {"untraced": [], **{v: [] for v in mine}}
            try:
                for index in range(max(runs, 3)):
                    _round(base, zygote, seconds, mine, index)
            except (RuntimeError, ValueError, subprocess.SubprocessError) as exc:
                found[p.name] = {"error": str(exc)[-2000:]}
                continue
            except KeyboardInterrupt:  # the runs measured so far are kept, marked as cut short
                if seconds["untraced"]:
                    found[p.name] = entry(seconds) | {"form": form, "interrupted": True}
                worst(found, variants, figures)
                raise
            found[p.name] = entry(seconds) | {"form": form}
            ratios = {k: round(v, 3) for k, v in found[p.name].items() if k.startswith("ratio")}
            print(p.name, ratios, flush=True)
    worst(found, variants, figures)
    untraced = subprocess.run([sys.executable, "-c", THREADS], capture_output=True, text=True)
    mine = _threads_line(untraced.stdout)
    try:
        traced = traced_run([sys.executable, "-c", THREADS], read=_threads_line)
    except (RuntimeError, ValueError, subprocess.SubprocessError) as exc:
        # the figures measured above are kept either way
        figures["trace_looks_python_threads_error"] = (str(exc).strip().splitlines() or ["?"])[-1]
        return
    figures["trace_looks_python_threads"] = traced - mine


def _threads_line(stdout: str) -> int:
    """The thread count THREADS printed."""
    said = [x for x in stdout.splitlines() if x.startswith('{"threads')]
    if not said:
        raise ValueError("no threads line in the program's output")
    return int(json.loads(said[0])["threads"])


def _interrupted(attempt: int, delay_s: float, loop: list[str]) -> dict:
    """One traced run of `loop` sent SIGINT `delay_s` after it started: its exit status, how
    long it took to exit after the signal, whether a readable trace was written, or whether
    it was stopped before CUDA started (no trace to write); with a trace, how long after the
    signal the program ended: its first process's start (`began_ns`, the realtime clock) and
    the run's wall time (`wall_s`, from the program's launch to its exit: the trace's "end"
    lines are written at the signal, before the program's own way out). The rest of the time
    is xferscope's, reading, analyzing and writing the trace."""
    out = Path(tempfile.mkdtemp(prefix="xfs-sigint-"))
    said = out / "stderr.txt"  # a file: a pipe nobody reads until the end could fill and stall
    with said.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "xferscope", "trace", "--reference", "none", "--no-history",
             "-o", str(out), "--", *loop], stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    time.sleep(delay_s)
    proc.send_signal(signal.SIGINT)
    sent, sent_ns = time.monotonic(), time.time_ns()
    try:
        code = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    took = time.monotonic() - sent
    summaries = list(out.glob("trace-*/trace-summary.json"))
    ended_s = None  # the program's end after the signal
    try:
        doc = json.loads(summaries[0].read_text()) if summaries else {}
        readable = "schema" in doc
        began = [int(p["began_ns"]) for p in doc.get("processes", []) if p.get("began_ns")]
        if began and doc.get("wall_s"):
            ended_s = (min(began) + float(doc["wall_s"]) * 1e9 - sent_ns) * 1e-9
    except ValueError:  # written in part: not readable
        readable = False
    told = said.read_text(errors="replace")
    before_cuda = "no CUDA activity" in told
    shutil.rmtree(out, ignore_errors=True)
    print(f"sigint {attempt}: exit {code} in {took:.2f} s, trace {readable}", flush=True)
    # what it said last: why a run that did not end as Python ends on Ctrl-C ended as it did
    return {"exit": code, "seconds": took, "readable": readable, "before_cuda": before_cuda,
            "program_ended_s": ended_s, "said": told[-1500:]}  # fmt: skip


SIGINT_AT_ONCE = 3  # traced programs interrupted side by side (each with 4 workers)


def _untraced_stop(delay_s: float, loop: list[str]) -> dict:
    """`loop` run as a user runs it, the terminal's Ctrl-C (SIGINT to its process group)
    `delay_s` after it started: its own exit status and how long it took to exit, the floor
    under a traced run's."""
    proc = subprocess.Popen(loop, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # fmt: skip
    time.sleep(delay_s)
    os.killpg(proc.pid, signal.SIGINT)
    sent = time.monotonic()
    try:
        code = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        code = proc.wait()
    return {"exit": code, "seconds": time.monotonic() - sent}


def sigint_part(_program: str, _engine: object, runs: int, comparisons: list, figures: dict):
    rng = random.Random(0)
    loop = [sys.executable, str(PROGRAMS / "loader_loop.py"), "--steps", "400"]
    delays = [rng.uniform(8.0, 18.0) for _ in range(20)]  # after CUDA's start, in the steps
    with concurrent.futures.ThreadPoolExecutor(SIGINT_AT_ONCE) as pool:
        each = list(pool.map(lambda a: _interrupted(a, delays[a], loop), range(len(delays))))
    figures["sigint_runs"] = each
    with concurrent.futures.ThreadPoolExecutor(SIGINT_AT_ONCE) as pool:
        own = list(pool.map(lambda a: _untraced_stop(delays[a], loop), range(SIGINT_AT_ONCE)))
    figures["sigint_untraced_runs"] = own
    # what the program itself takes to exit after Ctrl-C, and what tracing adds to it
    figures["trace_sigint_untraced_exit_s"] = statistics.median(e["seconds"] for e in own)
    figures["trace_sigint_added_s"] = (statistics.median(e["seconds"] for e in each)
                                       - figures["trace_sigint_untraced_exit_s"])  # fmt: skip
    ended = [e for e in each if e["program_ended_s"] is not None]
    if ended:  # of the added time, the traced program's own exit and xferscope's work after it
        figures["trace_sigint_program_exit_s"] = statistics.median(
            e["program_ended_s"] for e in ended)  # fmt: skip
        figures["trace_sigint_after_program_s"] = statistics.median(
            e["seconds"] - e["program_ended_s"] for e in ended)  # fmt: skip
    figures["trace_sigint_workers_clean"] = sum(
        e["exit"] == 130 and e["seconds"] < 2.0 and (e["readable"] or e["before_cuda"])
        for e in each
    )
