"""What a kernel-recording setting would have cost the trace corpus's judgement, without a GPU:
the kept records of a trace-corpus run (trace_corpus.py --records, traced while every kernel of
the program's first 30 s was recorded) copied with only the kernels a setting ON/PERIOD/FIRST
[/COUNT] would have recorded, then judged by this checkout's analysis as trace_corpus.py --judge
judges them. The windows open as the injection library's sampler opens them (engine/src/trace/
inject.cpp): the first at the first copy call the trace recorded its window opening at, open
FIRST ms or until it holds COUNT kernels, each next at the first copy call PERIOD - ON ms after
the one before closed, open ON ms. A kernel is kept where it started inside a window (a kernel
launched late in one and run after it closed is left out: the judgement here is a little harsher
than a trace's, and a window is cut exactly at COUNT where CUPTI, delivering a buffer at a time,
lets some thousand more in). Copy calls alone open windows here, pinning calls too in a trace.
Used to choose runner.FIRST_KERNELS (docs/trace.md).

    python3 benchmarks/trace_corpus_windows.py --judge RESULT.json --records DIR
        --kernels 200/2000/30000/20000 [--kernels 200/2000/30000/10000 ...] [--judged PATH]

With several settings, the traces as recorded are judged too, and a table compares them.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trace_corpus import is_record, judge

NS_PER_MS = 1_000_000


def recorded(records: list[dict], end: int) -> list[tuple[int, int]]:
    """The windows [a, b) the records' kernels were recorded in (one left open: to `end`)."""
    out: list[tuple[int, int]] = []
    opened: int | None = None
    for r in records:
        if r.get("t") == "kwin" and "a" in r:
            opened = int(r["a"])
        elif r.get("t") == "kwin" and "b" in r and opened is not None:
            out.append((opened, int(r["b"])))
            opened = None
    return out + ([(opened, end)] if opened is not None else [])


def windows(records: list[dict], on: int, period: int, first: int, count: int) -> list[tuple]:
    """The windows [a, b) in CUPTI's clock a process's records would have had, inside those its
    kernels were recorded in (a window beyond them would claim kernels nobody recorded)."""
    end = max((int(r["ts"]) for r in records if r.get("t") == "end"), default=2**63)
    kept = recorded(records, end)
    if not kept:
        return []
    copies = sorted(int(r["st"]) for r in records if r.get("t") == "api" and "src" in r)
    kernels = sorted(int(r["st"]) for r in records if r.get("t") == "kernel")
    found: list[tuple[int, int]] = []
    a: int | None = kept[0][0]
    while a is not None and a < end:
        b = a + (first if not found and first else on)
        if not found and count:
            inside = [k for k in kernels if k >= a]
            if len(inside) > count:
                b = min(b, inside[count])
        found.append((a, min(b, end)))
        a = next((c for c in copies if c >= b + period - on), None)
    return [(max(a, x), min(b, y)) for a, b in found for x, y in kept if max(a, x) < min(b, y)]


def rewindow(path: Path, on: int, period: int, first: int, count: int) -> tuple[int, int]:
    """`path` (one process's trace-*.jsonl) rewritten in place: its kernels outside the
    setting's windows dropped, the kernel totals and the windows' lines made to match. Returns
    the windows and the kernels dropped."""
    lines = path.read_text().split("\n")  # lines end at "\n" alone (reading.jsonl_records)
    if lines and not lines[-1]:
        lines.pop()
    parsed: list[dict | None] = []
    for text in lines:
        try:
            parsed.append(json.loads(text))
        except ValueError:  # a line cut short by a crash stays as it was
            parsed.append(None)
    records = [r for r in parsed if r is not None]
    start = next((r for r in records if r.get("t") == "start"), None)
    if start is None or start.get("kernels") != "sampled":
        return 0, 0
    found = windows(records, on, period, first, count)
    if not found:
        return 0, 0
    dropped = [r for r in records if r.get("t") == "kernel"
               and not any(a <= int(r["st"]) < b for a, b in found)]  # fmt: skip
    gone = {id(r) for r in dropped}
    gone_ns = sum(int(r["en"]) - int(r["st"]) for r in dropped)
    out: list[str] = []
    for text, r in zip(lines, parsed, strict=True):
        if r is None:
            out.append(text)
        elif r.get("t") == "kwin" or id(r) in gone:
            continue
        elif r.get("t") == "start":
            r |= {"on_ms": on // NS_PER_MS, "period_ms": period // NS_PER_MS,
                  "first_ms": first // NS_PER_MS, "first_kernels": count}  # fmt: skip
            out.append(json.dumps(r, separators=(",", ":")))
            for a, b in found:
                out.append(json.dumps({"t": "kwin", "a": a}, separators=(",", ":")))
                out.append(json.dumps({"t": "kwin", "b": b}, separators=(",", ":")))
        elif r.get("t") == "totals" and r.get("of") == "kernel":
            r |= {"records": r["records"] - len(dropped), "written": r["written"] - len(dropped),
                  "ns": r["ns"] - gone_ns}  # fmt: skip
            out.append(json.dumps(r, separators=(",", ":")))
        else:
            out.append(text)
    path.write_text("\n".join(out) + "\n")
    return len(found), len(dropped)


def setting(value: str) -> tuple[int, int, int, int]:
    """ON/PERIOD/FIRST[/COUNT] as nanoseconds (and a count)."""
    parts = value.split("/")
    if not 3 <= len(parts) <= 4 or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"'{value}' is not ON/PERIOD/FIRST[/COUNT]")
    on, period, first = (int(p) * NS_PER_MS for p in parts[:3])
    if not 0 < on < period:
        raise argparse.ArgumentTypeError(f"'{value}': ON must be above 0 and below PERIOD")
    if len(parts) == 4 and not first:
        raise argparse.ArgumentTypeError(f"'{value}': ON/PERIOD/0/COUNT: COUNT ends a FIRST")
    return on, period, first, int(parts[3]) if len(parts) == 4 else 0


