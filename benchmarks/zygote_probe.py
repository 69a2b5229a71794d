"""Whether the trace corpus's untraced runs, forked from corpus_zygote.py's process that has
imported PyTorch, run as the same programs started afresh (`python3 prog.py`) do: each program
run both ways, alternated (each round's order reversed), by the loop's own clock; and the
Python processes left behind after each forked run (a DataLoader's workers that outlive it
would slow the next).

    python3 benchmarks/zygote_probe.py --commit $(git rev-parse HEAD) \\
        [--programs grad_accum_trainer,inference_requests] [--rounds 3] [--out DIR]

Writes benchmarks/results/trace-corpus-zygote-probe-<gpu>-<date>.json (a probe: notes)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from corpus_zygote import Zygote
from trace_corpus import programs, untraced

HERE = Path(__file__).resolve().parent


def python_processes() -> int:
    """Python processes on the machine other than this one and its zygote's server."""
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    me = str(os.getpid())
    return sum(1 for line in ps.splitlines()
               if "python" in line and "zygote" not in line and me not in line)  # fmt: skip


def probe(names: str, rounds: int, found: dict) -> None:
    """Each program's runs both ways into `found`, as they end (a Ctrl-C keeps them)."""
    with Zygote() as zygote:
        for p in programs(names):
            argv = [sys.executable, str(p.path)]
            for r in range(rounds):
                for kind in ("forked", "fresh") if r % 2 == 0 else ("fresh", "forked"):
                    line = untraced(argv, None, zygote if kind == "forked" else None)
                    run = {"seconds": line["seconds"], "wall_s": line["wall_s"],
                           "left": python_processes()}  # fmt: skip
                    found.setdefault(p.name, {}).setdefault(kind, []).append(run)
                    print(p.name, kind, run, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commit", required=True)
    parser.add_argument(
        "--programs", default="grad_accum_trainer,inference_requests,loader_per_epoch"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(HERE / "results"))
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be 1 or more")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        parser.error(f"--out: {args.out} is not a directory")
    try:
        programs(args.programs)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        import torch
    except ImportError:
        parser.error("the probe needs PyTorch, on a GPU machine")

    from foundation import write_record
    from xferscope.core.engine import NativeEngine
    from xferscope.core.machine import collect

    figures: dict = {"runs": {}, "rounds": args.rounds}
    try:
        probe(args.programs, args.rounds, figures["runs"])
    except KeyboardInterrupt:
        figures["interrupted"] = True  # the runs that ended are kept, marked
    write_record("trace-corpus-zygote-probe", args.commit, collect(NativeEngine(), [0]),
                 torch.cuda.device_count(), [], figures, Path(args.out))  # fmt: skip


if __name__ == "__main__":
    main()
