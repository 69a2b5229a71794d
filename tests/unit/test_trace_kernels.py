"""Kernels recorded in windows (`trace --kernels`, issue 30): what the records say, which copies
the overlap figures are judged on, how they are scaled to all copies, and the notes that say
so. The records are written here as the injection writes them (inject.cpp)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xferscope.core.errors import OptionError
from xferscope.trace.analyze import analyze, groups
from xferscope.trace.findings import Context, not_overlapped
from xferscope.trace.reading import read_trace
from xferscope.trace.runner import FIRST_KERNELS, KERNEL_WINDOW_MS, kernels_setting

MS = 1_000_000  # ns


def _copy(c: int, start_ms: float, dur_ms: float, k: int = 1) -> list[dict]:
    """A pageable host-to-device copy (k=1) of 1 MiB and its runtime call."""
    st, en = int(start_ms * MS), int((start_ms + dur_ms) * MS)
    return [
        {"t": "memcpy", "k": k, "s": 1, "d": 3, "async": 0, "b": 1 << 20, "st": st, "en": en,
         "dev": 0, "str": 7, "c": c, "rc": c},
        {"t": "api", "rt": 1, "f": "cudaMemcpy", "st": st - 1000, "en": en + 1000, "tid": 5,
         "c": c},
    ]  # fmt: skip


def _start(pid: int, kernels: str, on_ms: int = 0, period_ms: int = 0) -> dict:
    """A process's first line: its kernels recorded all, none or sampled (in windows of on_ms
    every period_ms; 0 and 0 otherwise)."""
    return {"t": "start", "pid": pid, "ppid": 1, "ts": 0, "limit": 10, "kernels": kernels,
            "on_ms": on_ms, "period_ms": period_ms}  # fmt: skip


def _kernel(start_ms: float, dur_ms: float) -> dict:
    st = int(start_ms * MS)
    return {"t": "kernel", "n": "gemm", "st": st, "en": st + int(dur_ms * MS), "dev": 0, "str": 7,
            "c": 0}  # fmt: skip


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _sampled(tmp_path: Path, close_last: bool = True) -> Path:
    """One process, kernels recorded 10 ms of every 100 ms: windows [0, 10] and [100, 110] ms;
    copies of 1 ms at 2, 5 (beside a kernel), 8 (alone), 50 (outside) and 104 (alone)."""
    records: list[dict] = [
        _start(42, "sampled", 10, 100),
        {"t": "kwin", "a": 0}, {"t": "kwin", "b": 10 * MS}, {"t": "kwin", "a": 100 * MS},
    ]  # fmt: skip
    if close_last:
        records.append({"t": "kwin", "b": 110 * MS})
    records += [_kernel(1.5, 4.5), _kernel(101, 1)]
    for c, at in enumerate((2, 5, 8, 50, 104), start=1):
        records += _copy(c, at, 1)
    records += [
        {"t": "cost", "callbacks": [10, 40_000], "hash": [5, 10_000], "unwind": [5, 9_000],
         "python": [5, 8_000]},
        {"t": "end", "ts": 200 * MS},
    ]  # fmt: skip
    return _write(tmp_path / "trace-42.jsonl", records)


@pytest.mark.parametrize("close_last", [True, False])
def test_only_copies_inside_a_kernel_window_are_judged(tmp_path, close_last):
    trace = read_trace([_sampled(tmp_path, close_last)])
    assert trace.kernel_coverage == "sampled"
    assert len(trace.kernel_windows) == 2  # one left open ends with the process
    seen = trace.seen_with_kernels(trace.copies)
    assert [round(c.start_ns / MS) for c in seen] == [2, 5, 8, 104]


def test_the_overlap_is_scaled_from_the_copies_seen_to_all(tmp_path):
    trace = read_trace([_sampled(tmp_path)])
    (group,) = groups(trace, None)
    # seen: 4 ms of copies, 2 of them beside the kernel of 1.5-6 ms (those at 2 and 5 ms)
    beside_ms = 1.0 + 1.0  # 2-3 within 1.5-6, 5-6 within 1.5-6
    assert group.overlapped_s == pytest.approx(beside_ms * 1e-3 * 5 / 4)
    fix = not_overlapped.find(Context(trace, None))
    assert fix is not None and fix.calls == 2  # the copies at 8 and 104 ms, alone
    assert fix.cost_s == pytest.approx(2e-3 * 5 / 4)
    assert "judged on the 4 copies" in fix.detail and "--kernels all" in fix.detail


def test_the_notes_say_kernels_were_sampled_and_what_the_tracing_cost(tmp_path):
    analysis = analyze(read_trace([_sampled(tmp_path)]), 1.0, None)
    notes = " | ".join(analysis.notes)
    assert "kernels were recorded in 2 windows of 10 ms (one every 100 ms at most)" in notes
    assert "4 of 5 copies" in notes
    assert "callbacks took 40.00 µs of the program's threads in 10 callbacks" in notes


def test_without_kernel_records_no_overlap_is_claimed(tmp_path):
    records = [_start(7, "none")]
    for c, at in enumerate((2, 5), start=1):
        records += _copy(c, at, 1)
    trace = read_trace([_write(tmp_path / "trace-7.jsonl", records)])
    (group,) = groups(trace, None)
    assert group.overlapped_s is None and not_overlapped.find(Context(trace, None)) is None
    assert any("kernels were not recorded" in n for n in analyze(trace, 1.0, None).notes)


def test_a_trace_of_every_kernel_is_judged_whole(tmp_path):
    """`trace --kernels all`: every copy is judged beside every kernel."""
    records: list[dict] = [_start(9, "all"), _kernel(0, 3)]
    for c, at in enumerate((1, 50), start=1):
        records += _copy(c, at, 1)
    trace = read_trace([_write(tmp_path / "trace-9.jsonl", records)])
    assert trace.kernel_coverage == "all"
    (group,) = groups(trace, None)
    assert group.overlapped_s == pytest.approx(1e-3)
    fix = not_overlapped.find(Context(trace, None))
    assert fix is not None and fix.calls == 1 and "judged on" not in fix.detail


@pytest.mark.parametrize(
    ("value", "setting"),
    [("all", "all"), ("none", "none"),
     ("sampled", "{}/{}/{}/{}".format(*KERNEL_WINDOW_MS, FIRST_KERNELS)),
     ("50/500", "50/500"), ("007/100", "7/100"), ("50/500/5000", "50/500/5000"),
     ("50/500/0", "50/500/0"), ("50/500/5000/0100", "50/500/5000/100")],
)  # fmt: skip
def test_kernels_setting(value, setting):
    assert kernels_setting(value) == setting


@pytest.mark.parametrize("value", ["", "some", "100", "100/100", "0/10", "10/", "/10", "1.5/10",
                                   "5/10/", "5/10/20/", "5/10/20/30/4", "5/10/20/1e3", "5/10/1e3",
                                   "10/5", "1/9999999", "1/²", "٣/٩", "nan", "inf", "-1/10",
                                   "5/10/0/100", " 1/10"])  # fmt: skip
def test_a_bad_kernels_setting_names_the_option(value):
    with pytest.raises(OptionError, match="--kernels"):
        kernels_setting(value)


def test_a_run_inside_its_first_window_says_every_kernel_was_recorded(tmp_path):
    start = _start(42, "sampled", 200, 2000) | {"first_ms": 30000, "first_kernels": 20000}
    records: list[dict] = [start, {"t": "kwin", "a": 0}, _kernel(1.5, 4.5)]
    for c, at in enumerate((2, 5, 8), start=1):
        records += _copy(c, at, 1)
    records.append({"t": "end", "ts": 20 * MS})
    notes = " | ".join(
        analyze(read_trace([_write(tmp_path / "t.jsonl", records)]), 1.0, None).notes
    )
    assert "every kernel from the first copy on was recorded" in notes
    assert "(open 30000 ms or until it held 20,000 kernels)" in notes
    assert "200 ms in every 2000 ms" in notes and "window of" not in notes
