"""GEMM benchmark (issue 11), on one GPU in one run: xferscope's cuBLASLt GEMM against PyTorch
(torch.matmul, torch._scaled_mm for FP8) at 8192^3 in every precision, interleaved round by
round so clock drift hits both alike; seed 003's Table III (alignment classes over 8128-8180 by
8) for BF16 and FP32 with the measured gain of padding; the transfer ratios (seed 003's
0.95/0.87); the CPU's scaling over threads; the offload break-even sizes; and the time `run`'s
GEMM check takes. Writes benchmarks/results/gemm-<gpu>-<date>.json as ../shared/BENCHMARKS.md
says, and the seed 003 study's own document beside it (gemm-seed003-<gpu>-<date>.json).

    python3 benchmarks/gemm_bench.py --commit $(git rev-parse HEAD) [--rounds 5] [--out DIR]
        [--only-vs-torch]
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from foundation import comparison, gpu_tag, write_record
from xferscope.core import plan
from xferscope.core.engine import NativeEngine
from xferscope.core.machine import collect
from xferscope.gemm.check import gemm_check
from xferscope.gemm.cpu import thread_counts, usable_cores
from xferscope.gemm.measure import measure
from xferscope.gemm.records import PRECISIONS, GemmOptions, GemmResult, classes, dumps_json
from xferscope.gemm.shapes import PRESETS, Shape

HERE = Path(__file__).resolve().parent
N = 8192


class Printer:
    def begin(self, label: str) -> None:
        print(label, flush=True)

    def step(self, label: str) -> None:
        print("  " + label, flush=True)


def torch_gemm(precision: str, n: int) -> Callable[[], object]:
    """The same GEMM in PyTorch: random inputs uniform in [-1, 1) with every bit of the type's
    mantissa random, like xferscope's, output preallocated. (FP64 inputs drawn in FP32 and
    widened have 29 zero mantissa bits: the tensor cores then draw less power and held their
    clocks, 60 against 55 TFLOP/s for full-mantissa inputs on an H200, the same kernel.)"""
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"

    def rand(dtype: torch.dtype) -> torch.Tensor:
        drawn = torch.float64 if dtype == torch.float64 else torch.float32
        return (torch.rand(n, n, device="cuda", dtype=drawn) * 2 - 1).to(dtype)

    if precision == "fp8":
        a = rand(torch.float8_e4m3fn)
        b = rand(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants
        scale = torch.tensor(1.0, device="cuda")
        out = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
        return lambda: torch._scaled_mm(a, b, scale, scale, out_dtype=torch.bfloat16, out=out)
    dtype = {
        "fp64": torch.float64,
        "fp32": torch.float32,
        "tf32": torch.float32,
        "fp16": torch.float16,
        "bf16": torch.bfloat16,
    }[precision]
    a, b = rand(dtype), rand(dtype)
    c = torch.empty(n, n, device="cuda", dtype=dtype)
    return lambda: torch.matmul(a, b, out=c)


def torch_seconds(fn: Callable[[], object], count: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(count):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3


HEAT_S = 3.0  # torch's GEMMs first, so both are measured at the GPU's power limit


def _clock_mhz() -> int | None:
    """The SM clock now (NVML), where NVML answers."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return int(pynvml.nvmlDeviceGetClockInfo(pynvml.nvmlDeviceGetHandleByIndex(0), 0))
    except Exception:  # no NVML: the record says nothing of the clocks
        return None


