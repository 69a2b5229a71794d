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
import time
from pathlib import Path

from corpus_zygote import Zygote
from trace_corpus import RUN_TIMEOUT_S, own_line, programs

HERE = Path(__file__).resolve().parent


def python_processes() -> int:
    """Python processes on the machine other than this one and its zygote's server."""
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    me = str(os.getpid())
    return sum(1 for line in ps.splitlines()
               if "python" in line and "zygote" not in line and me not in line)  # fmt: skip


def probe(names: str, rounds: int) -> dict:
    found: dict = {}
    with Zygote() as zygote:
        for p in programs(names):
            argv = [sys.executable, str(p.path)]
            for r in range(rounds):
                for kind in ("forked", "fresh") if r % 2 == 0 else ("fresh", "forked"):
                    start = time.perf_counter()
                    if kind == "forked":
                        rc, out, err = zygote.run(argv, dict(os.environ), RUN_TIMEOUT_S)
                    else:
                        proc = subprocess.run(argv, capture_output=True, text=True,
                                              timeout=RUN_TIMEOUT_S)  # fmt: skip
                        rc, out, err = proc.returncode, proc.stdout, proc.stderr
                    if rc != 0:
                        raise RuntimeError(f"{p.name} ({kind}) failed ({rc}): {err[-500:]}")
                    wall = time.perf_counter() - start
                    run = {"seconds": own_line(out)["seconds"], "wall_s": wall,
                           "left": python_processes()}  # fmt: skip
                    found.setdefault(p.name, {}).setdefault(kind, []).append(run)
                    print(p.name, kind, run, flush=True)
    return found


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
    try:
        programs(args.programs)
    except ValueError as exc:
        parser.error(str(exc))
    import torch

    from foundation import write_record
    from xferscope.core.engine import NativeEngine
    from xferscope.core.machine import collect

    figures = {"runs": probe(args.programs, args.rounds), "rounds": args.rounds}
    write_record("trace-corpus-zygote-probe", args.commit, collect(NativeEngine(), [0]),
                 torch.cuda.device_count(), [], figures, Path(args.out))  # fmt: skip


if __name__ == "__main__":
    main()