FIGURES = ("headline_right", "steps_right", "prediction_error_max", "idle_share_error_max")


def judged(record: Path, records: Path, kernels: tuple[int, int, int, int] | None,
           out: Path) -> dict:  # fmt: skip
    """The record's programs judged from a copy of their kept traces with only the kernels
    `kernels` would have recorded (None: as recorded), written to `out`; its figures."""
    copy = Path(tempfile.mkdtemp(prefix="xfs-windows-")) / "records"
    try:
        shutil.copytree(records, copy)
        for path in sorted(copy.rglob("trace-*.jsonl")) if kernels else ():
            opened, dropped = rewindow(path, *kernels)
            print(f"{path.relative_to(copy)}: {opened} windows, {dropped} kernels left out")
        with contextlib.redirect_stdout(io.StringIO()):
            judge(record, copy, out)
    finally:
        shutil.rmtree(copy.parent, ignore_errors=True)
    figures: dict = json.loads(out.read_text())["figures"]
    return figures


def table(rows: dict[str, dict]) -> str:
    """Each setting's figures, and each program's prediction error, one line a setting."""
    names = sorted({n for f in rows.values() for n in f.get("judged", {})})
    lines = ["setting  " + "  ".join(FIGURES) + "  | prediction error: " + " ".join(names)]
    for label, f in rows.items():
        mine = [f"{f.get('trace_corpus_' + k, float('nan')):.3f}" for k in FIGURES]
        errors = [f.get("judged", {}).get(n, {}).get("prediction_error") for n in names]
        lines.append(f"{label}  " + "  ".join(mine) + "  | " + " ".join(
            "-" if e is None else f"{e:.3f}" for e in errors))  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--judge", required=True, help="the trace-corpus record the traces made")
    parser.add_argument("--records", required=True, help="its kept traces")
    parser.add_argument("--kernels", required=True, action="append",
                        help="ON/PERIOD/FIRST[/COUNT]; several are compared, with the traces "
                        "as recorded")  # fmt: skip
    parser.add_argument(
        "--judged", default=None, help="where to write the judged record (several: a directory)"
    )
    args = parser.parse_args()
    try:
        settings = [(value, setting(value)) for value in args.kernels]
    except argparse.ArgumentTypeError as exc:
        parser.error(f"--kernels: {exc}")
    record, records = Path(args.judge), Path(args.records)
    if not is_record(record):
        parser.error(f"--judge: {record} is not a trace-corpus record file")
    if not records.is_dir():
        parser.error(f"--records: {records} is not a directory of kept traces")
    several = len(settings) > 1
    out = Path(args.judged or tempfile.mkdtemp(prefix="xfs-windows-judged-"))
    if several and out.exists() and not out.is_dir():
        parser.error(f"--judged: {out} is not a directory; several settings are written into one")
    if not several and out.exists() and not out.is_file() and args.judged is not None:
        parser.error(f"--judged: {out} is not a file to write; one setting is written to a file")
    if several or args.judged is None:
        out.mkdir(parents=True, exist_ok=True)
    rows = (
        {"recorded": judged(record, records, None, out / "judged-recorded.json")} if several else {}
    )
    for label, kernels in settings:
        target = out / f"judged-{label.replace('/', '_')}.json" if out.is_dir() else out
        rows[label] = judged(record, records, kernels, target)
    print(table(rows))
    print(f"wrote the judged records in {out}")


if __name__ == "__main__":
    main()
