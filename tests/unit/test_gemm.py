"""`xferscope gemm` without a GPU: shapes and their alignment classes, the engine's rules, and
whole runs through the simulated engine (seed 003's table, skipped and failed points, a wrong
result, Ctrl-C, documents, history). tests/gpu/test_gemm_gpu.py runs cuBLASLt."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from xferscope import _engine, cli
from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.core.units import alignment_class
from xferscope.documents.reader import Field
from xferscope.documents.records import from_plain
from xferscope.gemm import measure as gm
from xferscope.gemm import records as gr
from xferscope.gemm.shapes import Shape, parse_shapes, parse_sizes, read_shapes

ENGINE = "xferscope.cli.common.open_engine"
QUICK = ["gemm", "--simulate", "--quick", "--trials", "3"]


@pytest.fixture(autouse=True)
def history(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "history.sqlite3"
    monkeypatch.setenv("XFERSCOPE_HISTORY", str(path))
    return path


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("dims", "klass"),
    [
        ((8128,), 64),
        ((8136,), 8),
        ((8192, 8192, 8192), 8192),
        ((8192, 8192, 8191), 1),
        ((4096, 1024, 768), 256),
        ((6,), 2),
    ],
)
def test_alignment_class_is_the_largest_power_of_two_dividing_all(dims, klass):
    assert alignment_class(*dims) == klass


def test_sizes_ranges_presets_and_shapes(tmp_path):
    assert [s.m for s in parse_sizes("--sizes", "near-8k")] == list(range(8128, 8181, 8))
    assert parse_sizes("--sizes", "1024, 96:128:16") == (
        Shape(1024, 1024, 1024),
        Shape(96, 96, 96),
        Shape(112, 112, 112),
        Shape(128, 128, 128),
    )
    assert parse_shapes("--shapes", "4096x1024x8192;1x2x3") == (
        Shape(4096, 1024, 8192),
        Shape(1, 2, 3),
    )
    f = tmp_path / "shapes.txt"
    f.write_text("# an app's GEMMs\n4096 4096 1024\n128x4096x4096  # decode\n\n")
    assert read_shapes("--shapes-file", str(f)) == (Shape(4096, 4096, 1024), Shape(128, 4096, 4096))
    assert Shape(8, 8, 8).flops == 1024.0


def test_the_engine_refuses_what_cannot_run():
    r = _engine.gemm_refusal
    assert r("fp32", 1024, 1024, 1024, False, False, 90) == ""
    assert "not one of fp64, fp32, tf32, fp16, bf16, fp8" in r("fp4", 8, 8, 8, False, False, 90)
    assert "needs compute capability 8.9 or newer; this GPU has 8.0" in r(
        "fp8", 1024, 1024, 1024, True, False, 80
    )
    assert "TN" in r("fp8", 1024, 1024, 1024, False, False, 90)
    assert "multiples of 16" in r("fp8", 8136, 8136, 8136, True, False, 90)
    assert "not a shape" in r("fp32", 0, 8, 8, False, False, 90)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--precision", "fp4"], "--precision: unknown value 'fp4'"),
        (["--sizes", "abc"], "--sizes: 'abc' is not a whole number"),
        (["--sizes", "100:50:8"], "--sizes: '100:50:8': the last size is below the first"),
        (["--shapes", "12x34"], "--shapes: '12x34' is not a shape MxNxK"),
        (
            ["--shapes-file", "/nonexistent/shapes"],
            "--shapes-file: cannot read /nonexistent/shapes",
        ),
        (["--trans", "xy"], "--trans: unknown value 'xy'"),
        (["--samples", "1"], "--samples: '1' is not a count from 2 to 4096"),
        (
            ["--precision", "fp8", "--sizes", "8136"],
            "--sizes: nothing in this plan can run: fp8 GEMMs need",
        ),
        (
            ["--precision", "fp8", "--sizes", "1024", "--trans", "nn"],
            "--trans: nothing in this plan can run: fp8 GEMMs run as op(A) = A^T",
        ),
    ],
)
def test_bad_input_is_one_line(capsys, tmp_path, args, fragment):
    code, _, err = run(capsys, *QUICK, "-o", str(tmp_path), *args)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code != 0 and len(lines) == 1 and lines[0].startswith("Error: "), err
    assert fragment in lines[0], lines[0]
    assert not list(tmp_path.iterdir())


def _document(out: Path) -> dict:
    (path,) = out.glob("gemm-*/gemm.json")
    return json.loads(path.read_text())


def test_a_run_gives_seed_003s_table_for_each_precision(capsys, tmp_path):
    code, out, err = run(capsys, *QUICK, "-o", str(tmp_path), "--precision", "fp32,bf16,fp8")
    assert code == 0, err
    doc = _document(tmp_path)
    assert doc["schema"] == "xferscope-gemm" and doc["simulated"] is True
    measured = [p for p in doc["points"] if p["status"] == "complete"]
    assert all(p["verification"]["ok"] and p["tflops"] > 0 for p in measured)
    fp8 = [p for p in doc["points"] if p["precision"] == "fp8"]
    assert all(p["trans_a"] and not p["trans_b"] for p in fp8)  # its own layout
    assert {p["status"] for p in fp8} == {"complete", "skipped"}
    table = doc["classes"]["fp32"]
    assert [c["alignment"] for c in table] == [64, 32, 16, 8]
    assert table[0]["mean_tflops"] > table[-1]["mean_tflops"]
    assert "mean throughput per alignment class" in out
    assert "shapes divisible by 64 run at" in out
    (directory,) = tmp_path.glob("gemm-*")
    assert (directory / "gemm.png").stat().st_size > 10_000
    assert (directory / "gemm.csv").read_text().count("\n") == 1 + len(doc["points"])


def test_a_wrong_result_fails_verification_and_exits_3(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(ENGINE, lambda simulate: SimulatedEngine(corrupt=True))
    code, out, err = run(
        capsys, *QUICK, "-o", str(tmp_path), "--precision", "fp32", "--sizes", "1024"
    )
    assert code == cli.EXIT_VERIFICATION_FAILED, err
    assert "FAILED" in out and "differ from the double-precision reference" in out


def test_a_shape_larger_than_the_gpu_is_refused_before_measuring(capsys, tmp_path):
    code, _, err = run(
        capsys, *QUICK, "-o", str(tmp_path), "--precision", "fp64", "--sizes", "1024,200000"
    )
    assert code == 2 and err.startswith("Error: --sizes: '200000'") and "in all" in err
    assert len(err.splitlines()) == 1 and not list(tmp_path.iterdir())


def test_a_shape_too_large_for_the_free_memory_says_what_it_needs_and_the_rest_runs(
    capsys, tmp_path
):
    # 66200^2 fp64 needs 140.3 GB: under the simulated GPU's 141 GB, over its 139.9 GB free
    code, _, err = run(
        capsys, *QUICK, "-o", str(tmp_path), "--precision", "fp64", "--sizes", "1024,66200"
    )
    assert code == 1, err
    doc = _document(tmp_path)
    failed = [p for p in doc["points"] if p["status"] == "failed"]
    assert len(failed) == 1 and "GiB free" in failed[0]["error"] and "need" in failed[0]["error"]
    assert any(p["status"] == "complete" for p in doc["points"])


def test_ctrl_c_keeps_the_gemms_measured(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(ENGINE, lambda simulate: SimulatedEngine(interrupt_after=60))
    code, _, _ = run(capsys, *QUICK, "-o", str(tmp_path), "--precision", "fp32,bf16")
    assert code == cli.EXIT_INTERRUPTED
    doc = _document(tmp_path)
    assert doc["interrupted"] is True and doc["points"]


def test_the_document_reads_back_and_goes_to_the_history(capsys, tmp_path):
    assert run(capsys, *QUICK, "-o", str(tmp_path / "a"), "--sizes", "1024,2048")[0] == 0
    (path,) = (tmp_path / "a").glob("gemm-*/gemm.json")
    doc = json.loads(path.read_text())
    assert gr.to_dict(gr.from_dict(doc)) == doc
    code, out, _ = run(capsys, "history", "--json")
    assert json.loads(out)[0]["kind"] == "gemm"
    code, out, err = run(capsys, "report", "1", "-o", str(tmp_path / "b"))
    assert code == 0, err
    assert "GEMMs" in out, out


def test_the_cpu_runs_the_same_gemms_on_1_to_all_threads(capsys, tmp_path):
    from xferscope.gemm.cpu import thread_counts, usable_cores

    code, out, err = run(
        capsys,
        *QUICK,
        "-o",
        str(tmp_path),
        "--precision",
        "fp64,bf16",
        "--sizes",
        "128",
        "--cpu",
        "auto",
    )
    assert code == 0, err
    doc = _document(tmp_path)
    fp64 = [c for c in doc["cpu"] if c["precision"] == "fp64" and c["role"] == "scaling"]
    assert [c["threads"] for c in fp64] == list(thread_counts(len(usable_cores())))
    assert all(c["verified"] and c["tflops"] > 0 for c in fp64)
    (bf16,) = [c for c in doc["cpu"] if c["precision"] == "bf16"]
    assert bf16["status"] == "skipped" and "no bf16 GEMM" in bf16["error"]
    assert doc["cpu_blas"]["internal_api"]
    assert "CPU GFLOP/s" in out and "the GPU computes" in out
    code, _, err = run(capsys, *QUICK, "-o", str(tmp_path / "x"), "--cpu", "4096")
    assert code == 2 and "--cpu: 4096 threads: this process may use" in err


def test_thread_counts_double_up_to_every_core():
    from xferscope.gemm.cpu import thread_counts

    assert thread_counts(1) == (1,)
    assert thread_counts(6) == (1, 2, 4, 6)
    assert thread_counts(16) == (1, 2, 4, 8, 16)


def test_alignment_classes_compare_only_shapes_of_a_size():
    options = gr.GemmOptions(precisions=("fp32",), shapes=parse_sizes("--sizes", "256,8192"))
    assert gr.classes(gm.measure(SimulatedEngine(), options), "fp32") == []


def test_transfers_in_sequence_and_tiles_and_where_the_gpu_pays(capsys, tmp_path):
    code, out, err = run(
        capsys,
        *QUICK,
        "-o",
        str(tmp_path),
        "--precision",
        "fp32",
        "--sizes",
        "128,2048",
        "--transfers",
        "pinned,pageable",
        "--cpu",
        "1",
        "--cpu-sizes",
        "128,512",
    )
    assert code == 0, err
    doc = _document(tmp_path)
    big = next(p for p in doc["points"] if p["m"] == 2048)
    forms = {(t["memory"], t["tiles"]) for t in big["transfers"]}
    assert forms == {("pinned", 1), ("pinned", 8), ("pageable", 1), ("pageable", 8)}
    assert all(t["delivered"] and t["seconds"] for t in big["transfers"])
    point = from_plain(gr.GemmPoint, Field(big))
    assert point.transfer_flops("pinned", True) > point.transfer_flops("pinned", False)
    assert point.transfer_flops("pageable") < point.transfer_flops("pinned") < point.flops
    codes = {f["code"] for f in doc["findings"]}
    assert {"gemm_transfers_fp32_pinned", "gemm_break_even_fp32_1"} <= codes
    assert "pinned seq" in out and "of compute-only in sequence" in out
    (paid,) = [f for f in doc["findings"] if f["code"] == "gemm_transfers_paid_fp32_pinned"]
    assert "from about N = " in paid["message"] and "(extrapolated)" in paid["message"]


def test_tiles_need_untransposed_b_and_say_so(capsys, tmp_path):
    code, _, err = run(
        capsys,
        *QUICK,
        "-o",
        str(tmp_path),
        "--precision",
        "fp32",
        "--sizes",
        "1024",
        "--trans",
        "nt",
    )
    assert code == 0, err
    (p,) = _document(tmp_path)["points"]
    tiled = next(t for t in p["transfers"] if t["tiles"] > 1)
    assert "need op(B) = B" in tiled["error"] and not tiled["delivered"]
    assert next(t for t in p["transfers"] if t["tiles"] == 1)["delivered"]


def test_a_stop_ends_a_cpu_worker_at_once():
    import time

    from xferscope.core import interrupt
    from xferscope.gemm.cpu import _spec, run_worker, usable_cores

    spec = _spec("fp64", [Shape(2048, 2048, 2048)], usable_cores()[:1], 30.0, 5, 1)
    interrupt.request()
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        list(run_worker(spec, 1))
    assert time.monotonic() - start < 1.0


def test_the_offload_ladder_finds_where_the_gpu_beats_the_cpu(capsys, tmp_path):
    code, out, err = run(
        capsys,
        *QUICK,
        "-o",
        str(tmp_path),
        "--precision",
        "fp32",
        "--sizes",
        "1024",
        "--cpu",
        "1",
        "--ladder",
        "16,64,256,1024",
    )
    assert code == 0, err
    doc = _document(tmp_path)
    assert [p["m"] for p in doc["ladder"]] == [16, 64, 256, 1024]
    assert all(p["transfers"] and p["transfers"][0]["tiles"] == 1 for p in doc["ladder"])
    ladder = [c for c in doc["cpu"] if c["role"] == "ladder"]
    assert ladder and {c["threads"] for c in ladder} == {1}
    # the CPU stops after the first size at which the GPU with its transfers beats it
    gpu = {
        p["m"]: from_plain(gr.GemmPoint, Field(p)).transfer_flops("pinned") for p in doc["ladder"]
    }
    beaten = [
        c["m"]
        for c in ladder
        if 2 * c["m"] ** 3 / sorted(c["seconds"])[len(c["seconds"]) // 2] < gpu[c["m"]]
    ]
    assert beaten and beaten[0] == ladder[-1]["m"]
    (finding,) = [f for f in doc["findings"] if f["code"] == "gemm_break_even_fp32_1"]
    assert f"from {beaten[0]} on" in finding["message"]
    assert "offload ladder" in out
    (png,) = tmp_path.glob("gemm-*/gemm.png")
    assert png.stat().st_size > 0
    (html,) = tmp_path.glob("gemm-*/report.html")
    page = html.read_text()
    for part in ("Throughput against size", "Every GEMM", "offload ladder", "gemm.json"):
        assert part in page, part


def test_poorly_aligned_shapes_are_timed_padded(capsys, tmp_path):
    code, out, err = run(
        capsys, *QUICK, "-o", str(tmp_path), "--precision", "fp32", "--sizes", "8128,8136"
    )
    assert code == 0, err
    doc = _document(tmp_path)
    aligned, poor = doc["points"]
    assert aligned["padded"] is None and aligned["pad_gain"] is None
    assert (poor["padded"]["m"], poor["padded"]["n"], poor["padded"]["k"]) == (8192, 8192, 8192)
    # the simulated GEMM at 8192 runs faster than at 8136 (class 8), copies included
    assert poor["pad_gain"] > 1.0
    (finding,) = [f for f in doc["findings"] if f["code"] == "gemm_padding_fp32"]
    assert "pays for 1 of them" in finding["message"] and "multiples of 64" in finding["message"]
    assert "padded" in out and "gain" in out
    code, _, err = run(capsys, *QUICK, "-o", str(tmp_path / "b"), "--sizes", "8136", "--pad", "off")
    assert code == 0, err
    assert all(p["padded"] is None for p in _document(tmp_path / "b")["points"])
    code, _, err = run(capsys, *QUICK, "-o", str(tmp_path / "c"), "--pad", "48")
    assert code == 2 and "--pad: '48' is not a power of two from 2 to 4096, or off" in err


def test_each_figure_is_set_against_the_peak_and_the_best():
    from xferscope.gemm.peak import peak

    h200 = {"name": "NVIDIA H200", "compute_capability": "9.0", "sm_count": 132}
    assert peak(h200, "bf16").flops == pytest.approx(989.4e12) and not peak(h200, "bf16").estimate
    assert peak({"name": "NVIDIA H100 PCIe"}, "fp64").flops == pytest.approx(51.2e12)
    assert peak({"name": "NVIDIA A100-SXM4-80GB"}, "fp8") is None  # A100 has no FP8
    unknown = {
        "name": "Some GPU",
        "compute_capability": "9.0",
        "sm_count": 100,
        "clock_khz": 2_000_000,
    }
    guess = peak(unknown, "fp32")
    assert guess.estimate and guess.flops == pytest.approx(100 * 2e9 * 256)
    assert "estimate: 100 SMs x 2.00 GHz" in guess.source
    assert peak({"name": "Some GPU", "compute_capability": "12.0", "sm_count": 1}, "fp32") is None
    options = gr.GemmOptions(precisions=("fp32",), shapes=parse_sizes("--sizes", "4096,8192"))
    result = gm.measure(SimulatedEngine(), options)
    of_peak, of_best = result.shares(result.best("fp32"))
    assert of_best == 1.0 and 0 < of_peak < 1
    doc = gr.to_dict(result)
    assert doc["peak"]["fp32"]["tflops"] == pytest.approx(66.9)
    assert all(0 < p["share_of_best"] <= 1 for p in doc["points"])
    best = next(f for f in result.findings if f.code == "gemm_best_fp32")
    assert "of the spec's peak 66.9 TFLOP/s" in best.message


def test_a_version_1_document_still_reads():
    options = gr.GemmOptions(precisions=("fp32",), shapes=parse_sizes("--sizes", "1024"))
    doc = gr.to_dict(gm.measure(SimulatedEngine(), options))
    doc["schema_version"] = 1
    for key in ("ladder", "peak"):
        del doc[key]
    for p in doc["points"]:
        del p["padded"]
    result = gr.from_dict(doc)
    assert result.ladder == () and result.points[0].padded is None


def test_a_missing_blas_is_one_line(monkeypatch):
    from xferscope.core.errors import OptionError
    from xferscope.gemm import cpu

    monkeypatch.setattr(cpu, "run_worker", lambda spec, threads: iter([{"blas": {}}]))
    with pytest.raises(OptionError, match="--cpu: NumPy uses no BLAS that threadpoolctl can name"):
        cpu.check_blas()

    def broken(spec, threads):
        raise cpu.XferscopeError(
            "the CPU GEMM worker failed: ModuleNotFoundError: No module named 'numpy'"
        )
        yield {}

    monkeypatch.setattr(cpu, "run_worker", broken)
    with pytest.raises(OptionError, match="--cpu: no CPU GEMM here: ModuleNotFoundError"):
        cpu.check_blas()


def test_the_blas_worker_measures_verifies_and_stops_once_beaten():
    from xferscope.gemm import cpu

    assert cpu.check_blas()["internal_api"]
    blas: dict = {}
    shapes = [Shape(n, n, n) for n in (8, 16, 32, 64)]
    # a rival far faster than any CPU at 16: the worker stops after that shape
    points = cpu.measure_cpu(
        ("fp32",), shapes, (1,), 0.002, 2, beat={"fp32": [None, 1e18, None, None]}, blas=blas
    )
    assert [p.m for p in points] == [8, 16]
    assert all(p.verified and p.flops and len(p.seconds) == 2 for p in points)
    assert blas["internal_api"] == cpu.check_blas()["internal_api"]


def test_two_gemm_studies_compare_and_a_run_does_not_compare_with_one(capsys, tmp_path):
    for name in ("a", "b"):
        code, _, err = run(
            capsys, *QUICK, "-o", str(tmp_path / name), "--sizes", "4096", "--precision", "fp32"
        )
        assert code == 0, err
    code, out, err = run(capsys, "compare", "1", "2", "--json", "--all")
    assert code == 0, err
    rows = {r["name"]: r for r in json.loads(out)["metrics"]}
    assert rows["fp32/4096/flops"]["unit"] == "FLOP/s"
    assert "fp32/4096/pinned_tiled/flops" in rows
    code, out, err = run(capsys, "compare", "1", "2", "--all")
    assert code == 0 and "TFLOP/s" in out
    assert run(capsys, "run", "--simulate", "--quick", "-o", str(tmp_path / "r"))[0] == 0
    code, _, err = run(capsys, "compare", "1", "3", "--force")
    assert code == 2 and "compare reads two results of one kind" in err


def test_the_ladder_stops_its_gpu_side_once_every_thread_count_is_beaten():
    """`run`'s check (ladder_full False) measures the GPU at the first round of sizes, and goes
    on to the rest only while a CPU thread count is still unbeaten; `gemm` measures them all."""
    ladder = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
    options = gr.GemmOptions(
        precisions=("fp32",), shapes=(), cpu_threads=(2,), cpu_shapes=(), offload=("fp32",),
        ladder=ladder, target_s=0.02,
    )  # fmt: skip
    full = gm.measure(SimulatedEngine(), options)
    short = gm.measure(SimulatedEngine(), replace(options, ladder_full=False))
    assert [p.m for p in full.ladder] == list(ladder)
    assert [p.m for p in short.ladder] == list(ladder[: gm.LADDER_FIRST_ROUND])
    # the same break-even either way
    for threads in (1, 2):
        assert full.offload("fp32", threads)[1] is not None
        pairs_full, first_full = full.offload("fp32", threads)
        pairs_short, first_short = short.offload("fp32", threads)
        assert pairs_full[first_full][0].m == pairs_short[first_short][0].m
    # a CPU the first round cannot beat: the second round is measured for it
    tiny = (2, 3, 4, 5, 6, 4096)
    later = gm.measure(SimulatedEngine(), replace(options, ladder_full=False, ladder=tiny))
    assert [p.m for p in later.ladder] == list(tiny)
    assert later.offload("fp32", 2)[0][later.offload("fp32", 2)[1]][0].m == 4096


def test_a_cpu_worker_started_ahead_measures_what_it_is_given_later():
    from xferscope.gemm import cpu
    from xferscope.gemm.shapes import Shape

    cpu.start_ahead((1,))
    assert len(cpu._ahead) == 1
    (started,) = cpu._ahead.values()
    points = cpu.measure_cpu(("fp32",), [Shape(16, 16, 16), Shape(32, 32, 32)], (1,), 0.001, 1)
    assert cpu._ahead == {} and started.poll() == 0, "the worker started ahead did the work"
    assert [(p.m, p.threads, p.status, p.verified) for p in points] == [
        (16, 1, "complete", True),
        (32, 1, "complete", True),
    ]
    cpu.start_ahead((1,))
    (unused,) = cpu._ahead.values()
    cpu.stop_ahead()
    assert cpu._ahead == {} and unused.poll() is not None
