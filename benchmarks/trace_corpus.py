"""Trace corpus benchmark (issue 67): `xferscope trace` on programs it was not built around.
Every program of benchmarks/trace_corpus/ (trace_corpus/README.md: each loses time in one
known way, says so in its header, and has its fix) is run untraced as it is, with its fix and,
where it has one, with its data resident on the GPU, rounds alternated, and traced as it is
(its raw records kept, `trace --records`). The traces are then judged again from the kept
records by this checkout's analysis (`trace --replay`), so a change to the analysis is judged
on the same runs without a GPU (--judge). Writes benchmarks/results/trace-corpus-<gpu>-<date>.json:
  trace_corpus_programs               the programs judged (goal >= 12)
  trace_corpus_headline_right         the share whose headline is their cause, "nothing to fix"
                                      for the clean one and the start-up apart for the one whose
                                      lost time is its start-up (goal 1.0); over the programs
                                      whose fix's saving the runs tell from none, the others
                                      named in trace_corpus_cause_unmeasured
  trace_corpus_prediction_error_max   the headline's predicted saving a step against the fix's
                                      measured one untraced (the median of the rounds'
                                      own savings; goal <= 0.25); beside it, _unpaired: from
                                      each form's median apart
  trace_corpus_startup_charged_s      seconds of any finding's cost that come from before the
                                      first step: the trace judged again with everything before
                                      the first step cut away must price every finding alike
                                      (goal 0)
  trace_corpus_foreign_advice         findings whose advice names a component the program does
                                      not use (a DataLoader, CuPy, JAX, NCCL; goal 0)
  trace_corpus_steps_right            the share whose step line is one of theirs and whose count
                                      of steps is theirs within 10% (goal 1.0)
  trace_corpus_idle_share_error_max   the steps' share waiting for input against
                                      1 - resident / fed, where a program has a resident form
                                      (goal <= 0.05); beside it, _both_traced_max: against
                                      the resident form traced too (the trace's cost on the
                                      step in both)

    python3 benchmarks/trace_corpus.py --commit $(git rev-parse HEAD) [--rounds 3]
        [--most-rounds 8] [--programs a,b] [--records DIR] [--archive DIR] [--time-limit S]
        [--out DIR] [--into RESULT.json] [--no-judge]
    python3 benchmarks/trace_corpus.py --judge RESULT.json --records DIR [--judged FILE]

Each program's variants are run untraced --rounds times, alternated (a Python program that
imports PyTorch forked from a process that has imported it: corpus_zygote.py), and with
--most-rounds N more rounds, up to N, while its fix's saving is not known within 25% (the
rounds' savings resampled: settled(); each program's "rounds" says how many ran), then it is
traced once as it is (and once fixed, for `compare`, and once with its data resident where it
has that form);
--into joins this run's programs to an earlier record's (programs measured in separate calls,
one file).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus_zygote import Zygote, forkable
from spread import median_interval, round_savings
from trace_corpus_judge import Program, changed_since, is_program, judge_all, read_program

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "trace_corpus"
# multi-GPU hosts: NVLink multicast stays off (the device machines' rule)
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
            "NVSHMEM_DISABLE_NVLS": "1"}  # fmt: skip
RUN_TIMEOUT_S = 300


def programs(names: str) -> list[Program]:
    found = sorted([*CORPUS.glob("*.py"), *CORPUS.glob("*.cu")])
    found = [p for p in found if is_program(p)]  # corpus.py and models.py are helpers
    chosen = [read_program(p) for p in found]
    if names:
        wanted = [n.strip() for n in names.split(",") if n.strip()]
        unknown = set(wanted) - {p.name for p in chosen}
        if unknown or not wanted:
            said = f"no such corpus program: {', '.join(sorted(unknown))}" if unknown else (
                "no program named")  # fmt: skip
            raise ValueError(f"--programs: {said} (its programs: "
                             f"{', '.join(p.name for p in chosen)})")  # fmt: skip
        chosen = [p for p in chosen if p.name in wanted]
    return chosen


def missing(program: Program, gpus: int) -> str | None:
    """Why a program cannot run here, or None."""
    if program.gpus > gpus:
        return f"needs {program.gpus} GPUs, this host has {gpus}"
    for need in program.needs:
        if need == "nvcc":
            if shutil.which("nvcc") is None:
                return "needs nvcc"
        else:
            probe = subprocess.run([sys.executable, "-c", f"import {need}"], capture_output=True)
            if probe.returncode != 0:
                return f"needs the Python module {need}"
    return None


def base_command(program: Program, build: Path) -> list[str]:
    """The program's command line, built first where it is CUDA C++."""
    if program.path.suffix == ".cu":
        binary = build / program.name
        if not binary.exists():
            subprocess.run(["nvcc", "-O2", "-g", "-lineinfo", "-arch=sm_90", "-o", str(binary),
                            str(program.path)], check=True)  # fmt: skip
        return [str(binary)]
    if program.gpus > 1:
        return [sys.executable, "-m", "torch.distributed.run", "--standalone",
                f"--nproc_per_node={program.gpus}", str(program.path)]  # fmt: skip
    return [sys.executable, str(program.path)]


