"""What trace_corpus.py judges, from a corpus program's header and its kept traces: whether the
trace's headline is the program's cause, its step line the program's, its prediction the fix's
measured saving, its findings free of start-up and of advice for components the program does
not use, and its input share the resident form's. Runs anywhere xferscope is installed: the
traces are analyzed again from their raw records (`trace --replay`) by this checkout."""

from __future__ import annotations

import dataclasses
import re
import statistics
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spread import median_interval, round_savings
from xferscope.core.errors import OptionError
from xferscope.core.frameworks import FRAMEWORKS
from xferscope.trace.analyze import WORTH, analyze
from xferscope.trace.compare import compare_traces
from xferscope.trace.document import from_dict, to_dict
from xferscope.trace.kept import kept_rates, read_kept
from xferscope.trace.phases import steady
from xferscope.trace.pipeline import TraceOptions, trace_program
from xferscope.trace.reading import read_trace
from xferscope.trace.records import Trace
from xferscope.trace.samples import with_samples

HEADER = re.compile(r"^\s*(?:#|//)\s*(cause|fix|step|resident|gpus|needs):\s*(.*?)\s*$")
STEP = re.compile(r"(?:#|//) STEP\b")
COMMIT = re.compile(r"[0-9a-f]{4,40}")  # a record's commit: an abbreviated or whole hash
CAUSES = ("input_starved", "synchronizations", "pageable_copies", "small_copies",
          "repeated_uploads", "straggler", "none", "startup")  # fmt: skip
# what a finding's advice may name, and the words that name it; a program uses a component
# where its source matches the pattern
COMPONENTS = {
    "DataLoader": (("DataLoader", "num_workers", "persistent_workers", "prefetch_factor"),
                   r"\bDataLoader\b"),
    "CuPy": (("CuPy", "cupy"), r"\bimport cupy|\bfrom cupy"),
    "JAX": (("JAX", "jax."), r"\bimport jax|\bfrom jax"),
    "NCCL": (("NCCL", "DistributedDataParallel", "all-reduce"), r"torch\.distributed|nccl"),
    "DeviceLoader": (("DeviceLoader",), r"DeviceLoader"),
}  # fmt: skip
# a program that uses one of these is told in its words, never in CUDA's own calls
FRAMED = rf"^\s*(import|from) ({'|'.join(p for f in FRAMEWORKS for p in f.packages)})\b"
CUDA_CALL = r"\bcu(da)?[A-Z][A-Za-z]+\b"


@dataclass(frozen=True)
class Program:
    path: Path
    name: str
    cause: str
    fix: str
    steps: tuple[int, ...]  # the lines marked STEP
    resident: bool
    gpus: int
    needs: tuple[str, ...]
    nvtx: tuple[str, ...] = ()  # NVTX ranges that mark its steps too (`step: STEP nvtx=NAME`)


def is_program(path: Path) -> bool:
    """Whether a file of the corpus is a program (it has a header's cause), not a helper."""
    return any(HEADER.match(line) and "cause:" in line
               for line in path.read_text().splitlines()[:80])  # fmt: skip


def read_program(path: Path, commit: str | None = None) -> Program:
    """A corpus program's header (trace_corpus/README.md), and its STEP lines as the program
    stood at `commit` where git has it there (the commit its kept traces were made at: an edit
    since moves the lines they name), else as it is."""
    text = (as_at(path, commit) if commit else None) or path.read_text()
    said: dict[str, str] = {}
    for line in text.splitlines()[:80]:
        m = HEADER.match(line)
        if m and m[1] not in said:
            said[m[1]] = m[2]
    steps = tuple(i for i, line in enumerate(text.splitlines(), 1) if STEP.search(line))
    if said.get("cause") not in CAUSES or not steps:
        raise ValueError(f"{path.name}: its header needs a cause of {CAUSES} and STEP lines")
    needs = tuple(n for n in re.split(r"[,\s]+", said.get("needs", "")) if n and n != "none")
    nvtx = tuple(re.findall(r"nvtx=(\S+)", said.get("step", "")))
    return Program(path, path.stem, said["cause"], said.get("fix", ""), steps,
                   said.get("resident", "no").startswith("yes"), int(said.get("gpus", "1")),
                   needs, nvtx)  # fmt: skip


