"""benchmarks/trace_corpus/corpus.py's blocks: a loop's steps timed with the tracing off and on
in turn within one process (the switch set, the device synchronized, settling steps left out),
and what trace_overhead.py makes of them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path[:0] = [str(BENCH), str(BENCH / "trace_corpus")]
from corpus import ALTERNATE, Blocks, Loop, alternation  # noqa: E402

import trace_overhead  # noqa: E402
from trace_overhead import blocks_ratio, entry, times_blocks  # noqa: E402


class Fake:
    """A switch, a synchronize and a clock that a step advances by the tracing's state: 1 ms
    a step traced, 0.8 ms with it off."""

    def __init__(self) -> None:
        self.mode = 0
        self.now = 0.0
        self.calls: list[tuple[str, int]] = []

    def switch(self, mode: int) -> int:
        self.mode = mode
        self.calls.append(("switch", mode))
        return 0

    def sync(self) -> None:
        self.calls.append(("sync", self.mode))

    def clock(self) -> float:
        return self.now

    def step(self) -> None:
        self.now += 0.8e-3 if self.mode else 1e-3


def run(blocks: Blocks, fake: Fake, steps: int) -> None:
    blocks.begin()
    for _ in range(steps):
        fake.step()
        blocks.step()
    blocks.end()


def test_blocks_alternate_off_on_on_off_and_time_only_the_settled_steps():
    fake = Fake()
    blocks = Blocks(fake.switch, fake.sync, block=5, off_mode=2, settle=3, clock=fake.clock)
    run(blocks, fake, 8 * 4 + 6)  # four whole blocks, a fifth cut short
    assert [m for what, m in fake.calls if what == "switch"] == [2, 0, 0, 2, 2, 0]
    assert blocks.off == pytest.approx([0.8e-3, 0.8e-3]) and blocks.on == pytest.approx([1e-3] * 2)
    assert fake.mode == 0  # the tracing back on after the loop
    assert blocks.figures()["block"] == 5


def test_no_settling_times_every_step():
    fake = Fake()
    blocks = Blocks(fake.switch, fake.sync, block=4, off_mode=1, settle=0, clock=fake.clock)
    run(blocks, fake, 16)
    assert len(blocks.off) == 2 and len(blocks.on) == 2


def test_a_switch_that_fails_ends_the_program_with_one_line():
    fake = Fake()
    blocks = Blocks(lambda _: -1, fake.sync, block=4, off_mode=2, clock=fake.clock)
    with pytest.raises(SystemExit, match=r"\$TRACE_CORPUS_ALTERNATE: the tracing could not"):
        blocks.begin()


@pytest.mark.parametrize("spec", ["detach", "detach:", "detach:0", "off:50", "pause:x",
                                  "detach:100001", ":50"])  # fmt: skip
def test_a_bad_alternation_is_one_line_naming_the_variable(monkeypatch, spec):
    monkeypatch.setenv(ALTERNATE, spec)
    with pytest.raises(SystemExit, match=r"\$TRACE_CORPUS_ALTERNATE: '.*' is not MODE:BLOCK"):
        alternation(lambda: None)


def test_alternation_needs_a_synchronize_and_a_traced_process(monkeypatch):
    monkeypatch.delenv(ALTERNATE, raising=False)
    assert alternation(None) is None
    monkeypatch.setenv(ALTERNATE, "detach:50")
    with pytest.raises(SystemExit, match="does not time its steps in blocks"):
        alternation(None)
    monkeypatch.delenv("CUDA_INJECTION64_PATH", raising=False)
    with pytest.raises(SystemExit, match=r"run under xferscope trace"):
        alternation(lambda: None)


def test_a_loop_without_alternation_reports_no_blocks(monkeypatch, capsys):
    monkeypatch.delenv(ALTERNATE, raising=False)
    monkeypatch.setattr(sys, "argv", ["prog.py", "--steps", "3"])
    import argparse

    loop = Loop(argparse.Namespace(steps=3, fixed=False), sync=lambda: None)
    loop.start()
    for _ in range(3):
        loop.step()
    loop.stop()
    loop.report()
    said = json.loads(capsys.readouterr().out)
    assert "blocks" not in said
    # the steps after the first: from the first step() to the loop's stop
    assert said["steady_steps"] == 2 and 0 <= said["steady_s"] <= said["seconds"]


def test_a_loop_that_never_calls_step_reports_no_steady_steps(monkeypatch, capsys):
    monkeypatch.delenv(ALTERNATE, raising=False)
    monkeypatch.setattr(sys, "argv", ["prog.py"])
    import argparse

    loop = Loop(argparse.Namespace(steps=3, fixed=False))
    loop.start()
    loop.stop()
    loop.report()
    said = json.loads(capsys.readouterr().out)
    assert "steady_s" not in said and said["steps"] == 3


def test_a_runs_ratio_is_of_its_blocks_medians():
    line = {"seconds": 1.0, "blocks": {"off_step_s": [0.9, 0.8, 1.0], "on_step_s": [1.0, 1.2]}}
    assert blocks_ratio(line) == pytest.approx(0.9 / 1.1)
    assert blocks_ratio({"seconds": 1.0}) is None
    assert blocks_ratio({"blocks": {"off_step_s": [1.0], "on_step_s": []}}) is None


def test_an_alternated_variants_ratio_is_its_blocks_and_keeps_the_runs(monkeypatch):
    monkeypatch.delenv("TRACE_CORPUS_STEPS_TIMES", raising=False)
    got = entry({"untraced": [1.0, 1.3, 1.1], "alternated": [1.2, 1.4, 1.3],
                 "blocks_alternated": [0.93, 0.95, 0.94]})  # fmt: skip
    assert got["ratio_alternated"] == pytest.approx(0.94)
    assert got["ratio_alternated_runs"] == pytest.approx(1.1 / 1.3)
    low, high = got["interval_alternated"]
    assert 0.93 <= low <= 0.94 <= high <= 0.95
    assert "ratio_blocks_alternated" not in got


def test_only_the_programs_that_time_blocks_are_alternated():
    by_name = {p.name: p for p in trace_overhead.programs("")}
    assert times_blocks(by_name["recsys_small_copies"])
    assert not times_blocks(by_name["clean_loop"])
    variants = trace_overhead.VARIANTS
    assert variants["alternated"].env() == {ALTERNATE: "detach:50"}
    assert variants["alternated_copies_floor"].env()["XFERSCOPE_TRACE_KNOBS"] == "nosubscribe"


def test_a_timed_loop_runs_each_step_between_two_synchronizes(monkeypatch, capsys):
    monkeypatch.delenv(ALTERNATE, raising=False)
    import argparse

    said: list[str] = []
    loop = Loop(argparse.Namespace(steps=4, fixed=False), sync=lambda: said.append("sync"))
    assert loop.timed(lambda i: said.append(f"step {i}")) is loop
    assert said == ["sync", "step 0", "step 1", "step 2", "step 3", "sync"]
    loop.report()
    assert json.loads(capsys.readouterr().out)["steady_steps"] == 3
    with pytest.raises(SystemExit, match="needs the framework's synchronize"):
        Loop(argparse.Namespace(steps=1, fixed=False)).timed(lambda i: None)
    by_name = {p.name: p for p in trace_overhead.programs("")}
    assert times_blocks(by_name["masked_lm_boolean_index"])  # its loop is Loop.timed's
