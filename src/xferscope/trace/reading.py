"""Reading what the injection library wrote (engine/src/trace/, one JSON-lines file per traced
process) into a Trace (records.py): copies matched to the calls that issued them, kernels and
memsets, pinned memory, Python stacks and native callers named, the library's exact totals."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from .records import (
    COPY_KINDS,
    MEMORY_KINDS,
    Call,
    Copy,
    Interval,
    Pin,
    PyFrame,
    Range,
    Trace,
)
from .symbols import symbolize

CHUNK = 4096  # records parsed at once (jsonl_records)
# What reading a record whose fields are missing or of the wrong kind raises: such a record is
# left out and counted (damaged), never the end of the reading
DAMAGED = (KeyError, ValueError, TypeError, IndexError, AttributeError)
LEFT_OUT = "left out (not JSON, or a field missing or of the wrong kind)"  # said of them
KEPT = object()  # an optional field: absent, it stays absent
# The fields of records kept to be used after the file's end or by other modules (a pin's
# stacks, a process's start), each as (name, its type, its default: None when required, or
# KEPT), so that a damaged one is found when it is read, not when it is used. The many copies
# and calls are checked as they are made into Copy and Call, at no cost to whole ones.
FIELDS: dict[str, tuple[tuple[str, type, Any], ...]] = {
    "pin": (
        ("how", str, None),
        ("f", str, None),
        ("p", int, None),
        ("b", int, None),
        ("c", int, None),
        ("py", int, 0),
        ("at", tuple, ()),
    ),
    "nvtx": (
        ("id", int, None),
        ("a", int, KEPT),
        ("b", int, KEPT),
        ("tid", int, 0),
        ("n", str, ""),
        ("dom", str, ""),
    ),
    "start": (
        ("pid", int, None),
        ("ppid", int, KEPT),
        ("ts", int, KEPT),
        ("age", int, KEPT),
        ("kernels", str, "all"),
        ("on_ms", int, KEPT),
        ("period_ms", int, KEPT),
        ("first_ms", int, 0),
        ("first_kernels", int, 0),
    ),
    "end": (("ts", int, KEPT),),
    "driver_off": (("ts", int, KEPT), ("took", int, 0), ("went_on", int, 0)),
}


def _went_on(went_on: list[int] | None) -> str:
    """The runtime calls that went on while the driver's callbacks were turned off, said."""
    if not went_on or not went_on[0]:
        return ""
    return f" ({went_on[0]} went on while they were turned off, in {went_on[1] / 1e6:.1f} ms)"


def _ints(value: Any) -> tuple[int, ...]:
    return tuple(int(v) for v in value)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(value)
    return value


MAKE: dict[type, Any] = {int: int, str: _text, tuple: _ints}  # a field made of its type


def typed(record: dict[str, Any]) -> dict[str, Any]:
    """`record`, its fields FIELDS names for its kind made of their types (a caller's address
    list: a tuple of ints); raises one of DAMAGED where one is missing or will not convert."""
    for name, kind, default in FIELDS[record["t"]]:
        value = record.get(name, default)
        if value is KEPT:
            continue
        if value is None:
            raise KeyError(name)
        record[name] = value if type(value) is kind else MAKE[kind](value)
    return record


def jsonl_records(path: Path, unread: list[int] | None = None) -> Iterator[dict[str, Any]]:
    """A records file's objects, one a line; a line cut short (the process killed) or not an
    object skipped, and counted in `unread` (its one item) unless it is the file's last line.
    Read CHUNK lines at a time as one JSON array where each of them is whole (0.15 s for 90,000
    records where a parse a line took 0.22: it is read after a Ctrl-C too), else a line at a
    time."""
    # lines end at "\n" alone: a name the program gave may hold U+2028 or a lone "\r"
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = [t for t in text.split("\n") if t.strip()]
    for at in range(0, len(lines), CHUNK):
        chunk = lines[at : at + CHUNK]
        try:
            records = json.loads("[" + ",".join(chunk) + "]")
        except ValueError:
            records = []
        if len(records) != len(chunk) or not all(isinstance(r, dict) for r in records):
            records = []  # a line cut short, or one that is not one object: a line at a time
            for index, line in enumerate(chunk, at):
                try:
                    records.append(json.loads(line))
                except ValueError:
                    if unread is not None and index < len(lines) - 1:
                        unread[0] += 1
                    continue
        yield from (r for r in records if isinstance(r, dict))


def py_stack(record: dict[str, Any]) -> tuple[PyFrame, ...]:
    """A "pystack" record's frames, innermost first."""
    return tuple(PyFrame(str(f[0]), int(f[1]), str(f[2])) for f in record.get("f", ()))