def as_at(path: Path, commit: str) -> str | None:
    """The file's text at `commit`, None where git cannot give it (no checkout, no such commit,
    the file not in it) or `commit` names no commit (a record edited by hand: only a hash is
    passed to git, never an option)."""
    if not COMMIT.fullmatch(commit):
        return None
    try:
        proc = subprocess.run(["git", "show", f"{commit}:./{path.name}"], cwd=path.parent,
                              capture_output=True, text=True, timeout=30)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 and proc.stdout else None


def changed_since(path: Path, commit: str) -> bool:
    """Whether the file's text differs from its text at `commit` (a file not in it differs),
    where git knows that commit; False where it does not: a GPU machine's copy of the tree,
    whose git may know only older commits, cannot tell. A round measured with such a copy's
    own HEAD named (older than its tree) had the judge read its programs' STEP lines as they
    stood at that commit: a program written since read as it is, one edited since not."""
    if not COMMIT.fullmatch(commit):
        return False
    try:
        known = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"],
                               cwd=path.parent, capture_output=True, timeout=30)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return False
    return known.returncode == 0 and as_at(path, commit) != path.read_text()


def replay(kept: Path) -> dict[str, Any]:
    """The trace document of the runs kept in `kept`, made by this checkout's analysis."""
    with tempfile.TemporaryDirectory() as scratch:
        traced = trace_program(TraceOptions(command=(), replay=kept), Path(scratch),
                               lambda: None)  # fmt: skip
    if traced.result is None:
        raise ValueError(f"{kept}: no CUDA activity")
    return to_dict(traced.result)


def whole(kept: Path) -> bool:
    """Whether every run kept in `kept` ended whole (kept.read_kept reads them as a replay
    does): a trace stopped by a signal (the call's time limit reached in it) or failed holds
    its start-up only, and is no trace to judge."""
    try:
        runs = read_kept(kept)
    except OptionError:  # none kept, or one damaged
        return False
    return all(not r.interrupted and r.returncode == 0 for r in runs)


def headline_of(summary: dict[str, Any]) -> dict[str, Any]:
    """The trace's first finding to act on, or {"code": "none"}."""
    said = summary.get("headline")
    if said is not None:
        return dict(said)
    steady = summary.get("span_s") or 0.0
    for f in summary.get("fixes", []):
        saving = f.get("saving_s")
        if saving is not None and steady and saving / steady >= WORTH:
            return {"code": f["code"], "saving_s": saving, "fix": f.get("fix", "")}
    return {"code": "none"}


def at_step_line(where: str | None, program: Program) -> bool:
    """Whether a place (`/path/prog.py:41 (fn)`, or a native one naming `prog.cu:41`) is one of
    the program's STEP lines."""
    if not where:
        return False
    if where.startswith("NVTX range ") and any(name in where for name in program.nvtx):
        return True
    return any(re.search(rf"\b{re.escape(program.path.name)}:{n}\b", where) for n in program.steps)


def first_marks(trace: Trace, program: Program) -> dict[int, int]:
    """Each process's first call at a STEP line (ns): where its steps begin."""
    marks: dict[int, int] = {}
    timed = [(c.call.start_ns, c.pid, trace.where(c.frames, c.python)) for c in trace.copies
             if c.call is not None]  # fmt: skip
    timed += [(c.start_ns, c.pid, trace.where(c.frames, c.python)) for c in trace.calls]
    for t, pid, where in sorted(timed, key=lambda x: x[0]):
        if pid not in marks and at_step_line(where, program):
            marks[pid] = t
    return marks


def after(trace: Trace, marks: dict[int, int]) -> Trace:
    """The trace with everything of each process before its first mark cut away (the cut the
    analysis makes to its steady state, phases.steady, left open at the end)."""
    return steady(trace, {pid: (mark, 2**63) for pid, mark in marks.items()})


STEPS_WITHIN = 0.1  # a trace's count of steps is right within this share of the program's


