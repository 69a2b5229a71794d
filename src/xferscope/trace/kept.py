"""A traced run's raw records kept (`xferscope trace --records DIR`) and read back
(`--replay DIR`): the injection library's JSON lines (one file per traced process), the looks at
each Python main thread, and `ran.json`, how the run ended. A kept directory is analyzed again
by a later xferscope exactly as the run was, so a trace can be shared, kept as evidence, or
judged anew after the analysis changes:

    DIR/run1/trace-<pid>.jsonl, DIR/run1/pysamples-<pid>.jsonl, DIR/run1/ran.json, DIR/run2/...

Beside them, what a replay elsewhere or later could not read as it was: the native callers'
names (frames.json) and the program's lines' source text (sources.json), as they stood when
the run ended.
"""

from __future__ import annotations

import json
import linecache
import shutil
import signal
from pathlib import Path
from typing import Any

from ..core.errors import OptionError
from .records import Trace
from .reference import Reference, from_dict
from .runner import Ran, records_of

RAN = "ran.json"  # how the run ended: command, returncode, wall_s, started_ns
RATES = "reference.json"  # this machine's rates that priced the trace (reference.to_dict)
FRAMES = "frames.json"  # each native return address named where the program ran
SOURCES = "sources.json"  # the text of each of the program's lines the records name
MOST_LINES = 1_000_000  # a kept line's number at most (a larger one is of a damaged file)


def kept_json(path: Path) -> Any:
    """A kept file's JSON; ValueError where it is no regular file (a FIFO would never end its
    reading) or not JSON, OSError where it cannot be read."""
    if not path.is_file():
        raise ValueError(f"'{path}' is not a file")
    return json.loads(path.read_text(encoding="utf-8"))


def keep(ran: Ran, directory: Path, run: int) -> None:
    """Copies run `run`'s records to DIRECTORY/run<run>/ with its ran.json."""
    into = directory / f"run{run}"
    into.mkdir(parents=True, exist_ok=True)
    for path in (*ran.files, *ran.samples):
        shutil.copy2(path, into / path.name)
    facts = {
        "command": list(ran.command),
        "returncode": ran.returncode,
        "wall_s": ran.wall_s,
        "interrupted": ran.interrupted,
        "stop_signal": ran.stop_signal,
        "started_ns": ran.started_ns,
    }
    (into / RAN).write_text(json.dumps(facts) + "\n", encoding="utf-8")


def keep_rates(rates: dict[str, Any] | None, directory: Path) -> None:
    """Keeps the rates that priced the kept runs, so a replay prices them alike."""
    if rates is not None:
        (directory / RATES).write_text(json.dumps(rates) + "\n", encoding="utf-8")


def kept_rates(directory: Path) -> Reference | None:
    """The rates kept beside the runs, or None where none were (or they cannot be read)."""
    try:
        return from_dict(kept_json(directory / RATES))
    except (OSError, ValueError):
        return None


def keep_frames(frames: dict[int, str], directory: Path, run: int) -> None:
    """Keeps the native callers as they were named where the program ran (its binary and
    libraries, which a replay elsewhere may not have)."""
    into = directory / f"run{run}"
    if into.is_dir():
        (into / FRAMES).write_text(json.dumps({str(a): n for a, n in frames.items()}) + "\n",
                                   encoding="utf-8")  # fmt: skip


def kept_frames(ran: Ran) -> dict[int, str]:
    """The native callers kept beside a run's records (keep_frames), or none."""
    if not ran.files:
        return {}
    try:
        named = kept_json(ran.files[0].parent / FRAMES)
        return {int(a): str(n) for a, n in named.items()}
    except (OSError, ValueError, AttributeError):
        return {}


def keep_sources(trace: Trace, directory: Path, run: int) -> None:
    """Keeps the source text of every line of the program's own code (not a library's) that
    the run's Python stacks and looks name, read as the files stand now, so that a replay
    after the program changed, or where it is not, quotes the lines that ran."""
    into = directory / f"run{run}"
    if not into.is_dir():
        return
    stacks = [c.python for c in trace.calls] + [c.python for c in trace.copies]
    stacks += [p.python for p in trace.pins]
    stacks += [s for looks in trace.samples.values() for s in looks.stacks]
    unique = {id(s): s for s in stacks}.values()  # a stack's records share its one tuple
    lines: dict[str, dict[str, str]] = {}
    for frame in {f for stack in unique for f in stack if not f.is_library}:
        if text := linecache.getline(frame.file, frame.line).rstrip("\n"):
            lines.setdefault(frame.file, {})[str(frame.line)] = text
    (into / SOURCES).write_text(json.dumps(lines) + "\n", encoding="utf-8")


def use_kept_sources(ran: Ran) -> int:
    """Makes the source text kept beside a run's records (keep_sources) what its lines read
    as in this process (linecache), over the files as they stand now; the files so read."""
    if not ran.files:
        return 0
    try:
        kept = kept_json(ran.files[0].parent / SOURCES)
        texts = {str(f): {int(n): str(t) for n, t in lines.items()} for f, lines in kept.items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return 0
    for file, by_line in texts.items():
        numbers = [n for n in by_line if 1 <= n <= MOST_LINES]  # a damaged number: left out
        lines = [""] * max(numbers, default=0)
        for n in numbers:
            lines[n - 1] = by_line[n] + "\n"
        # no modification time: linecache.checkcache keeps the entry, never reads the file
        linecache.cache[file] = (sum(map(len, lines)), None, lines, file)
    return len(texts)


def check_records(directory: Path) -> None:
    """Refuses a --records directory that cannot be written, before the program runs."""
    if directory.exists() and not directory.is_dir():
        raise OptionError("--records", f"'{directory}' is not a directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OptionError("--records", f"cannot make '{directory}': {exc.strerror}") from None
    if any(directory.glob("run*/" + RAN)):
        raise OptionError(
            "--records", f"'{directory}' already holds kept runs: name an empty or new directory"
        )


def read_kept(directory: Path) -> list[Ran]:
    """The runs kept in `directory`, in order; OptionError (--replay) where there are none."""
    if not directory.is_dir():
        raise OptionError("--replay", f"'{directory}' is not a directory")
    runs = []
    for sub in sorted(directory.glob("run*"), key=lambda p: (len(p.name), p.name)):
        facts_path = sub / RAN
        if not facts_path.is_file():
            continue
        # regular files only: a FIFO or a directory under a record's name is none of them
        files, samples = (tuple(p for p in found if p.is_file()) for found in records_of(sub))
        try:
            facts = kept_json(facts_path)
            ran = Ran(
                tuple(str(a) for a in facts["command"]),
                int(facts["returncode"]),
                float(facts["wall_s"]),
                files,
                # kept before the signal was kept: a stop said as true was a Ctrl-C
                int(facts.get("stop_signal", signal.SIGINT if facts.get("interrupted") else 0)),
                samples,
                int(facts.get("started_ns", 0)),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise OptionError("--replay", f"'{facts_path}' is not a kept run: {exc}") from None
        runs.append(ran)
    if not runs:
        raise OptionError(
            "--replay", f"'{directory}' holds no kept run (made by `xferscope trace --records`)"
        )
    return runs
