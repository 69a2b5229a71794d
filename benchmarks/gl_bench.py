"""OpenGL benchmark (issue 10), on one GPU in one run: `xferscope gl --survey` (every group seed
000 reports on, each scenario verified, 1 GiB per scenario by default) with CUDA pinned
cudaMemcpy of the same bytes as the baseline, and the time `xferscope run` spends on its GL
check. Writes benchmarks/results/gl-<gpu>-<date>.json as ../shared/BENCHMARKS.md says, and the
survey's own document beside it (gl-survey-<gpu>-<date>.json).

    python3 benchmarks/gl_bench.py --commit $(git rev-parse HEAD) [--bytes 1GiB] [--out DIR]
"""

from __future__ import annotations

import datetime as dt
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from foundation import bench_parser, comparison, gpu_tag, write_record
from xferscope.core.engine import NativeEngine
from xferscope.core.machine import collect
from xferscope.core.units import parse_size
from xferscope.gl.check import gl_check
from xferscope.gl.measure import measure
from xferscope.gl.records import GlResult, ScenarioResult, dumps_json
from xferscope.gl.states import GlOptions
from xferscope.gl.survey import survey

HERE = Path(__file__).resolve().parent


class Printer:
    def begin(self, label: str) -> None:
        print(label, flush=True)

    def step(self, label: str) -> None:
        pass


def find(result: GlResult, label: str) -> ScenarioResult | None:
    return next((s for s in result.scenarios if s.label == label), None)


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--bytes", default="1GiB", help="bytes per scenario")
    parser.add_argument("--limit", type=float, default=20.0, help="seconds per scenario")
    args = parser.parse_args()

    engine = NativeEngine()
    meta = collect(engine, [0])
    start = time.perf_counter()
    check = gl_check(engine, 0)
    check_s = time.perf_counter() - start
    options = GlOptions(
        ops=(),
        extra=survey(),
        bytes=float(parse_size(args.bytes)),
        limit_s=args.limit,
        device=0,
        preset="survey",
    )
    start = time.perf_counter()
    result = measure(engine, options, Printer())
    survey_s = time.perf_counter() - start
    tag = gpu_tag(meta["gpus"][0]["name"], 1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    survey_path = out / f"gl-survey-{tag}-{dt.date.today():%Y%m%d}.json"
    survey_path.write_text(dumps_json(result))

    up, down = result.best("upload"), result.best("readback")
    assert up and down and up.rate and down.rate, "no verified upload or readback"
    comparisons = []
    for name, best in (("upload", up), ("readback", down)):
        base = result.baseline(name, best.frame_bytes)
        assert base is not None and base.rate
        comparisons.append(
            comparison(
                f"gl_{name}_best_vs_cuda_pinned_memcpy",
                best.rate / 1e9,
                base.rate / 1e9,
                "CUDA pinned cudaMemcpy of the same bytes (xferscope engine)",
                "GB/s",
                True,
                0.0,  # no goal: how close GL comes to CUDA is what is measured
            )
        )
    hidden = [(s.hidden_share(), s) for s in result.scenarios if s.hidden_share() is not None]
    share, best_async = max(hidden, key=lambda h: h[0] or 0.0)
    figures: dict[str, object] = {
        "gl_upload_best_gbps": round(up.rate / 1e9, 3),
        "gl_upload_best_states": up.states,
        "gl_upload_best_label": up.label,
        "gl_readback_best_gbps": round(down.rate / 1e9, 3),
        "gl_readback_best_states": down.states,
        "gl_readback_best_label": down.label,
        "gl_async_hidden_share": round(share or 0.0, 4),
        "gl_async_best_label": best_async.label,
        "gl_async_best_pbos": best_async.states["pbos"],
        "survey_scenarios": len(result.scenarios),
        "survey_unverified": sum(1 for s in result.scenarios if s.verified is False),
        "survey_failed": sum(1 for s in result.scenarios if s.status == "failed"),
        "survey_bytes_per_scenario": options.bytes,
        "survey_wall_s": round(survey_s, 1),
        "run_gl_check_wall_s": round(check_s, 2),
        "run_gl_check": check.to_dict(),
        "renderer": result.gl.get("renderer"),
        "gl_version": result.gl.get("version"),
        "survey_document": survey_path.name,
    }
    for label in (
        "upload 4096x4096 texsubimage rgba/ubyte>rgba8 fbo",
        "upload 4096x4096 texsubimage rgba/ubyte>rgba8 fbo pbo1:stream_draw",
        "readback 4096x4096 readpixels rgba/ubyte>rgba8 fbo",
        "readback 4096x4096 readpixels rgba/ubyte>rgba8 fbo draw:repeat",
        "readback 4096x4096 readpixels rgba/ubyte>rgba8 fbo pbo2:stream_read",
    ):
        s = find(result, label)
        if s is not None and s.rate:
            figures[label.replace(" ", "_")] = round(s.rate / 1e9, 3)
    path = write_record("gl", args.commit, meta, 1, comparisons, figures, out)
    print(f"wrote {path} and {survey_path}")
    for f in result.findings:
        print(f.message)


if __name__ == "__main__":
    main()
