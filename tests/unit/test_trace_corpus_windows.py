"""benchmarks/trace_corpus_windows.py: the kernels a kernel-recording setting keeps of a trace
recorded with every kernel, as the injection library's sampler would have kept them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from trace_corpus_windows import rewindow, setting, table, windows

MS = 1_000_000


def _records(seconds: int = 10) -> list[dict]:
    """A process recorded with its first window open from 0: a kernel every millisecond, a copy
    call every 300 ms (from 50 ms), its end at `seconds`."""
    out: list[dict] = [{"t": "start", "pid": 7, "ts": 0, "kernels": "sampled", "on_ms": 200,
                        "period_ms": 2000, "first_ms": 30000}, {"t": "kwin", "a": 0}]  # fmt: skip
    out += [{"t": "kernel", "n": "k", "st": i * MS, "en": i * MS + 500, "dev": 0, "str": 7, "c": i}
            for i in range(seconds * 1000)]  # fmt: skip
    out += [{"t": "api", "rt": 1, "f": "cudaMemcpyAsync", "st": (50 + 300 * i) * MS,
             "en": (50 + 300 * i) * MS + 1000, "tid": 7, "c": 10**6 + i, "src": 1, "dst": 2,
             "b": 4, "kind": 1} for i in range(seconds * 1000 // 300)]  # fmt: skip
    out += [{"t": "totals", "of": "kernel", "records": seconds * 1000,
             "written": seconds * 1000, "b": 0, "ns": seconds * 1000 * 500},
            {"t": "end", "ts": seconds * 1000 * MS}]  # fmt: skip
    return out


def test_the_first_window_closes_at_its_count_and_the_next_open_at_a_copy():
    found = windows(_records(), 200 * MS, 2000 * MS, 30000 * MS, 1000)
    # 1,000 kernels from 0 ms: closed at the 1,001st's start; the next opens at the first copy
    # 1.8 s after it closed (3,050 ms), each next at the first 1.8 s after one closed (the
    # copies fall every 300 ms from 50 ms)
    assert found[0] == (0, 1000 * MS)
    assert [a // MS for a, _ in found[1:]] == [3050, 5150, 7250, 9350]
    assert all(b - a == 200 * MS for a, b in found[1:])


def test_without_a_count_the_first_window_lasts_its_time():
    assert windows(_records(), 200 * MS, 2000 * MS, 30000 * MS, 0) == [(0, 10000 * MS)]


def test_rewindow_leaves_out_the_kernels_outside_and_keeps_the_totals_true(tmp_path):
    path = tmp_path / "trace-7.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in _records()) + '\n{"t":"kern')
    opened, dropped = rewindow(path, 200 * MS, 2000 * MS, 30000 * MS, 1000)
    assert (opened, dropped) == (5, 10000 - 1000 - 4 * 200)
    lines = path.read_text().splitlines()
    assert lines[-1] == '{"t":"kern'  # a line cut short stays as it was
    records = [json.loads(x) for x in lines[:-1]]
    kept = [r for r in records if r["t"] == "kernel"]
    (totals,) = [r for r in records if r["t"] == "totals"]
    assert totals["records"] == totals["written"] == len(kept) == 1800
    assert totals["ns"] == 1800 * 500
    assert next(r for r in records if r["t"] == "start")["first_kernels"] == 1000
    assert sum(1 for r in records if r["t"] == "kwin") == 10


@pytest.mark.parametrize("value", ["200/2000", "0/10/100", "10/5/100", "a/b/c", "1/2/3/4/5"])
def test_a_bad_setting_is_refused(value):
    with pytest.raises(Exception, match="ON"):
        setting(value)


def test_the_table_has_a_line_a_setting_and_a_column_a_program():
    rows = {
        "recorded": {"trace_corpus_headline_right": 1.0, "trace_corpus_steps_right": 1.0,
                     "trace_corpus_prediction_error_max": 0.475,
                     "trace_corpus_idle_share_error_max": 0.104,
                     "judged": {"b": {"prediction_error": 0.03}, "a": {}}},
        "1/2/3/4": {"trace_corpus_headline_right": 0.5,
                    "judged": {"b": {"prediction_error": 0.4}}},
    }  # fmt: skip
    head, recorded, other = table(rows).splitlines()
    assert head.endswith("| prediction error: a b")
    assert recorded == "recorded  1.000  1.000  0.475  0.104  | - 0.030"
    assert other == "1/2/3/4  0.500  nan  nan  nan  | - 0.400"


def test_windows_stay_inside_those_the_kernels_were_recorded_in():
    """A trace whose first window closed at 3 s and opened again at 5.2 s for 1.8 s: of the
    simulated windows (0-1 s, then 200 ms from 3.05, 5.15, 7.25 and 9.35 s) only what lies in
    those is claimed."""
    records = [r for r in _records() if r["t"] != "kwin"]
    records[1:1] = [{"t": "kwin", "a": 0}, {"t": "kwin", "b": 3000 * MS},
                    {"t": "kwin", "a": 5200 * MS}, {"t": "kwin", "b": 7000 * MS}]  # fmt: skip
    found = windows(records, 200 * MS, 2000 * MS, 30000 * MS, 1000)
    assert found == [(0, 1000 * MS), (5200 * MS, 5350 * MS)]


def test_a_count_without_a_first_window_is_refused():
    with pytest.raises(Exception, match="COUNT ends a FIRST"):
        setting("200/2000/0/100")