def counted_right(count: int | None, traced: dict[str, Any] | None) -> bool:
    """Whether the trace counted about as many steps as its traced run says it made (within
    STEPS_WITHIN; its warm-up steps, marked too, are a few); True where the run did not say."""
    made = (traced or {}).get("steps")
    if not made:
        return True
    return count is not None and abs(count - made) <= STEPS_WITHIN * made


def startup_charged(kept: Path, program: Program) -> float:
    """Seconds of the findings' costs that come from before the first step: the trace judged
    whole against the same trace with everything before each process's first step cut away."""
    ran = read_kept(kept)[0]
    trace = with_samples(read_trace(ran.files), ran.samples)
    reference = kept_rates(kept)
    marks = first_marks(trace, program)
    if not marks:
        return 0.0
    whole = analyze(trace, ran.wall_s, reference)
    cut = {f.code: f.cost_s for f in analyze(after(trace, marks), ran.wall_s, reference).findings}
    return sum(max(f.cost_s - cut.get(f.code, 0.0), 0.0) for f in whole.findings)


def foreign(summary: dict[str, Any], source: str) -> list[str]:
    """Findings whose advice names a component the program does not use: 'code: component';
    in a program written with a framework, CUDA's own calls (`cudaMallocHost`) count too: its
    user is told in the framework's words."""
    out = []
    framed = re.search(FRAMED, source, re.M)
    for f in summary.get("fixes", []):
        advice = " ".join([f.get("fix", ""), *(str(x[0]) for x in f.get("each_fix") or ())])
        for name, (words, used) in COMPONENTS.items():
            if any(w in advice for w in words) and not re.search(used, source):
                out.append(f"{f['code']}: {name}")
        if framed and (call := re.search(CUDA_CALL, advice)):
            out.append(f"{f['code']}: {call.group(0)} (CUDA's own words)")
    return out


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def step_s(run: dict[str, Any]) -> float:
    """A run's step: its steady steps' (those after the first, where the program reports them:
    a trace's steps start at the first step's mark, so neither counts a first batch's wait),
    else its loop's seconds over its steps."""
    if run.get("steady_steps"):
        return float(run["steady_s"]) / float(run["steady_steps"])
    return float(run["seconds"]) / float(run["steps"])


def traced_step(entry: dict[str, Any], key: str) -> float | None:
    """The step (step_s) of a program's traced run `key` (traced, traced_fixed,
    traced_resident), None where it has none."""
    run = entry.get(key) or {}
    return step_s(run) if run.get("seconds") else None


def prediction(entry: dict[str, Any], predicted: list[float]) -> dict[str, Any]:
    """The headline's price a step (`predicted`, one a traced round) against the fix's saving
    a step (step_s), the median of the rounds' own savings (`entry`: a program's record), with
    the error where the fix saved anything. Beside them, how far the rounds' savings spread
    (their least and most, and their median resampled), and the saving the fix made traced, by the
    programs' own clocks (the run the trace priced, and its fix traced too): a miss that holds
    against it is the pricing's, one that does not, the trace's cost on the program (on either
    run: a fix that moves reads after the loop, as jax_train's, pays for them traced inside its
    clock)."""
    runs = {k: [step_s(r) for r in entry["untraced"].get(k, [])] for k in ("before", "fixed")}
    # each round runs the program as it is and fixed back to back (the difference of the
    # medians beside it, unpaired)
    pairs = round_savings(runs["before"], runs["fixed"])
    measured = statistics.median(pairs)
    unpaired = statistics.median(runs["before"]) - statistics.median(runs["fixed"])
    out: dict[str, Any] = {
        "measured_saving_per_step_s": measured,
        "measured_saving_unpaired_per_step_s": unpaired,
        "predicted_saving_per_step_s": _median(predicted),
        "measured_saving_range_per_step_s": [min(pairs), max(pairs)],
        # the rounds' savings resampled: a price inside it is as right as the runs can tell
        "measured_saving_interval_per_step_s": median_interval(pairs),
    }
    # a fix whose saving the runs cannot tell from none leaves no cause to find: its program
    # judges no headline (an LSTM's waits inside a step its launches bound)
    out["cause_measured"] = out["measured_saving_interval_per_step_s"][0] > 0
    if predicted and unpaired > 0:
        out["prediction_error_unpaired"] = abs(statistics.median(predicted) - unpaired) / unpaired
    if predicted and measured > 0:
        out["prediction_error"] = abs(statistics.median(predicted) - measured) / measured
        lo, hi = out["measured_saving_interval_per_step_s"]
        out["prediction_within_spread"] = lo <= statistics.median(predicted) <= hi
    before, fixed = traced_step(entry, "traced"), traced_step(entry, "traced_fixed")
    if predicted and before is not None and fixed is not None and before > fixed:
        saved = before - fixed
        out["traced_saving_per_step_s"] = saved
        out["prediction_error_traced"] = abs(statistics.median(predicted) - saved) / saved
    return out


