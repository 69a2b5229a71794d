"""Ctrl-C at any moment keeps what was measured: real SIGINTs sent to real processes at random
moments of `run` and `sweep` (the simulated engine, paced to take real time), and the phases
one by one in-process."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from xferscope.core import interrupt
from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.run.history import History
from xferscope.run.investigate import gpu_curves

from .test_cli import ENGINE, run

# Paced at these shares of the modelled time (the quick run models 4.9 s, this sweep 1.2 s),
# each measures for about 1.5 and 1 s, then writes and draws for a few seconds. (At 0.12 the
# run, whose model had shrunk from 8.5 s, measured for 0.6 s of a 5-7 s life: 20 moments then
# fell only once while measuring on a loaded 2-core machine.)
PACE = {"run": "0.3", "sweep": "0.8"}
EXIT_WITHIN_S = 2.0
# a signal the command met this soon before it exited 0 came as it left, its result written: a CI
# run saw a sweep exit 0, whole, 11 ms after SIGINT
ON_ITS_WAY_OUT_S = 0.05
SIGNALS = {"run": 20, "sweep": 16}
QUICK_SIZES = 8  # `run --quick` measures 8 sizes a curve
SWEEP_ARGS = [
    "--simulate",
    "--quick",
    "-d",
    "h2d,d2h",
    "-m",
    "pageable,pinned",
    "--sizes",
    "1,4KiB,1MiB,64MiB",
]


@dataclass
class Outcome:
    code: int
    after_signal_s: float | None  # None: the command had ended before the moment came
    stderr: str
    directory: Path | None
    lifetime_s: float  # from the directory's appearance to the exit


def interrupt_once(
    command: str, base: Path, delay_s: float | None, args: list[str] | None = None
) -> Outcome:
    """Starts the command (by default the simulated one, paced), waits for its result
    directory, sends SIGINT `delay_s` later (None: never), and times how long the process takes
    to exit after it."""
    out, history = base / "out", base / "history.sqlite3"
    env = dict(os.environ, XFERSCOPE_HISTORY=str(history))
    if args is None:
        args = ["run", "--simulate", "--quick"] if command == "run" else ["sweep", *SWEEP_ARGS]
        env["XFERSCOPE_SIMULATE_PACE"] = PACE[command]
    proc = subprocess.Popen(
        [sys.executable, "-m", "xferscope", *args, "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while not (out.exists() and any(out.iterdir())):
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "the result directory never appeared"
            time.sleep(0.005)
        appeared = time.monotonic()
        after = None
        if delay_s is not None:
            time.sleep(delay_s)
            if proc.poll() is None:
                sent = time.monotonic()
                proc.send_signal(signal.SIGINT)
                proc.wait(timeout=30)
                after = time.monotonic() - sent
        _, err = proc.communicate(timeout=60)
        lifetime = time.monotonic() - appeared
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    directories = list(out.iterdir()) if out.exists() else []
    assert len(directories) <= 1
    return Outcome(proc.returncode, after, err, directories[0] if directories else None, lifetime)


def check_run(outcome: Outcome, base: Path) -> str:
    """Either no run directory, or a complete, truthfully marked run.json that is also in the
    history. Returns the phase the signal hit: before, measuring or writing."""
    if outcome.directory is None:
        return "before"
    doc = json.loads((outcome.directory / "run.json").read_text())
    (gpu,) = doc["gpus"]
    whole = (
        len(gpu["curves"]) == len(gpu_curves(0))
        and all(len(c["points"]) == QUICK_SIZES for c in gpu["curves"])
        and gpu["concurrent"]
        and gpu["pinning"] is not None
        and len(gpu["overlap"]) == 2
    )
    if doc["interrupted"]:
        assert doc["complete"] is False and gpu["status"] == "interrupted"
        assert any(f["code"] == "incomplete" for f in doc["findings"])
    else:
        assert doc["complete"] is True and gpu["status"] == "complete" and whole
    with History(base / "history.sqlite3", readonly=True) as history:
        (listed,) = history.list()
        stored = history.get(listed.id)
    assert stored.created == doc["created"] and stored.interrupted == doc["interrupted"]
    assert listed.complete == doc["complete"]
    return "measuring" if doc["interrupted"] else "writing"


def check_sweep(outcome: Outcome, curves: int = 4, sizes: int = 4) -> str:
    if outcome.directory is None:
        return "before"
    doc = json.loads((outcome.directory / "sweep.json").read_text())
    if doc["interrupted"]:
        assert doc["curves"][-1]["status"] == "interrupted"
        assert any(c["points"] for c in doc["curves"])
        return "measuring"
    assert len(doc["curves"]) == curves
    assert all(len(c["points"]) == sizes for c in doc["curves"])
    assert all(c["status"] == "complete" for c in doc["curves"])
    return "writing"


def check_signalled(what: str, outcome: Outcome) -> None:
    """Exit 130 within EXIT_WITHIN_S of the signal, and no crash on the way out."""
    assert outcome.code == 130, (what, outcome.stderr)
    assert outcome.after_signal_s is not None and outcome.after_signal_s < EXIT_WITHIN_S, (
        what,
        outcome.after_signal_s,
    )
    for crash in ("Traceback", "Fatal Python error", "ImportError", "Aborted", "terminate"):
        assert crash not in outcome.stderr, (what, outcome.stderr)


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_sigint_at_random_moments_exits_130_quickly_and_loses_nothing(tmp_path, command):
    # How long the command lives here once its directory exists: the moments are spread over
    # that (this machine's speed), two commands at a time, as they will be below.
    with ThreadPoolExecutor(max_workers=2) as pool:
        undisturbed = list(
            pool.map(
                lambda b: interrupt_once(command, b, None),
                [tmp_path / "whole0", tmp_path / "whole1"],
            )
        )
    assert all(o.code == 0 for o in undisturbed), [o.stderr for o in undisturbed]
    lifetime = min(o.lifetime_s for o in undisturbed)
    rng = random.Random(f"xferscope-{command}")  # the same share of the life on every machine
    delays = [rng.uniform(0.0, 0.95 * lifetime) for _ in range(SIGNALS[command])]
    bases = [tmp_path / f"try{i}" for i in range(len(delays))]
    with ThreadPoolExecutor(max_workers=2) as pool:
        outcomes = list(
            pool.map(lambda a: interrupt_once(command, *a), zip(bases, delays, strict=True))
        )
    phases = []
    for delay, base, outcome in zip(delays, bases, outcomes, strict=True):
        what = f"{command}: SIGINT {delay:.2f} s after the directory appeared"
        if outcome.after_signal_s is None:  # the command was faster this time: no signal
            assert outcome.code == 0, (what, outcome.stderr)
            phases.append("finished")
            continue
        if outcome.code == 0 and outcome.after_signal_s < ON_ITS_WAY_OUT_S:
            # the signal met the command on its way out: its result must then be whole
            phase = check_run(outcome, base) if command == "run" else check_sweep(outcome)
            assert phase == "writing", (what, outcome.stderr)
            phases.append("finished")
            continue
        check_signalled(what, outcome)
        phases.append(check_run(outcome, base) if command == "run" else check_sweep(outcome))
    # The moments fell both while measuring and while writing (how many in each depends on
    # how long this machine takes to draw the plots against the paced measurement).
    assert phases.count("finished") <= 2, phases
    assert phases.count("measuring") >= 2, phases
    assert phases.count("writing") >= 2, phases


# ---- the phases, one by one, in-process --------------------------------------------------------


@pytest.fixture
def quick_plots(monkeypatch):
    """Plots as files of a few bytes (matplotlib takes most of a run's second)."""

    def write_plot(result, what, path):
        Path(path).write_bytes(b"\x89PNG stand-in")

    monkeypatch.setattr("xferscope.report.plots.write_plot", write_plot)


@pytest.fixture(autouse=True)
def own_history(tmp_path, monkeypatch):
    monkeypatch.setenv("XFERSCOPE_HISTORY", str(tmp_path / "history.sqlite3"))
    return tmp_path / "history.sqlite3"


def _signal_while(monkeypatch, target: str) -> None:
    """Sends SIGINT to this process when `target` (module.function) is first called, then lets
    it run."""
    module, name = target.rsplit(".", 1)
    real = getattr(__import__(module, fromlist=[name]), name)
    calls = []

    def wrapper(*args, **kwargs):
        if not calls:
            os.kill(os.getpid(), signal.SIGINT)
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(target, wrapper)


def test_ctrl_c_while_printing_keeps_a_complete_run_in_the_history(
    capsys, tmp_path, monkeypatch, quick_plots, own_history
):
    """The measurement was done: run.json says complete (truthfully), the history has it, the
    exit status says a signal came, and the renderings that Ctrl-C left undrawn are named with
    the command that draws them."""
    monkeypatch.setattr(interrupt, "GRACE_S", 0.0)
    _signal_while(monkeypatch, "xferscope.report.run_tables.print_run")
    code, _, err = run(capsys, "run", "--simulate", "--quick", "-o", str(tmp_path / "out"))
    assert code == 130, err
    (directory,) = (tmp_path / "out").iterdir()
    assert {p.name for p in directory.iterdir()} == {"run.json", "points.csv", "metrics.csv"}
    doc = json.loads((directory / "run.json").read_text())
    assert doc["complete"] is True and doc["interrupted"] is False
    with History(own_history, readonly=True) as history:
        (listed,) = history.list()
    assert listed.complete
    text = " ".join(err.split())
    assert "interrupted after measuring: the measurement is complete" in text
    assert "not drawn (interrupted): report.html, gpu0-bandwidth.png, gpu0-latency.png" in text
    assert f"`xferscope report {directory / 'run.json'}` draws them" in text
    # ... and it does.
    code, _, err = run(capsys, "report", str(directory / "run.json"), "-o", str(tmp_path / "r"))
    assert code == 0, err
    assert (tmp_path / "r" / directory.name / "report.html").exists()


def test_ctrl_c_while_measuring_draws_the_report_first_within_the_grace(
    capsys, tmp_path, monkeypatch, quick_plots
):
    monkeypatch.setattr(interrupt, "GRACE_S", 60.0)
    monkeypatch.setattr(ENGINE, lambda simulate: SimulatedEngine(interrupt_after=300))
    code, _, err = run(capsys, "run", "--simulate", "--quick", "-o", str(tmp_path / "out"))
    assert code == 130, err
    (directory,) = (tmp_path / "out").iterdir()
    written = " ".join(err.split()).split("wrote ")[1].split(" in ")[0].split(", ")
    # After a signal the HTML report comes first among the renderings.
    assert written[:4] == ["run.json", "points.csv", "metrics.csv", "report.html"]
    assert (directory / "gpu0-latency.png").exists()
    assert json.loads((directory / "run.json").read_text())["interrupted"] is True


def test_a_second_ctrl_c_cuts_the_drawing_but_never_the_data(
    capsys, tmp_path, monkeypatch, own_history
):
    monkeypatch.setattr(interrupt, "GRACE_S", 60.0)
    drawn = []

    def write_plot(result, what, path):
        drawn.append(what)
        os.kill(os.getpid(), signal.SIGINT)  # the first: the grace starts
        os.kill(os.getpid(), signal.SIGINT)  # the second: stop drawing now
        Path(path).write_bytes(b"never reached")

    monkeypatch.setattr("xferscope.report.plots.write_plot", write_plot)
    code, _, err = run(capsys, "run", "--simulate", "--quick", "-o", str(tmp_path / "out"))
    assert code == 130, err
    assert drawn == ["bandwidth"]
    (directory,) = (tmp_path / "out").iterdir()
    assert {p.name for p in directory.iterdir()} == {"run.json", "points.csv", "metrics.csv"}
    assert not list(directory.glob(".*")), "no temporary file is left"
    assert json.loads((directory / "run.json").read_text())["complete"] is True
    with History(own_history, readonly=True) as history:
        assert len(history.list()) == 1


def test_ctrl_c_before_the_first_copy_leaves_no_directory(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(ENGINE, lambda simulate: SimulatedEngine(interrupt_after=0))
    for command in (["run", "--simulate", "--quick"], ["sweep", *SWEEP_ARGS]):
        code, _, err = run(capsys, *command, "-o", str(tmp_path / "out"))
        assert code == 130 and "nothing written" in err
        assert not list((tmp_path / "out").iterdir())


def test_sigterm_is_handled_like_ctrl_c_and_exits_143(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(interrupt, "GRACE_S", 0.0)

    def engine(simulate: bool) -> SimulatedEngine:
        class Terminated(SimulatedEngine):
            calls = 0

            def advance(self, seconds: float) -> None:
                Terminated.calls += 1
                if Terminated.calls == 30:
                    os.kill(os.getpid(), signal.SIGTERM)
                super().advance(seconds)

        return Terminated()

    monkeypatch.setattr(ENGINE, engine)
    code, _, err = run(capsys, "sweep", *SWEEP_ARGS, "-o", str(tmp_path / "out"))
    assert code == 143, err
    (path,) = (tmp_path / "out").glob("sweep-*/sweep.json")
    assert json.loads(path.read_text())["interrupted"] is True


def test_signal_handlers_are_put_back(capsys):
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    assert run(capsys, "--version")[0] == 0
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_check_raises_only_after_a_request():
    interrupt.check()
    interrupt.request()
    assert interrupt.requested()
    with pytest.raises(KeyboardInterrupt):
        interrupt.check()
    assert interrupt.exit_status() == 130
    interrupt.reset()
    interrupt.request(signal.SIGTERM)
    assert interrupt.exit_status() == 143


def test_ctrl_c_in_a_slow_gl_scenario_exits_within_the_limit(tmp_path):
    """A scenario that takes seconds (floats converted into half floats: 0.27 GB/s modelled,
    paced in real time) is measured in calls of at most half a second, so Ctrl-C still ends
    the command quickly, with the scenarios done so far written."""
    args = [
        "gl",
        "--simulate",
        "--op",
        "upload",
        "--size",
        "1024",
        "--type",
        "float,ubyte",
        "--internal",
        "rgba16f",
        "--bytes",
        "4GiB",
        "--no-baseline",
    ]
    os.environ["XFERSCOPE_SIMULATE_PACE"] = "1"
    try:
        outcome = interrupt_once("gl", tmp_path, 2.5, args)
    finally:
        del os.environ["XFERSCOPE_SIMULATE_PACE"]
    check_signalled("gl", outcome)
    assert outcome.after_signal_s is not None and outcome.after_signal_s < 1.0
    assert outcome.directory is not None
    doc = json.loads((outcome.directory / "gl.json").read_text())
    assert doc["interrupted"] is True
    assert doc["scenarios"][-1]["status"] == "interrupted"
