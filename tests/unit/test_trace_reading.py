"""trace/reading.py's records file reader: every whole line's object, in order, read a chunk of
lines at a time; a line cut short, junk or a value that is not an object skipped alone."""

from __future__ import annotations

import json

import pytest

from xferscope.trace import reading
from xferscope.trace.reading import jsonl_records


def _each_line(text: str) -> list[dict]:
    """What a parse a line at a time keeps: the reader's rule written plainly (a line ends at
    "\n" alone, as the writers end them)."""
    kept = []
    for line in text.split("\n"):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            kept.append(value)
    return kept


@pytest.mark.parametrize("bad", ['{"t":"kernel","st":1', "1", "[2]", '{"a":1},{"b":2}', "}", "",
                                 "3,4", '"a"', "  ", "\r", '{"n":"x\u2028y"}'])  # fmt: skip
@pytest.mark.parametrize("where", [0, 4, 5, 9, 10, 22])
def test_a_bad_line_anywhere_costs_only_itself(tmp_path, monkeypatch, bad, where):
    monkeypatch.setattr(reading, "CHUNK", 5)  # chunks of 5 lines: the bad one at their edges too
    lines = [json.dumps({"t": "api", "c": i}) for i in range(23)]
    lines.insert(where, bad)
    text = "\n".join(lines) + "\n"
    path = tmp_path / "trace-1.jsonl"
    path.write_text(text)
    assert list(jsonl_records(path)) == _each_line(text)
    assert len(_each_line(text)) == 23 + (bad == '{"n":"x\u2028y"}')


def test_a_file_cut_in_its_last_line_keeps_every_line_before(tmp_path):
    path = tmp_path / "trace-1.jsonl"
    path.write_text("".join(json.dumps({"c": i}) + "\n" for i in range(10)) + '{"c": 10, "st"')
    assert [r["c"] for r in jsonl_records(path)] == list(range(10))


def test_a_name_holding_a_line_separator_keeps_its_record(tmp_path):
    """U+2028 and U+0085 are legal in JSON strings (an NVTX range's name, a path): they do
    not end a record's line."""
    path = tmp_path / "trace-1.jsonl"
    path.write_text('{"t":"nvtx","n":"a\u2028b\u0085c"}\n{"t":"end"}\n', encoding="utf-8")
    assert [r["t"] for r in jsonl_records(path)] == ["nvtx", "end"]