def input_share(entry: dict[str, Any], shares: list[float]) -> dict[str, Any]:
    """The steps' share waiting for input (`shares`, one a traced round) against 1 - resident
    / before from the untraced runs' medians (`entry`: a program's record), with its error;
    and the same against the traced run's own loop time: where the runs spread (an epoch's
    workers started anew), the untraced medians and the one traced run differ apart from
    anything the trace judged."""
    own = {k: _median([step_s(r) for r in entry["untraced"].get(k, [])])
           for k in ("resident", "before")}  # fmt: skip
    resident, before = own["resident"], own["before"]
    if resident is None or not before:
        return {}
    out: dict[str, Any] = {"expected_input_share": 1 - resident / before,
                           "input_share": _median(shares)}  # fmt: skip
    if shares:
        out["idle_share_error"] = abs(statistics.median(shares) - out["expected_input_share"])
    traced = traced_step(entry, "traced")
    if shares and traced:
        out["expected_input_share_traced"] = 1 - resident / traced
        out["idle_share_error_traced"] = abs(
            statistics.median(shares) - out["expected_input_share_traced"]
        )
        # both forms traced: the trace's cost on the step is in both, so what is left of the
        # error is the share's own
        if (resident_traced := traced_step(entry, "traced_resident")) is not None:
            alike = 1 - resident_traced / traced
            out["expected_input_share_both_traced"] = alike
            out["idle_share_error_both_traced"] = abs(statistics.median(shares) - alike)
    return out


def judge_program(program: Program, entry: dict[str, Any], records: Path) -> dict[str, Any]:
    """One program's verdicts from its untraced runs (`entry`) and its kept traces."""
    own = entry.get("untraced", {})
    seconds = {k: _median([r["seconds"] for r in v]) for k, v in own.items()}
    startup = {k: _median([r["startup_s"] for r in v]) for k, v in own.items()}
    steps_of = {k: _median([r["steps"] for r in v]) for k, v in own.items()}
    kept = sorted((records / program.name).glob("round*"))  # traced as it is
    rounds = [r for r in kept if whole(r)]
    if not rounds:
        cut = ", ".join(r.name for r in kept if list(r.glob("run*/ran.json")))
        why = f"its trace ended before the program did ({cut})" if cut else "no kept trace"
        return {"judged": False, "why": why}
    docs = [replay(r) for r in rounds]
    first = docs[0]["summary"]
    headline = headline_of(first)
    expected = "none" if program.cause == "startup" else program.cause
    right = headline["code"] == expected
    if program.cause == "startup":
        right = right and bool(first.get("startup"))
    out: dict[str, Any] = {
        "cause": program.cause,
        "headline": headline,
        "headline_right": right,
        "untraced_s": seconds,
        "startup_s": startup,
        "findings": [(f["code"], f.get("saving_s")) for f in first.get("fixes", [])],
        "startup": first.get("startup"),
        "steps": first.get("steps"),
        "steps_right": at_step_line((first.get("steps") or {}).get("where"), program)
        and counted_right((first.get("steps") or {}).get("count"), entry.get("traced")),
        "foreign_advice": foreign(first, program.path.read_text()),
        "startup_charged_s": startup_charged(rounds[0], program),
    }
    # the headline's prediction a step, over the traced rounds, against the fix's measured one
    if program.cause not in ("none", "startup") and seconds.get("fixed") and steps_of.get("before"):
        predicted = []
        for d in docs:
            s = d["summary"]
            said = headline_of(s)  # the headline's price, whatever its finding
            count = (s.get("steps") or {}).get("count")
            if said.get("saving_s") is not None and count:
                predicted.append(said["saving_s"] / count)
        out |= prediction(entry, predicted)
    if program.resident and seconds.get("resident") and seconds.get("before"):
        shares = [
            d["summary"]["steps"]["input_share"]
            for d in docs
            if (d["summary"].get("steps") or {}).get("input_share") is not None
        ]
        out |= input_share(entry, shares)
    fixed = records / program.name / "fixed"
    if whole(fixed):
        after_doc = replay(fixed)
        compared = compare_traces(from_dict(docs[0]), from_dict(after_doc), force=True)
        out["compare"] = {
            "paid": [dataclasses.asdict(p) for p in compared.paid],
            "program": {c.figure: c.verdict for c in compared.changes if c.section == "program"},
        }
        out["fixed_headline"] = headline_of(after_doc["summary"])
        gone = next((p for p in compared.paid if p.code == headline["code"]), None)
        if program.cause not in ("none", "startup"):  # its cause gone once fixed, and paid
            out["fix_gone"] = gone is not None and gone.status == "gone"
    return out