def own_line(stdout: str) -> dict:
    """The program's JSON line."""
    for line in reversed(stdout.splitlines()):
        if line.startswith('{"corpus"'):
            return json.loads(line)
    raise ValueError("no corpus line in the program's output")


def untraced(argv: list[str], env: dict[str, str] | None, zygote: Zygote | None) -> dict:
    """One untraced run: forked from the stream's zygote where it is a Python script."""
    start = time.perf_counter()
    if zygote is not None and forkable(argv):
        rc, stdout, stderr = zygote.run(argv, dict(env or os.environ), RUN_TIMEOUT_S)
    else:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env)
        rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    if rc != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({rc}): {stderr[-2000:]}")
    return own_line(stdout) | {"wall_s": time.perf_counter() - start}


def traced(
    argv: list[str], records: Path, history: Path, env: dict[str, str] | None = None
) -> dict:
    """`xferscope trace` of the program as a user runs it, its raw records kept in `records`;
    what it printed and the program's own line."""
    out = Path(tempfile.mkdtemp(prefix="xfs-corpus-"))
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "xferscope", "trace", "--reference", "history", "--history",
         str(history), "--records", str(records), "-o", str(out), "--", *argv],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env,
    )  # fmt: skip
    (records / "stdout.txt").write_text(proc.stdout)
    (records / "stderr.txt").write_text(proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"trace of {' '.join(argv)} failed ({proc.returncode}): "
                           f"{proc.stderr[-2000:]}")  # fmt: skip
    own = own_line(proc.stdout)
    (records / "own.json").write_text(json.dumps(own) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    return own | {"wall_s": time.perf_counter() - start}


def archive(records: Path, name: str, into: Path) -> None:
    """Program `name`'s kept traces as one `into`/<name>.tar.gz, made under another name and
    then renamed (a stop never leaves half of one); a failure is one line, and the run goes on
    (the traces stay in `records`)."""
    try:
        part = shutil.make_archive(str(into / f".{name}"), "gztar", records, name)
        os.replace(part, into / f"{name}.tar.gz")
    except OSError as exc:
        print(f"{name}: --archive: {exc}", flush=True)


# The forms traced, each kept under records/<program>/<name>, and their entry's key
TRACED = {"round0": "traced", "fixed": "traced_fixed", "resident": "traced_resident"}

# A fix's measured saving is known well enough to judge a price by once its 95% interval, the
# rounds' savings resampled, lies within this share of its median on both sides: the
# prediction's goal
SETTLED_WITHIN = 0.25
MOST_ROUNDS = 50  # --rounds and --most-rounds at most


def settled(program: Program, runs: dict[str, list[dict]]) -> bool:
    """Whether a program's untraced runs (`runs`: each variant's) tell its fix's saving, the
    median of the rounds' own (spread.round_savings), within SETTLED_WITHIN; a program with no
    fix to price (its cause none, or its start-up) is settled by its first rounds."""
    if program.cause in ("none", "startup"):
        return True
    before = [r["seconds"] for r in runs.get("before", [])]
    fixed = [r["seconds"] for r in runs.get("fixed", [])]
    if len(before) < 2 or len(fixed) < 2:
        return False
    rounds = round_savings(before, fixed)
    saving = statistics.median(rounds)
    if saving <= 0:
        return False
    low, high = median_interval(rounds)
    return (1 - SETTLED_WITHIN) * saving <= low and high <= (1 + SETTLED_WITHIN) * saving


def another_round(
    done: int, rounds: int, most: int, past: bool, is_settled: Callable[[], bool]
) -> bool:
    """Whether a program measures another round, `done` done: one at least; then, before the
    time limit (`past`), up to `rounds`, and up to `most` while its fix's saving is not known
    within 25% (`is_settled`, asked only then)."""
    if done < 1:
        return True
    if past:
        return False
    return done < rounds or (done < most and not is_settled())


def measure(args: argparse.Namespace) -> None:
    """Each program in turn: its variants untraced, `--rounds` rounds alternated, then traced
    once as it is and once fixed (records kept); the record written after each program, so a
    time limit or a stop keeps every program measured whole. With --parallel N, N programs at
    a time, each on a GPU of its own (its variants still alternated on that GPU); a program of
    several GPUs runs alone, after them."""
    import torch  # only where the programs run (main checked it is there)

    from foundation import write_record
    from xferscope.core.engine import NativeEngine
    from xferscope.core.machine import collect

    os.environ.update(SAFE_ENV)
    gpus = torch.cuda.device_count()
    meta = collect(NativeEngine(), [0])
    records = Path(args.records or tempfile.mkdtemp(prefix="xfs-corpus-records-"))
    records.mkdir(parents=True, exist_ok=True)
    if args.archive:
        Path(args.archive).mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix="xfs-corpus-build-"))
    history = records / "history.db"
    # every GPU's rates, once, for every trace (`trace --reference history`)
    subprocess.run([sys.executable, "-m", "xferscope", "run", "--quick", "--history",
                    str(history), "-o", str(build / "run")], check=True,
                   capture_output=True)  # fmt: skip
    earlier = json.loads(Path(args.into).read_text())["figures"] if args.into else {}
    measured: dict[str, dict] = dict(earlier.get("corpus", {}))
    skipped: dict[str, str] = dict(earlier.get("skipped", {}))
    deadline = time.monotonic() + args.time_limit
    lock = threading.Lock()
    streams = max(1, min(args.parallel, gpus))

    def write() -> Path:
        with lock:
            figures = {"corpus": measured, "skipped": skipped, "rounds": args.rounds,
                       "most_rounds": args.most_rounds,
                       "parallel": streams}  # fmt: skip
            return write_record("trace-corpus", args.commit, meta, gpus, [], figures,
                                Path(args.out), records=str(records))  # fmt: skip

    def one(p: Program, gpu: int | None, zygote: Zygote | None) -> None:
        if time.monotonic() > deadline:
            print(f"{p.name}: not measured, the time limit was reached", flush=True)
            return
        env = None if gpu is None else dict(os.environ, CUDA_VISIBLE_DEVICES=str(gpu))
        mine = history if gpu is None else records / f"history-gpu{gpu}.db"  # one writer each
        if not mine.exists():
            shutil.copy(history, mine)
        entry: dict = {"untraced": {}, "gpu": gpu}
        base = base_command(p, build)
        variants = {"before": base, "fixed": [*base, "--fixed"]}
        if p.resident and not args.light:
            variants["resident"] = [*base, "--resident"]
        try:
            done = 0
            # past the time limit a program started before it stops at the round it is in (one
            # at least) and is traced as it is only, its entry `cut`: a long program (a traced
            # LSTM's run took 70 s) would otherwise run on past a call's own limit and be lost
            while another_round(done, args.rounds, args.most_rounds, time.monotonic() > deadline,
                                lambda: settled(p, entry["untraced"])):  # fmt: skip
                for name, argv in variants.items():
                    entry["untraced"].setdefault(name, []).append(untraced(argv, env, zygote))
                done += 1
            entry["rounds"] = done
            if done < args.rounds:
                entry["cut"] = True
            # as it is, fixed, and (where it has one) its data resident: the trace's own cost
            # on the resident step, so that the fed one's share is set against its like
            forms = ["round0"] if args.light else ["round0", "fixed"]
            forms += ["resident"] if "resident" in variants else []
            for name in forms:
                if name != "round0" and time.monotonic() > deadline:
                    entry["cut"] = True
                    continue
                key = TRACED[name]
                kept = records / p.name / name
                shutil.rmtree(kept, ignore_errors=True)
                kept.mkdir(parents=True)
                argv = base if name == "round0" else [*base, f"--{name}"]
                entry[key] = traced(argv, kept, mine, env)
        except (RuntimeError, ValueError, subprocess.SubprocessError) as exc:
            entry.setdefault("errors", []).append(str(exc)[-3000:])
            entry["cut"] = True  # not measured whole (a trace stopped by Ctrl-C or the limit)
            print(f"{p.name}: {exc}", flush=True)
        with lock:
            measured[p.name] = entry
            skipped.pop(p.name, None)
        if args.archive and (records / p.name).is_dir():
            archive(records, p.name, Path(args.archive))
        print(f"{p.name} done", flush=True)
        write()

    chosen = []
    for p in programs(args.programs):
        why = missing(p, gpus)
        if why:
            skipped[p.name] = why
            print(f"{p.name}: skipped, {why}", flush=True)
        else:
            chosen.append(p)
    alone = [p for p in chosen if p.gpus > 1]
    queue = [p for p in chosen if p.gpus == 1]
    with concurrent.futures.ThreadPoolExecutor(streams) as pool:
        taken = itertools.count()

        def stream(gpu: int) -> None:
            with Zygote() as zygote:
                while (i := next(taken)) < len(queue):
                    one(queue[i], gpu if streams > 1 else None, zygote)

        list(pool.map(stream, range(streams)))
    for p in alone:
        one(p, None, None)
    path = write()
    if not args.no_judge:
        judge(path, records, path)