def test_the_drivers_callbacks_turned_off_are_kept_with_their_process(tmp_path):
    lines = [{"t": "start", "pid": 7, "ts": 100}, {"t": "driver_off", "ts": 250},
             {"t": "end", "ts": 900}]  # fmt: skip
    (tmp_path / "trace-7.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (tmp_path / "trace-8.jsonl").write_text(json.dumps({"t": "start", "pid": 8, "ts": 1}) + "\n")
    trace = reading.read_trace(sorted(tmp_path.glob("trace-*.jsonl")))
    off = {p["pid"]: p.get("driver_calls_off_ns") for p in trace.processes}
    assert off == {7: 250, 8: None}


def test_copies_past_the_drivers_callbacks_with_no_call_are_said_once(tmp_path):
    def copy(c: int, st: int) -> dict:
        return {"t": "memcpy", "k": 1, "s": 2, "d": 3, "b": 64, "st": st, "en": st + 5, "c": c}

    api = {"t": "api", "rt": 1, "f": "cudaMemcpyAsync", "st": 290, "en": 299, "tid": 7, "c": 3}
    lines = [{"t": "start", "pid": 7, "ts": 100}, copy(1, 200), {"t": "driver_off", "ts": 250},
             copy(2, 300), api, copy(3, 301), copy(4, 400), {"t": "end", "ts": 900}]  # fmt: skip
    (tmp_path / "trace-7.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    trace = reading.read_trace([tmp_path / "trace-7.jsonl"])
    said = [w for w in trace.warnings if "through the driver itself" in w]
    assert len(said) == 1 and "process 7: 2 copies" in said[0] and "keepdriver" in said[0]
    (tmp_path / "trace-7.jsonl").write_text(
        "".join(json.dumps(x) + "\n" for x in lines if x.get("t") != "driver_off")
    )
    assert not reading.read_trace([tmp_path / "trace-7.jsonl"]).warnings


def test_copies_of_a_correlation_id_many_calls_had_are_matched_to_none(tmp_path):
    """CUPTI's ids stuck at one call's (a driver callback turned off inside a call): every later
    call and copy shares it, and a copy matched by it would take the last such call's line."""

    def api(c: int, st: int, line: int) -> dict:
        return {"t": "api", "rt": 1, "f": "cudaMemcpyAsync", "st": st, "en": st + 9, "tid": 7,
                "c": c, "src": 1, "dst": 2, "at": [line]}  # fmt: skip

    def copy(c: int, st: int) -> dict:
        return {"t": "memcpy", "k": 1, "s": 2, "d": 3, "b": 64, "st": st, "en": st + 5, "c": c}

    lines = [{"t": "start", "pid": 7, "ts": 100}, api(4, 200, 11), copy(4, 210),
             api(5, 300, 12), copy(5, 310), api(5, 400, 13), copy(5, 410),
             {"t": "end", "ts": 900}]  # fmt: skip
    (tmp_path / "trace-7.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    trace = reading.read_trace([tmp_path / "trace-7.jsonl"])
    by_start = {c.start_ns: c for c in trace.copies}
    assert by_start[210].call is not None and by_start[210].frames == (11,)
    # a copy's call is its process's recorded call itself: its pid places it in the steps
    assert by_start[210].call.pid == 7 and any(by_start[210].call is c for c in trace.calls)
    assert by_start[310].call is None and by_start[410].call is None
    assert by_start[310].frames == () and by_start[410].frames == ()
    (said,) = trace.warnings
    assert said.startswith("process 7: CUPTI gave 1 correlation id(s) to more than one call")
    assert "2 copies have no call or line" in said
    assert "went on" not in said
    # a runtime call that went on while the driver's callbacks were being turned off is named
    lines.insert(-1, {"t": "driver_off", "ts": 350, "took": 2_500_000, "held": 3, "went_on": 1})
    (tmp_path / "trace-7.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (said,) = reading.read_trace([tmp_path / "trace-7.jsonl"]).warnings
    assert said.endswith("(1 went on while they were turned off, in 2.5 ms)")


def _process(pid: int = 7) -> list[dict]:
    """One process's records of each kind the reader reads, all whole."""
    return [
        {
            "t": "start",
            "pid": pid,
            "ppid": 1,
            "ts": 100,
            "age": 10,
            "kernels": "sampled",
            "on_ms": 200,
            "period_ms": 2000,
            "first_ms": 30000,
            "first_kernels": 20000,
        },
        {"t": "kwin", "a": 150},
        {"t": "pystack", "id": 1, "f": [["train.py", 12, "step"]]},
        {
            "t": "api",
            "rt": 1,
            "f": "cudaMemcpyAsync",
            "st": 200,
            "en": 209,
            "tid": pid,
            "c": 4,
            "src": 1,
            "dst": 2,
            "h": 99,
            "at": [11],
            "py": 1,
        },
        {"t": "memcpy", "k": 1, "s": 2, "d": 3, "b": 64, "st": 210, "en": 215, "c": 4},
        {"t": "kernel", "n": "k", "st": 220, "en": 230, "dev": 0, "str": 7},
        {"t": "memset", "b": 8, "st": 231, "en": 232, "dev": 0, "str": 7},
        {"t": "api", "rt": 1, "f": "cudaHostAlloc", "st": 240, "en": 249, "tid": pid, "c": 5},
        {"t": "pin", "how": "alloc", "f": "cudaHostAlloc", "p": 4096, "b": 4, "c": 5, "py": 1},
        {"t": "nvtx", "id": 3, "a": 250, "n": "step", "tid": pid},
        {"t": "nvtx", "id": 3, "b": 260},
        {"t": "kwin", "b": 300},
        {"t": "cost", "callbacks": [3, 1500]},
        {"t": "end", "ts": 900},
    ]


# (the record's index in _process, the field, what it is made): a field missing (None) or of
# the wrong kind, in each kind of record the reader keeps
DAMAGES = [
    (0, "pid", "x"),
    (2, "f", 5),
    (3, "st", None),
    (3, "at", [1, "a"]),
    (3, "tid", "main"),
    (4, "b", "many"),
    (4, "c", None),
    (5, "dev", None),
    (6, "en", [1]),
    (8, "p", None),
    (9, "id", None),
    (9, "a", {"x": 1}),
    (11, "b", "late"),
    (12, "callbacks", 4),
    (13, "ts", "soon"),
]


@pytest.mark.parametrize(("index", "field", "made"), DAMAGES)
def test_a_damaged_record_is_left_out_counted_and_the_rest_read(tmp_path, index, field, made):
    records = _process()
    if made is None:
        del records[index][field]
    else:
        records[index][field] = made
    path = tmp_path / "trace-7.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    trace = reading.read_trace([path])
    (said,) = [w for w in trace.warnings if "damaged" in w]
    assert said.startswith("trace-7.jsonl: 1 damaged record(s) left out")
    whole = reading.read_trace([_written(tmp_path / "whole" / "trace-7.jsonl", _process())])
    assert not whole.warnings
    # what the record was, left out alone (a damaged copy call's copy stays, with no call)
    kind = {3: "calls", 4: "copies", 5: "intervals", 6: "intervals", 8: "pins"}.get(index)
    for name in ("copies", "intervals", "pins", "calls"):
        assert len(getattr(whole, name)) - len(getattr(trace, name)) == (name == kind)
    assert trace.processes[0]["pid"] == 7  # a damaged start: the pid from the file's name


def _written(path, records: list[dict]):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_junk_amid_the_records_is_counted_but_a_last_line_cut_short_is_not(tmp_path):
    lines = [json.dumps(r) for r in _process()]
    lines.insert(5, "\0\0 not a record")
    path = tmp_path / "trace-7.jsonl"
    path.write_text("\n".join(lines) + "\n" + '{"t":"kernel","st":1')
    trace = reading.read_trace([path])
    assert [w for w in trace.warnings if "damaged" in w] == [
        "trace-7.jsonl: 1 damaged record(s) left out (not JSON, or a field missing or of the "
        "wrong kind): the figures may be short of them"
    ]
    assert len(trace.copies) == 1 and len(trace.intervals) == 2