def vs_torch(engine: NativeEngine, precision: str, rounds: int) -> tuple[float, float, dict]:
    """Median TFLOP/s of `xferscope gemm` and of torch at N^3, interleaved round by round:
    the command's own point (its tuning, from a fresh cache; its warm-up until the rate holds;
    its trials and their median), then torch's GEMM measured the same way (plan.timed_trials
    with the command's target, trials, warm-up and settling), and again. The GPU is heated
    first by torch's GEMMs for HEAT_S. Measured the same way, each side meets the same power
    limit: at it, an H100's bf16 GEMM ran 735 TFLOP/s for 0.6 s and then 603-632, and torch's
    trials taken right after an idle gap ran 10-15% above ours taken after a warm-up."""
    fn = torch_gemm(precision, N)
    run_torch = functools.partial(torch_seconds, fn)
    options = GemmOptions(precisions=(precision,), shapes=(Shape(N, N, N),), transfers=(), pad=0)
    try:
        per = torch_seconds(fn, 3) / 3
        torch_seconds(fn, max(1, round(HEAT_S / per)))
        ours, theirs, rounds_record = [], [], []
        flops = 2.0 * N**3
        for _ in range(rounds):
            (point,) = measure(engine, options).points
            assert point.status == "complete" and point.verified, f"{precision}: {point}"
            assert point.median_s is not None
            torch_trials, _, warmed = plan.timed_trials(
                run_torch,
                options.target_s,
                options.trials,
                options.heat_s,
                options.settle_s,
            )
            ours.append(point.median_s)
            theirs.append(statistics.median(torch_trials))
            rounds_record.append(
                {
                    "ours_tflops": [round(flops / t / 1e12, 1) for t in point.seconds],
                    "ours_warmup_s": point.warmup_s,
                    "ours_settled": point.settled,
                    "algorithm": point.algorithm,
                    "torch_tflops": [round(flops / t / 1e12, 1) for t in torch_trials],
                    "torch_warmup_s": warmed.seconds,
                    "torch_settled": warmed.settled,
                    "sm_mhz_after": _clock_mhz(),
                }
            )
        record = {
            "method": "rounds of the gemm command's point (tuning from a fresh cache) and torch "
            f"through the same warm-up and trials, after {HEAT_S:g} s of torch GEMMs",
            "rounds": rounds_record,
        }
        return flops / statistics.median(ours), flops / statistics.median(theirs), record
    finally:
        del fn, run_torch
        torch.cuda.empty_cache()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commit", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=str(HERE / "results"))
    parser.add_argument("--skip-cpu", action="store_true")
    parser.add_argument(
        "--only-vs-torch", action="store_true", help="measure only every precision against torch"
    )
    args = parser.parse_args()
    # the command's tuning from scratch, as on a machine's first run
    os.environ["XFERSCOPE_CACHE"] = tempfile.mkdtemp(prefix="gemm-bench-cache-")
    out = Path(args.out)
    engine = NativeEngine()
    meta = collect(engine, [0])
    comparisons, figures, details = [], {}, {}

    # 1. every precision against PyTorch at 8192^3
    for precision in PRECISIONS:
        ours, theirs, record = vs_torch(engine, precision, args.rounds)
        peer = "torch._scaled_mm" if precision == "fp8" else "torch.matmul"
        comparisons.append(
            comparison(
                f"gemm_{precision}_{N}_vs_torch",
                ours / 1e12,
                theirs / 1e12,
                f"{peer} (CUDA events, interleaved rounds)",
                "TFLOP/s",
                True,
                0.99,
            )
        )
        details[f"vs_torch_{precision}"] = record
        print(comparisons[-1], flush=True)
    if args.only_vs_torch:
        path = write_record(
            "gemm", args.commit, meta, 1, comparisons, figures, out, details=details
        )
        print(f"wrote {path}")
        return

    # 2. seed 003's Table III for BF16 and FP32, with padding to multiples of 64
    seed003 = tuple(Shape(n, n, n) for n in PRESETS["near-8k"])
    study = measure(
        engine,
        GemmOptions(precisions=("bf16", "fp32"), shapes=seed003, transfers=(), pad=64),
        Printer(),
    )
    for precision in ("bf16", "fp32"):
        figures[f"alignment_classes_{precision}_8128_8180"] = [
            {"divisible_by": c, "mean_tflops": round(f / 1e12, 2), "shapes": k}
            for c, f, k in classes(study, precision)
        ]
        figures[f"pad_gain_{precision}"] = {
            p.shape.label: round(p.pad_gain, 4)
            for p in study.measured(precision)
            if p.pad_gain is not None
        }
        figures[f"tflops_{precision}_8128_8180"] = {
            p.shape.label: round((p.flops or 0) / 1e12, 2) for p in study.measured(precision)
        }
    tag = gpu_tag(meta["gpus"][0]["name"], 1)
    out.mkdir(parents=True, exist_ok=True)
    stamp = dt.date.today().strftime("%Y%m%d")
    (out / f"gemm-seed003-{tag}-{stamp}.json").write_text(dumps_json(study))

    # 3. transfers (seed 003's 0.95 DGEMM / 0.87 SGEMM), CPU scaling and the offload ladder
    cores = len(usable_cores())
    big = measure(
        engine,
        GemmOptions(
            precisions=("fp64", "fp32"),
            shapes=(Shape(N, N, N),),
            transfers=("pinned", "pageable"),
            pad=0,
        ),
        Printer(),
    )
    for p in big.points:
        for memory in ("pinned", "pageable"):
            for tiled in (False, True):
                rate = p.transfer_flops(memory, tiled)
                form = "tiled" if tiled else "sequence"
                if rate and p.flops:
                    figures[f"transfers_{p.precision}_{N}_{memory}_{form}_vs_compute"] = round(
                        rate / p.flops, 4
                    )
    if not args.skip_cpu:
        cpu = measure(
            engine,
            GemmOptions(
                precisions=("fp64", "fp32"),
                shapes=(Shape(4096, 4096, 4096),),
                transfers=("pinned",),
                pad=0,
                cpu_threads=thread_counts(cores),
                trials=3,
            ),
            Printer(),
        )
        report_cpu(cpu, figures)
        details["cpu_blas"] = cpu.cpu_blas
    figures["transfer_findings"] = [f.message for f in big.findings if "transfers" in f.code]

    # 4. run's GEMM check
    start = time.monotonic()
    check = gemm_check(engine, 0)
    figures["run_gemm_check_wall_s"] = round(time.monotonic() - start, 2)
    figures["run_gemm_check"] = check.to_dict()
    path = write_record("gemm", args.commit, meta, 1, comparisons, figures, out, details=details)
    print(f"wrote {path}")


def report_cpu(result: GemmResult, figures: dict) -> None:
    for precision in ("fp64", "fp32"):
        scaling = sorted(
            (c for c in result.cpu if c.precision == precision and c.role == "scaling" and c.flops),
            key=lambda c: c.threads,
        )
        figures[f"cpu_{precision}_4096_gflops_by_threads"] = {
            str(c.threads): round((c.flops or 0) / 1e9, 1) for c in scaling
        }
        most = max((c.threads for c in scaling), default=1)
        for threads, key in ((most, "all_cores"), (1, "one_core")):
            pairs, first = result.offload(precision, threads)
            figures[f"break_even_{precision}_{key}"] = None if first is None else pairs[first][0].m
            figures[f"break_even_{precision}_{key}_ladder"] = [
                {"n": s.m, "cpu_gflops": round(c / 1e9, 2), "gpu_gflops": round(g / 1e9, 2)}
                for s, c, g in pairs
            ]
    figures["cpu_findings"] = [
        f.message for f in result.findings if "cpu" in f.code or "break_even" in f.code
    ]


if __name__ == "__main__":
    main()