def read_trace(files: Iterable[Path]) -> Trace:
    """The records of every traced process's file; a line cut short by a crash is skipped."""
    copies: list[Copy] = []
    intervals: list[Interval] = []
    pins: list[Pin] = []
    calls: list[Call] = []
    totals: dict[str, dict[str, int]] = {}
    frames: dict[int, str] = {}
    processes: list[dict[str, Any]] = []
    warnings: list[str] = []
    raw_frames: dict[int, tuple[str, int, str]] = {}
    windows: list[tuple[int, int, int]] = []
    ranges: list[Range] = []
    dropped = 0
    for path in sorted(files):
        # the process's pid, from its start record, else from the file's name (trace-PID.jsonl)
        named = path.stem.rpartition("-")[2]
        pid = int(named) if named.isdigit() else 0
        raw_copies: list[dict[str, Any]] = []
        api: dict[tuple[int, int], dict[str, Any]] = {}  # (runtime?, correlation) -> record
        call_info: dict[int, dict[str, Any]] = {}  # a copy call's correlation -> its api record
        raw_calls: list[dict[str, Any]] = []  # every api record, made Calls once stacks are read
        pin_records: list[dict[str, Any]] = []
        stacks: dict[int, tuple[PyFrame, ...]] = {}  # this process's Python stacks, by id
        process: dict[str, Any] = {"file": path.name} | ({"pid": pid} if pid else {})
        opened: int | None = None  # a kernel window's start, while it is open
        pushed: dict[int, dict[str, Any]] = {}  # NVTX ranges begun, by id
        repeated: set[int] = set()  # correlation ids more than one call had: no copy's own
        ended: dict[int, int] = {}  # and their ends
        damaged = 0  # records with a field missing or of the wrong kind: left out
        unread = [0]  # lines not JSON, but the last (cut short when the process was killed)
        for r in jsonl_records(path, unread):
            try:
                t = r.get("t")
                if t in FIELDS:
                    r = typed(r)
                if t == "start":
                    pid = int(r["pid"])
                    process |= {"pid": pid, "ppid": r.get("ppid"), "start_ns": r.get("ts")}
                    if r.get("age") and r.get("ts"):  # the process's own start (0: not known)
                        process["began_ns"] = int(r["ts"]) - int(r["age"])
                    process["kernels"] = str(r.get("kernels", "all"))
                    if process["kernels"] == "sampled":
                        process["kernel_window_ms"] = [r.get("on_ms"), r.get("period_ms"),
                                                       r.get("first_ms", 0)]  # fmt: skip
                        process["first_kernels"] = int(r.get("first_kernels") or 0)
                elif t == "end":
                    process["end_ns"] = r.get("ts")
                elif t == "kwin":
                    if "a" in r:
                        opened = int(r["a"])
                    elif opened is not None:
                        windows.append((pid, opened, int(r["b"])))
                        opened = None
                elif t == "driver_off":  # from then on, only the runtime's calls are recorded
                    process["driver_calls_off_ns"] = r.get("ts")
                    # runtime calls that went on, held too long, while they were turned off
                    process["driver_off_went_on"] = [r["went_on"], r["took"]]
                elif t == "cost":  # the tracing's own time on the program's threads: [count, ns]
                    process["cost"] = {k: [int(v[0]), int(v[1])] for k, v in r.items() if k != "t"}
                elif t == "memcpy":
                    raw_copies.append(r)
                elif t in ("memset", "kernel"):
                    intervals.append(
                        Interval(
                            pid,
                            t,
                            str(r["n"]) if t == "kernel" else "memset",
                            int(r["st"]),
                            int(r["en"]),
                            int(r["dev"]),
                            int(r["str"]),
                            int(r.get("b", 0)),  # a memset's bytes; a kernel has none
                        )
                    )
                elif t == "api":
                    if (int(r["rt"]), int(r["c"])) in api:
                        repeated.add(int(r["c"]))
                    api[(int(r["rt"]), int(r["c"]))] = r
                    if "src" in r:  # a copy call's pointers, content hash and callers
                        call_info[int(r["c"])] = r
                    raw_calls.append(r)
                elif t == "pin":
                    pin_records.append(r)
                elif t == "totals":
                    entry = totals.setdefault(
                        str(r["of"]), {"records": 0, "written": 0, "b": 0, "ns": 0}
                    )
                    for key in entry:
                        entry[key] += int(r.get(key, 0))
                elif t == "frame":
                    raw_frames[int(r["a"])] = (
                        str(r["obj"]),
                        int(r["off"]),
                        str(r.get("sym") or ""),
                    )
                elif t == "dropped":
                    dropped = max(dropped, int(r["n"]))
                elif t == "warning":
                    warnings.append(str(r.get("m")))
                elif t == "pystack":
                    stacks[int(r["id"])] = py_stack(r)
                elif t == "nvtx":
                    if "a" in r:
                        pushed[int(r["id"])] = r
                    elif "b" in r:
                        ended[int(r["id"])] = int(r["b"])
            except DAMAGED:
                damaged += 1
        for nid, began in pushed.items():  # a range with no end recorded is a mark
            start = int(began["a"])
            end = start if began.get("i") else ended.get(nid, start)
            ranges.append(Range(pid, str(began.get("n", "")), str(began.get("dom", "")), start,
                                max(end, start), int(began.get("tid", 0))))  # fmt: skip
        if opened is not None:  # left open: it lasted to the end of what was recorded
            windows.append((pid, opened, int(process.get("end_ns") or 2**63)))
        processes.append(process)
        made: dict[int, Call] = {}  # each record's Call, by the record: a copy's call is it
        for r in raw_calls:
            try:
                callers = _ints(r.get("at", ()))  # a copy's callers are its Copy's
                made[id(r)] = Call(
                    str(r["f"]),
                    int(r["st"]),
                    int(r["en"]),
                    int(r["tid"]),
                    pid,
                    () if "src" in r else callers,
                    () if "src" in r else stacks.get(int(r.get("py", 0)), ()),
                    int(r.get("o", 0)),
                )
            except DAMAGED:
                damaged += 1
        calls += made.values()
        off = process.get("driver_calls_off_ns")
        unnamed = 0  # copies past it that no recorded call issued: the driver's own, unseen
        unmatched = 0  # copies whose correlation id more than one call had
        for r in raw_copies:
            try:
                # the runtime call that issued it (CUPTI names it in runtimeCorrelationId, or
                # gives the runtime's id as the copy's own), else the driver call
                rc, c, start = int(r.get("rc", 0)), int(r["c"]), int(r["st"])
                a = (api.get((1, rc)) if rc else None) or api.get((1, c)) or api.get((0, c))
                info = (call_info.get(rc) if rc else None) or call_info.get(c, {})
                if (rc or c) in repeated:  # matched to no call rather than to another's
                    a, info = None, {}
                call = None if a is None else made.get(id(a))
                if call is None and a is not None:  # its call's record damaged: no call
                    a, info = None, {}
                copy = Copy(
                    pid,
                    COPY_KINDS.get(int(r["k"]), f"kind{r['k']}"),
                    MEMORY_KINDS.get(int(r["s"]), "unknown"),
                    MEMORY_KINDS.get(int(r["d"]), "unknown"),
                    int(r["b"]),
                    start,
                    int(r["en"]),
                    int(r.get("dev", -1)),
                    int(r.get("str", -1)),
                    bool(r.get("async")),
                    c,
                    call,
                    info.get("src"),
                    info.get("dst"),
                    info.get("h"),
                    _ints(info.get("at", ())),
                    stacks.get(int(info.get("py", 0)), ()),
                )
            except DAMAGED:
                damaged += 1
                continue
            copies.append(copy)
            if (rc or c) in repeated:
                unmatched += 1
            else:
                unnamed += a is None and off is not None and start > int(off)
        if unmatched:
            warnings.append(
                f"process {pid}: CUPTI gave {len(repeated)} correlation id(s) to more than one "
                f"call, so {unmatched} copies have no call or line (the steps and the waits "
                "they mark may be wrong): a driver callback turned off inside a call"
                + _went_on(process.get("driver_off_went_on"))
            )
        if unnamed:
            warnings.append(
                f"process {pid}: {unnamed} copies made through the driver itself have no line: "
                "its first driver calls all came from runtime calls, so the driver's were no "
                "longer recorded; XFERSCOPE_TRACE_KNOBS=keepdriver keeps them"
            )
        for r in pin_records:  # typed when read
            a = api.get((1 if r["f"].startswith("cuda") else 0, r["c"]))
            call = None if a is None else made.get(id(a))  # None: not recorded, or damaged
            pins.append(
                Pin(
                    pid,
                    r["how"],
                    r["f"],
                    r["p"],
                    r["b"],
                    None if call is None else (call.end_ns - call.start_ns) * 1e-9,
                    r["at"],
                    stacks.get(r["py"], ()),
                    0 if call is None else call.start_ns,
                )
            )
        if damaged or unread[0]:
            warnings.append(
                f"{path.name}: {damaged + unread[0]} damaged record(s) {LEFT_OUT}: the figures "
                "may be short of them"
            )
    frames = symbolize(raw_frames)
    copies.sort(key=lambda c: c.start_ns)
    intervals.sort(key=lambda i: i.start_ns)
    return Trace(
        tuple(copies),
        tuple(intervals),
        tuple(pins),
        tuple(sorted(calls, key=lambda c: c.start_ns)),
        totals,
        frames,
        tuple(processes),
        dropped,
        tuple(warnings),
        tuple(windows),
        ranges=tuple(sorted(ranges, key=lambda x: x.start_ns)),
    )
