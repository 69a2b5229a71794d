"""Wheel benchmark (issue 29): xferscope built as a wheel with NVIDIA's CUDA toolchain from PyPI
and run where no CUDA toolkit is visible, against the same commit built with the CUDA toolkit,
on one GPU in one run:
  wheel_<h2d|d2h>_pinned, wheel_d2d   `xferscope run --quick`'s headline figures (copy engines,
                                      device time, the largest size) from the wheel against the
                                      toolkit build, the medians of alternated runs (goal 0.99)
  and, from the wheel, `xferscope gemm` (bf16 4096^3, verified) and `xferscope trace` of a
  PyTorch program (every byte it copied in the trace), with the cuBLASLt and CUPTI files found.
Writes benchmarks/results/wheel-<gpu>-<date>.json as ../shared/BENCHMARKS.md says.

    python3 benchmarks/wheel_bench.py --system DIR --wheel DIR --commit SHA [--rounds 2]

Each DIR holds one build installed with `pip install --no-deps --target DIR`; this script runs
from the wheel's (PYTHONPATH=WHEEL_DIR). Hide the toolkit first (bind an empty directory over
/usr/local/cuda*, and leave nvcc off PATH): figures.toolkit_visible says whether it was.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from foundation import bench_parser, comparison, write_record
from run_bench import headline
from xferscope.core.engine import NativeEngine
from xferscope.core.machine import collect

HERE = Path(__file__).resolve().parent
PROGRAM = HERE.parent / "tests" / "trace_programs" / "torch_copies.py"
HEADLINES = (
    ("h2d", "pinned", "h2d_pinned"),
    ("d2h", "pinned", "d2h_pinned"),
    ("d2d", "device", "d2d"),
)


def _env(build: Path) -> dict[str, str]:
    """This environment with `build` first on the module path."""
    rest = os.environ.get("PYTHONPATH", "")
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(build), rest) if p))


def xferscope(build: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`python -m xferscope ARGS` from the build installed in `build`, in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "xferscope", *args],
        env=_env(build),
        capture_output=True,
        text=True,
        check=check,
        timeout=540,
    )


def python_json(build: Path, code: str) -> dict:
    """What `code` prints as JSON, run by Python with `build` first on the module path (its
    error's end where it fails)."""
    out = subprocess.run(
        [sys.executable, "-c", code], env=_env(build), capture_output=True, text=True
    )
    return json.loads(out.stdout) if out.returncode == 0 else {"error": out.stderr.strip()[-300:]}


def engine_of(build: Path) -> dict:
    """Where a build's engine module is and the CUDA it was built with, as it loads."""
    return python_json(
        build,
        "import json; from xferscope.core.compiled import engine_module as m; "
        "print(json.dumps({'module': m().__file__, 'cuda_built': int(m().CUDA_BUILT)}))",
    )


def quick_run(build: Path) -> dict[str, float]:
    """The headline figures (GB/s) of one `run --quick` by `build`."""
    with tempfile.TemporaryDirectory() as tmp:
        xferscope(build, "run", "--quick", "--no-history", "-o", tmp)
        doc = json.loads(next(Path(tmp).glob("run-*/run.json")).read_text())
    return {name: headline(doc, d, m)[0] for d, m, name in HEADLINES}


def result_of(build: Path, document: str, command: str, *args: str) -> tuple[str, dict]:
    """`xferscope COMMAND -o TMP ARGS` by `build`: its output and the result document matching
    `document` under TMP, or an {exit, error} in its place when it failed."""
    with tempfile.TemporaryDirectory() as tmp:
        ran = xferscope(build, command, "--no-history", "-o", tmp, *args, check=False)
        found = list(Path(tmp).glob(document))
        if ran.returncode != 0 or not found:
            return ran.stdout, {"exit": ran.returncode, "error": ran.stderr.strip()[-400:]}
        return ran.stdout, json.loads(found[0].read_text())


def gemm_from(build: Path) -> dict:
    _, doc = result_of(build, "gemm-*/gemm.json", "gemm", "--precision", "bf16", "--sizes", "4096")
    if "error" in doc:
        return doc
    point = doc["points"][0]
    return {
        "blas": doc["blas"],
        "tflops": point.get("tflops"),
        "status": point.get("status"),
        "verified": (point.get("verification") or {}).get("ok"),
    }


def trace_from(build: Path) -> dict:
    out, doc = result_of(
        build,
        "trace-*/trace-summary.json",
        "trace",
        "--reference",
        "none",
        "--",
        sys.executable,
        str(PROGRAM),
    )
    if "error" in doc:
        return doc
    moved = json.loads(next(x for x in out.splitlines() if x.startswith("{")))
    traced = {
        d: sum(c["bytes"] for c in doc["copies"] if c["direction"] == d) for d in ("h2d", "d2h")
    }
    return {
        "program_bytes": moved,
        "traced_bytes": traced,
        "all_bytes_traced": traced == moved,
        "copies": len(doc["copies"]),
    }


def libraries_from(build: Path) -> dict:
    """The cuBLASLt and CUPTI files the build finds."""
    return python_json(
        build,
        "import json; from xferscope.core import libraries as l; "
        "print(json.dumps({n: l.find(n) for n in ('cublasLt', 'cupti')}))",
    )


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--system", type=Path, required=True, help="the toolkit build's install")
    parser.add_argument("--wheel", type=Path, required=True, help="the PyPI-toolchain wheel's")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    builds = {"system": args.system.resolve(), "wheel": args.wheel.resolve()}

    runs: dict[str, list[dict[str, float]]] = {"system": [], "wheel": []}
    for r in range(args.rounds):  # alternated, each side first in turn
        for side in ("system", "wheel") if r % 2 == 0 else ("wheel", "system"):
            runs[side].append(quick_run(builds[side]))
            print(side, runs[side][-1], flush=True)
    comparisons = []
    for _, _, name in HEADLINES:
        wheel = statistics.median(x[name] for x in runs["wheel"])
        system = statistics.median(x[name] for x in runs["system"])
        comparisons.append(
            comparison(f"wheel_{name}", wheel, system, "toolkit build", "GB/s", True, 0.99)
        )
    figures = {
        "toolkit_visible": bool(shutil.which("nvcc"))
        or any(Path("/usr/local").glob("cuda*/bin/nvcc")),
        "engines": {side: engine_of(b) for side, b in builds.items()},
        "quick_runs": runs,
        "wheel_libraries": libraries_from(builds["wheel"]),
        "wheel_gemm": gemm_from(builds["wheel"]),
        "wheel_trace": trace_from(builds["wheel"]),
    }
    engine = NativeEngine()
    write_record(
        "wheel",
        args.commit,
        collect(engine, [0]),
        engine.device_count(),
        comparisons,
        figures,
        Path(args.out),
    )


if __name__ == "__main__":
    main()