def judge_all(
    corpus: dict[str, Any], records: Path, directory: Path, commit: str | None = None
) -> dict[str, Any]:
    """Every measured program judged, and the issue's figures over them; each program's STEP
    lines as they stood at `commit`, the one its traces were made at (read_program)."""
    judged = {}
    for name, entry in corpus.items():
        path = next((p for p in directory.glob(f"{name}.*") if p.suffix in (".py", ".cu")), None)
        if path is None:
            continue
        try:
            judged[name] = judge_program(read_program(path, commit), entry, records)
        except (ValueError, OSError) as exc:
            judged[name] = {"judged": False, "why": str(exc)}
        except (KeyError, TypeError, AttributeError, ZeroDivisionError) as exc:
            # a record damaged or edited by hand: its program left out, said, and the rest
            why = f"its record is damaged ({type(exc).__name__}: {exc})"
            judged[name] = {"judged": False, "why": why}
    ok = [j for j in judged.values() if j.get("judged", True)]
    figures: dict[str, Any] = {"judged": judged, "trace_corpus_programs": len(ok)}
    if ok:
        caused = [j for j in ok if j.get("cause_measured", True)]
        figures["trace_corpus_headline_right"] = sum(j["headline_right"] for j in caused) / max(
            len(caused), 1
        )
        figures["trace_corpus_cause_unmeasured"] = sorted(
            name for name, j in judged.items() if j.get("cause_measured") is False
        )
        figures["trace_corpus_steps_right"] = sum(j["steps_right"] for j in ok) / len(ok)
        figures["trace_corpus_startup_charged_s"] = sum(j["startup_charged_s"] for j in ok)
        figures["trace_corpus_foreign_advice"] = sum(len(j["foreign_advice"]) for j in ok)
        for key in (
            "prediction_error",
            "prediction_error_unpaired",
            "idle_share_error",
            "idle_share_error_both_traced",
        ):  # each beside the one before it
            of = caused if key.startswith("prediction") else ok  # a saving told from none
            if values := [j[key] for j in of if key in j]:
                figures[f"trace_corpus_{key}_max"] = max(values)
        within = [j["prediction_within_spread"] for j in ok if "prediction_within_spread" in j]
        if within:  # beside the error: the share the runs' own spread cannot tell from right
            figures["trace_corpus_prediction_within_spread"] = sum(within) / len(within)
        gone = [j["fix_gone"] for j in ok if "fix_gone" in j]
        if gone:  # `compare` of the fixed trace: the headline's cause gone, its saving paid
            figures["trace_corpus_fix_gone"] = sum(gone) / len(gone)
    return figures
