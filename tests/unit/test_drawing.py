"""Renderings drawn by worker processes (report/drawing.py): the same files as drawn in the
command's own process, a failure in a worker is one line and costs no other file, what cannot
travel is drawn at home, a drawing ahead is drawn only while the host is free and taken by an
equal one, and a stop leaves no temporary file and no worker behind."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from xferscope.cli.outputs import Delivery, Output
from xferscope.report import drawing
from xferscope.report.drawing import Drawing, Page

from .test_cli import run


def _boom(path: Path) -> None:
    raise ValueError("no ink")


def _write(text: object, path: Path) -> None:
    path.write_text(str(text))


def _page(title: str, names: list[str]) -> str:
    return f"<h1>{title}</h1>" + "".join(f'<a href="{n}">{n}</a>' for n in names)


def _stamp(text: str, path: Path) -> None:
    """Writes what no second drawing writes again: the process and the moment."""
    path.write_text(f"{text} {os.getpid()} {time.monotonic_ns()}")


def _settled(drawers: drawing.Drawers) -> None:
    """Reads every answer the workers owe: their libraries loaded, the drawings ahead drawn."""
    from multiprocessing.connection import wait

    while any(drawers._owed.values()):
        for ready in wait([c for c, owed in drawers._owed.items() if owed], 30):
            drawers._answer(ready)  # type: ignore[arg-type]


def _stopped(processes: list, stopped: bool = True) -> bool:
    """Whether every process is stopped (or none is, `stopped` False), as the kernel says
    within a few seconds (a signal is delivered when the process is next scheduled)."""

    def state(pid: int) -> str:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if all((state(p.pid) == "T") == stopped for p in processes):
            return True
        time.sleep(0.01)
    return False


HERE = "tests.unit.test_drawing"
WRITE, BOOM, PAGE, STAMP = (f"{HERE}:{name}" for name in ("_write", "_boom", "_page", "_stamp"))


@pytest.fixture
def workers(monkeypatch):
    monkeypatch.setenv(drawing.ENV, "2")
    yield
    drawing.stop()


def test_the_worker_count_follows_the_variable_and_the_cores(monkeypatch):
    monkeypatch.setenv(drawing.ENV, "3")
    assert drawing.worker_count() == 3
    monkeypatch.setenv(drawing.ENV, "99")
    assert drawing.worker_count() == drawing.MOST_WORKERS
    for off in ("0", "-2", "many"):
        monkeypatch.setenv(drawing.ENV, off)
        assert drawing.worker_count() == 0
    monkeypatch.delenv(drawing.ENV)
    for cores, expected in ((1, 0), (2, 0), (3, 0), (4, 2), (5, 3), (16, drawing.MOST_WORKERS)):
        monkeypatch.setattr(drawing.os, "sched_getaffinity", lambda _pid, n=cores: set(range(n)))
        assert drawing.worker_count() == expected


def test_a_run_drawn_by_workers_writes_the_same_files(capsys, tmp_path, monkeypatch):
    args = ["run", "--simulate", "--quick", "--no-history"]
    code, _, err = run(capsys, *args, "-o", str(tmp_path / "a"))
    assert code == 0, err
    (home,) = (tmp_path / "a").iterdir()
    monkeypatch.setenv(drawing.ENV, "2")
    code, _, err = run(capsys, "report", str(home / "run.json"), "-o", str(tmp_path / "b"))
    assert code == 0, err
    assert drawing.current() is None, "the workers are stopped once the files are drawn"
    (again,) = (tmp_path / "b").iterdir()
    assert sorted(p.name for p in again.iterdir()) == sorted(p.name for p in home.iterdir())
    for name in ("report.html", "gpu0-bandwidth.png", "gpu0-latency.png"):
        assert (again / name).read_bytes() == (home / name).read_bytes(), name
    assert json.loads((again / "run.json").read_text()) == json.loads(
        (home / "run.json").read_text()
    )
    assert not [p for p in again.iterdir() if p.name.endswith(".tmp")]


def _deliver(tmp_path: Path, makes: dict[str, object]) -> Delivery:
    delivery = Delivery(
        [Output(tmp_path / name, make, "--out", True, render=True) for name, make in makes.items()]  # type: ignore[arg-type]
    )
    delivery.render()
    return delivery


def test_a_worker_that_fails_costs_only_its_own_file(tmp_path, workers):
    drawing.start(html=False)
    assert drawing.current() is not None and len(drawing.current()) == 2
    delivery = _deliver(
        tmp_path,
        {
            "a.png": Drawing(WRITE, ("a",)),
            "bad.png": Drawing(BOOM),
            "c.png": Drawing(WRITE, ("c",)),
            "page.html": Page(PAGE, ("t",)),
        },
    )
    assert (tmp_path / "a.png").read_text() == "a" and (tmp_path / "c.png").read_text() == "c"
    assert not (tmp_path / "bad.png").exists()
    assert delivery.failures == [f"cannot draw {tmp_path / 'bad.png'}: ValueError: no ink"]
    # the page links the files drawn before it (as it would be drawn at home)
    page = (tmp_path / "page.html").read_text()
    assert page.startswith("<h1>t</h1>") and 'href="a.png"' in page and 'href="c.png"' in page
    assert [p.name for p in delivery.written] == ["a.png", "c.png", "page.html"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png", "c.png", "page.html"]


def test_what_cannot_travel_is_drawn_at_home(tmp_path, workers):
    drawing.start(html=False)
    local = []

    def closure(path: Path, _written: object) -> None:
        local.append(path.name)
        path.write_text("here")

    class Local:  # does not pickle
        def __str__(self) -> str:
            return "x"

    delivery = _deliver(tmp_path, {"local.png": Drawing(WRITE, (Local(),)), "closure.png": closure})
    assert delivery.ok and (tmp_path / "local.png").read_text() == "x"
    assert (tmp_path / "closure.png").read_text() == "here" and len(local) == 1


def test_a_stop_while_drawing_kills_the_workers_and_leaves_no_temporary_file(
    tmp_path, workers, monkeypatch
):
    drawing.start(html=False)
    drawers = drawing.current()
    assert drawers is not None
    processes = [p for p, _ in drawers._workers]

    def stopped(_tasks):
        yield from ()
        raise KeyboardInterrupt

    monkeypatch.setattr(drawers, "draw", stopped)
    delivery = _deliver(tmp_path, {"a.png": Drawing(WRITE, ("a",))})
    assert delivery.skipped == [tmp_path / "a.png"]
    assert list(tmp_path.iterdir()) == []
    assert all(not p.is_alive() for p in processes)


def test_no_workers_without_the_cores_or_for_commands_that_measure_another_program(
    monkeypatch,
):
    monkeypatch.setenv(drawing.ENV, "0")
    drawing.start(html=True)
    assert drawing.current() is None
    monkeypatch.setenv(drawing.ENV, "2")
    drawing.start(html=True, workers=False)
    assert drawing.current() is None


def test_workers_load_only_once_the_host_is_free_and_pause_while_it_is_timed(workers):
    """Side work never runs while the host is timed (core/background.py): the workers wait for
    host_free() to load their libraries, and host_timed() stops them where they are."""
    from xferscope.core import background

    drawing.start(html=True)
    drawers = drawing.current()
    assert drawers is not None and drawers in background._sides
    assert not any(drawers._owed.values()) and not drawers._went
    processes = [p for p, _ in drawers._workers]
    background.host_timed()  # nothing begun: they stop, idle
    assert _stopped(processes)
    background.host_free()
    assert _stopped(processes, False)
    assert drawers._went and [list(o) for o in drawers._owed.values()] == [[drawing.READY]] * 2
    background.host_timed()
    assert _stopped(processes)
    background.host_free()
    _settled(drawers)
    assert not any(drawers._owed.values()), "both workers said READY"
    background.host_free()  # loaded once only
    assert not any(drawers._owed.values())
    background.host_timed()
    drawing.stop()  # goes on to end, paused or not
    assert drawers not in background._sides
    for process in processes:  # told to stop, each ends by itself
        process.join(10)
        assert process.exitcode == 0


def watched_quick_run(engine, events: list[str]) -> None:
    """A quick run, with side work (Watch) that notes in `events` when the host is freed and
    when it is timed again."""
    from xferscope.core import background
    from xferscope.run.investigate import RunOptions, run_investigation

    watch = Watch(events)
    background.attach(watch)
    try:
        run_investigation(engine, RunOptions(devices=(0,), quick=True))
    finally:
        background.detach(watch)


class Watch:
    """Side work that only says when the host was freed and when it was timed again."""

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def go(self) -> None:
        self.events.append("free")

    def pause(self) -> None:
        self.events.append("timed")


def test_a_run_frees_the_host_only_while_the_gpu_alone_is_timed(monkeypatch):
    """run's side work may run only while the GPU alone is timed: during the curves queued
    behind the blocking kernel and timed by CUDA events, and the GEMM check's GPU GEMMs; never
    during a curve the host takes part in, the host-timed checks, GL readback, or the CPU's
    GEMMs and the ladder."""
    from xferscope.core.engine.simulated import SimulatedEngine
    from xferscope.run.investigate import gpu_curves

    events: list[str] = []

    engine = SimulatedEngine()
    for name in ("open_transfer", "gl_context", "gemm", "measure_pinning", "time"):
        real = getattr(engine, name, None)
        if real is None:
            continue

        def spy(*args, _real=real, _name=name, **kw):
            label = _name
            if _name == "open_transfer":
                label += ":" + " ".join(str(a) for a in args[1:4])  # direction memory mechanism
            events.append(label)
            return _real(*args, **kw)

        monkeypatch.setattr(engine, name, spy)
    watched_quick_run(engine, events)
    alone = {
        f"open_transfer:{c.direction} {c.memory} {c.mechanism}"
        for c in gpu_curves(0)
        if c.gpu_alone
    }
    assert events[0] == "timed"
    free = False
    opened = ""
    windows = []
    for event in events:
        if event in ("free", "timed"):
            if event == "free":
                # freed for a curve timing the GPU alone (its transfer opened just before)
                assert opened in alone or opened == "", opened
                windows.append(opened)
            free = event == "free"
            opened = ""
        elif event.startswith("open_transfer"):
            opened = event  # its buffers filled, then the host freed or timed: nothing timed
        else:
            assert event == "gemm" or not free, event
            opened = ""
    # one window per curve that times the GPU alone (the run's, then its NUMA placements' on
    # each of the fixed host's two nodes), then the GEMM check's (after GL)
    from xferscope.run.investigate import NUMA_CURVES
    from xferscope.sweep.records import CurveConfig

    placed = 2 * sum(CurveConfig(0, *key).gpu_alone for key in NUMA_CURVES)
    assert set(windows[:-1]) == alone and windows[-1] == ""
    assert len(windows) == len(alone) + placed + 1
    last = len(events) - events[::-1].index("free") - 1
    assert "gl_context" in events[:last] and events[last + 1] == "gemm"
    assert "measure_pinning" in events[:last]
    timed_again = events.index("timed", last)
    # the check's big GEMMs (one per precision) between, the ladder's after
    assert 0 < events[last:timed_again].count("gemm") <= 6


def test_a_drawing_ahead_waits_for_a_free_host_and_an_equal_one_takes_its_file(tmp_path, workers):
    from xferscope.core import background

    drawing.start(html=False)
    drawers = drawing.current()
    assert drawers is not None
    drawers.ahead(Drawing(STAMP, ("early",)))
    drawers.ahead(Drawing(STAMP, ("early",)))  # asked twice, drawn once
    drawers.ahead(Drawing(STAMP, ("unused",)))
    assert len(drawers._ahead) == 2 and not any(a.sent for a in drawers._ahead)
    background.host_free()
    assert all(a.sent for a in drawers._ahead)
    _settled(drawers)
    assert all(a.done and a.error is None for a in drawers._ahead)
    drawn = drawers._ahead[0].path.read_text()
    assert drawn.startswith("early ") and str(os.getpid()) not in drawn.split()[1]
    delivery = _deliver(
        tmp_path, {"a.png": Drawing(STAMP, ("early",)), "b.png": Drawing(STAMP, ("late",))}
    )
    assert delivery.ok and (tmp_path / "a.png").read_text() == drawn, "copied, not drawn again"
    assert (tmp_path / "b.png").read_text().startswith("late ")
    scratch = drawers._scratch
    assert scratch is not None and scratch.is_dir()
    drawing.stop()
    assert not scratch.exists()


def test_a_drawing_ahead_never_freed_or_failed_is_drawn_when_asked(tmp_path, workers):
    from xferscope.core import background

    drawing.start(html=False)
    drawers = drawing.current()
    assert drawers is not None
    drawers.ahead(Drawing(BOOM))
    background.host_free()
    drawers.ahead(Drawing(STAMP, ("while free",)))  # sent at once
    _settled(drawers)
    background.host_timed()
    drawers.ahead(Drawing(STAMP, ("never freed",)))  # the host is timed: kept back
    assert [(a.sent, a.done) for a in drawers._ahead] == [
        (True, True),
        (True, True),
        (False, False),
    ]
    assert drawers._ahead[0].error == "ValueError: no ink"
    delivery = _deliver(
        tmp_path, {"never.png": Drawing(STAMP, ("never freed",)), "bad.png": Drawing(BOOM)}
    )
    assert (tmp_path / "never.png").read_text().startswith("never freed ")
    assert delivery.failures == [f"cannot draw {tmp_path / 'bad.png'}: ValueError: no ink"]


def test_a_run_draws_its_plots_ahead_during_the_gemms(capsys, tmp_path, monkeypatch):
    """A run's PNGs are drawn while its GEMM check times the GPU alone, and are the files a
    drawing at the end would make."""
    copied: list[Path] = []
    real = drawing.Drawers._copy

    def spy(source: Path, target: Path) -> bool:
        copied.append(target)
        return real(source, target)

    monkeypatch.setattr(drawing.Drawers, "_copy", staticmethod(spy))
    monkeypatch.setenv(drawing.ENV, "2")
    args = ["run", "--simulate", "--quick", "--no-history"]
    code, _, err = run(capsys, *args, "-o", str(tmp_path / "a"))
    assert code == 0, err
    assert len(copied) == 2 and all(p.name.startswith(".gpu0-") for p in copied)
    (ahead,) = (tmp_path / "a").iterdir()
    monkeypatch.setenv(drawing.ENV, "0")
    code, _, err = run(capsys, "report", str(ahead / "run.json"), "-o", str(tmp_path / "b"))
    assert code == 0, err
    (home,) = (tmp_path / "b").iterdir()
    for name in ("gpu0-bandwidth.png", "gpu0-latency.png"):
        assert (ahead / name).read_bytes() == (home / name).read_bytes(), name


def test_a_run_loads_the_checks_libraries_in_a_window_the_gpu_alone_is_timed(monkeypatch):
    """cuBLASLt and GL load in a thread (background.Ahead) once a curve frees the host, and are
    loaded before anything the host takes part in is timed again: a pause waits for the thread."""
    import threading
    import time

    from xferscope.core.engine.simulated import SimulatedEngine

    events: list[str] = []
    engine = SimulatedEngine()
    release = threading.Event()

    def preload() -> None:
        events.append("preload begun")
        release.wait(5)  # held until the next curve opens, and until it times the host
        begun = events.index("preload begun")
        deadline = time.monotonic() + 5
        while "timed" not in events[begun:] and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.05)  # the main thread, were it not waiting, would go on meanwhile
        events.append("preload ended")

    real_open = engine.open_transfer

    def open_transfer(*args, **kw):
        events.append("open " + " ".join(str(a) for a in args[1:4]))
        release.set()
        return real_open(*args, **kw)

    monkeypatch.setattr(engine, "preload", preload)
    monkeypatch.setattr(engine, "open_transfer", open_transfer)
    watched_quick_run(engine, events)
    assert events.count("preload begun") == 1 and events.count("preload ended") == 1
    begun, ended = events.index("preload begun"), events.index("preload ended")
    assert "free" in events[:begun] and "timed" not in events[events.index("free") : begun]
    # the next curve times the host only once loading ended: its pause waited for the thread
    timed = events.index("timed", begun)
    assert ended == timed + 1, events[begun : ended + 2]


def test_ahead_begins_once_and_a_pause_waits_for_it():
    import threading

    from xferscope.core import background

    done = threading.Event()
    calls: list[int] = []

    def work() -> None:
        calls.append(1)
        done.wait(5)

    ahead = background.Ahead(work)
    ahead.pause()  # not begun: nothing to wait for
    assert not ahead.begun
    ahead.go()
    ahead.go()
    threading.Timer(0.05, done.set).start()
    ahead.pause()
    assert done.is_set() and calls == [1]