def judge(record_path: Path, records: Path, into: Path) -> None:
    """The record's programs judged from their kept traces by this checkout's analysis."""
    record = json.loads(record_path.read_text())
    figures = record["figures"]
    figures.update(judge_all(figures["corpus"], records, CORPUS, record.get("commit")))
    record["figures"] = figures
    record["judged_at"] = _head()
    into.write_text(json.dumps(record, indent=2) + "\n")
    headline = {k: v for k, v in figures.items() if k.startswith("trace_corpus_")}
    print(json.dumps(headline, indent=2))
    print(f"wrote {into}")


def _head() -> str | None:
    """This checkout's commit, whose analysis judged the traces (None outside a git checkout)."""
    proc = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          cwd=HERE)  # fmt: skip
    return proc.stdout.strip() or None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--commit", default=None, help="this checkout's commit (a device's copy reads an old one)"
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="untraced runs of each variant, alternated"
    )
    parser.add_argument(
        "--most-rounds",
        type=int,
        default=None,
        help="run more rounds, up to this many, while a program's fix's saving is not known "
        "within 25%% (its runs resampled); default: --rounds",
    )
    parser.add_argument(
        "--programs",
        default="",
        help="comma-separated names (trace_corpus/README.md); default: all",
    )
    parser.add_argument("--records", default=None, help="where the raw traces are kept")
    parser.add_argument(
        "--time-limit",
        type=float,
        default=3600.0,
        help="seconds; no program starts after them, and one running then stops after the round"
        " it is in, traced as it is only (its entry marked cut)",
    )
    parser.add_argument("--out", default=str(HERE / "results"), help="the record's directory")
    parser.add_argument(
        "--light",
        action="store_true",
        help="no resident runs and no trace of the fix: a first look",
    )
    parser.add_argument("--into", default=None, help="a record whose programs this run's join")
    parser.add_argument(
        "--no-judge",
        action="store_true",
        help="measure only: the record's programs judged later, elsewhere, with --judge",
    )
    parser.add_argument(
        "--parallel", type=int, default=1, help="programs at a time, each on a GPU of its own"
    )
    parser.add_argument(
        "--archive",
        default=None,
        help="a directory: each program's kept traces also written there as one <program>.tar.gz "
        "as soon as it is measured (for a machine that brings back only files near the top)",
    )
    parser.add_argument("--judge", default=None, help="a record to judge again from --records")
    parser.add_argument("--judged", default=None, help="with --judge: where to write it")
    args = parser.parse_args()
    if args.judge:
        if args.no_judge:
            parser.error("--no-judge goes with measuring, not with --judge")
        if not args.records:
            parser.error("--judge needs --records, the kept traces")
        if not is_record(Path(args.judge)):
            parser.error(f"--judge: {args.judge} is not a trace-corpus record file")
        if not Path(args.records).is_dir():
            parser.error(f"--records: {args.records} is not a directory of kept traces")
        measured = json.loads(Path(args.judge).read_text())["figures"].get("corpus", {})
        if not any((Path(args.records) / name).is_dir() for name in measured):
            parser.error(f"--records: {args.records} holds no kept trace of the record's "
                         "programs (the record is left as it is)")  # fmt: skip
        if args.judged and Path(args.judged).exists() and not Path(args.judged).is_file():
            parser.error(f"--judged: {args.judged} is not a file to write (a directory, a FIFO)")
        judge(Path(args.judge), Path(args.records), Path(args.judged or args.judge))
        return
    if not args.commit:
        parser.error("--commit is required to measure")
    if not 1 <= args.rounds <= MOST_ROUNDS:
        parser.error(f"--rounds must be 1 or more and at most {MOST_ROUNDS}")
    if args.most_rounds is None:
        args.most_rounds = args.rounds
    if not args.rounds <= args.most_rounds <= MOST_ROUNDS:
        parser.error(f"--most-rounds must be from --rounds ({args.rounds}) to {MOST_ROUNDS}")
    if not 0 < args.time_limit < float("inf"):
        parser.error("--time-limit must be a finite number of seconds above 0")
    if args.parallel < 1:
        parser.error("--parallel must be 1 or more")
    if args.into and not is_record(Path(args.into)):
        parser.error(f"--into: {args.into} is not a trace-corpus record file")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        parser.error(f"--out: {args.out} is not a directory")
    if args.records and Path(args.records).exists() and not Path(args.records).is_dir():
        parser.error(f"--records: {args.records} is not a directory")
    archive = Path(args.archive or ".")
    if args.archive is not None and (
        not args.archive.strip()
        or ((archive.exists() or archive.is_symlink()) and not archive.is_dir())
    ):
        parser.error(f"--archive: {args.archive!r} is not a directory")
    try:
        chosen = programs(args.programs)  # an unknown name is said before anything runs
    except ValueError as exc:
        parser.error(str(exc))
    if stale := [p.path.name for p in chosen if changed_since(p.path, args.commit)]:
        one = len(stale) == 1
        parser.error(
            f"--commit: {', '.join(stale)} {'differs' if one else 'differ'} from "
            f"{'its' if one else 'their'} text at {args.commit}: name the commit of the tree "
            "that runs (its hash where it was made)"
        )
    try:
        import torch  # noqa: F401  (only where the programs run)
    except ImportError:
        parser.error("measuring needs PyTorch, on a GPU machine (--judge needs neither)")
    try:
        measure(args)
    except KeyboardInterrupt:
        sys.exit(
            "interrupted: the record holds every program measured before it, one that was "
            'not measured whole marked "cut"'
        )


def is_record(path: Path) -> bool:
    """Whether `path` is a record this benchmark wrote (a JSON file with its programs'
    figures)."""
    try:
        return path.is_file() and "corpus" in json.loads(path.read_text())["figures"]
    except (OSError, ValueError, KeyError, TypeError):
        return False


if __name__ == "__main__":
    main()
