"""Whether the trace slows the host's own Python: benchmarks/host_speed_loop.py (a fixed time of
pure Python a step beside a small MLP's step; under torchrun, DDP with the last rank doing the
Python, as ddp_straggler) run untraced and traced under trace_overhead.py's variants,
alternated (each round's order reversed), 3 rounds by default. Per run: the loop's time, and the
Python rank's values a millisecond and the time its time-bounded work really took (asked
--python-ms). A time-bounded loop's values a millisecond is the host's Python speed itself,
which the corpus's loops show only mixed with their CUDA calls: this tells whether any part of
the trace, and which, slows the program's own Python (its looks, CUPTI's threads, the kernel
records), on one GPU and on a DDP job's rank.

    python3 benchmarks/host_speed_probe.py --commit $(git rev-parse HEAD) \\
        [--ranks 1|2] [--rounds 3] [--variants traced,no_looks,no_kernels,copies_floor]

Writes benchmarks/results/trace-host-speed-probe-<gpu>-<date>.json (a probe: notes)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
from pathlib import Path

from host_speed_loop import refused
from trace_corpus import MOST_ROUNDS
from trace_overhead import VARIANTS, traced_run

HERE = Path(__file__).resolve().parent
LOOP = HERE / "host_speed_loop.py"
MULTI_GPU_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def said(stdout: str) -> list[dict]:
    """The loop's lines, one a rank, by rank."""
    lines = [json.loads(x) for x in stdout.splitlines() if x.startswith('{"host_speed"')]
    if not lines:
        raise RuntimeError(f"the loop said nothing: {stdout[-500:]}")
    return sorted(lines, key=lambda x: x["host_speed"])


def command(ranks: int, steps: int, python_ms: float) -> list[str]:
    loop = [str(LOOP), "--steps", str(steps), "--python-ms", str(python_ms)]
    if ranks == 1:
        return [sys.executable, *loop]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={ranks}",
        *loop,
    ]


def one_run(name: str, argv: list[str]) -> list[dict]:
    """The loop's lines, untraced or traced under the variant `name`."""
    if name == "untraced":
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=300, env=dict(os.environ) | MULTI_GPU_ENV
        )
        if done.returncode:
            raise RuntimeError(f"{argv} failed: {done.stderr[-2000:]}")
        return said(done.stdout)
    v = VARIANTS[name]
    return traced_run(
        argv,
        "--kernels",
        v.kernels,
        "--look-every",
        str(v.look_every),
        env=v.env() | MULTI_GPU_ENV,
        read=said,
    )


def summary(runs: dict[str, list[list[dict]]]) -> dict:
    """Per variant, the medians over its runs: the loop's time and the Python rank's figures."""
    out: dict[str, dict] = {}
    for name, each in runs.items():
        if not each:
            continue
        python = [r[-1] for r in each]  # the last rank does the Python work
        out[name] = {
            "runs": len(each),
            "loop_s": statistics.median(r[0]["loop_s"] for r in each),
            **{
                k: statistics.median(p[k] for p in python)
                for k in ("python_ms", "python_ms_max", "values_per_ms", "values_per_ms_min")
            },
        }
    if "untraced" in out:
        base = out["untraced"]
        for v in out.values():
            v["speed_vs_untraced"] = base["loop_s"] / v["loop_s"]
            v["python_speed_vs_untraced"] = v["values_per_ms"] / base["values_per_ms"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commit", required=True)
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--python-ms", type=float, default=8.0)
    parser.add_argument("--variants", default="traced,no_looks,no_kernels,copies_floor")
    parser.add_argument("--out", default=str(HERE / "results"))
    args = parser.parse_args()
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    if not names:
        parser.error(f"--variants: none named; among {', '.join(VARIANTS)}")
    if unknown := [v for v in names if v not in VARIANTS]:
        parser.error(f"--variants: {', '.join(unknown)} not among {', '.join(VARIANTS)}")
    if args.ranks not in (1, 2, 4, 8):
        parser.error(f"--ranks: {args.ranks} is not 1, 2, 4 or 8")
    if not 1 <= args.rounds <= MOST_ROUNDS:
        parser.error(f"--rounds: {args.rounds} is not a count from 1 to {MOST_ROUNDS}")
    if said := refused(args.steps, args.python_ms):  # the loop's own rule, before any run
        parser.error(said)
    if Path(args.out).exists() and not Path(args.out).is_dir():
        parser.error(f"--out: {args.out} is not a directory")
    try:
        import torch
    except ImportError:
        parser.error("the probe needs PyTorch, on a GPU machine")
    if torch.cuda.device_count() < args.ranks:
        parser.error(f"--ranks: {args.ranks} GPUs asked, {torch.cuda.device_count()} here")

    from foundation import write_record
    from xferscope.core.engine import NativeEngine
    from xferscope.core.machine import collect

    argv = command(args.ranks, args.steps, args.python_ms)
    order = ["untraced", *names]
    runs: dict[str, list[list[dict]]] = {n: [] for n in order}
    figures: dict = {
        "ranks": args.ranks,
        "rounds": args.rounds,
        "python_ms_asked": args.python_ms,
        "command": argv,
        "runs": runs,
    }

    def stop(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)  # a time limit's SIGTERM keeps what was measured
    try:
        for r in range(args.rounds):
            for name in order if r % 2 == 0 else order[::-1]:
                runs[name].append(one_run(name, argv))
                print(name, runs[name][-1], flush=True)
    except KeyboardInterrupt:
        figures["interrupted"] = True  # the runs that ended are kept, marked
    except (RuntimeError, subprocess.SubprocessError) as exc:  # a run failed: the others kept
        figures["failed"] = str(exc)[-2000:]
    figures["summary"] = summary(runs)
    print(json.dumps(figures["summary"], indent=1))
    write_record(
        "trace-host-speed-probe",
        args.commit,
        collect(NativeEngine(), [0]),
        torch.cuda.device_count(),
        [],
        figures,
        Path(args.out),
    )


if __name__ == "__main__":
    main()
