"""`xferscope gemm` without a GPU: shapes and their alignment classes, the engine's rules, and
whole runs through the simulated engine (seed 003's table, skipped and failed points, a wrong
result, Ctrl-C, documents, history). tests/gpu/test_gemm_gpu.py runs cuBLASLt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xferscope import _engine, cli
from xferscope.core.simulate import SimulatedEngine
from xferscope.core.units import alignment_class
from xferscope.documents.reader import Field
from xferscope.gemm import measure as gm
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
    assert [s.m for s in parse_sizes("--sizes", "seed003")] == list(range(8128, 8181, 8))
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
        (["--samples", "1"], "--samples: 1 is not a count from 2 to 4096"),
        (["--precision", "fp8", "--sizes", "8136"], "nothing in this plan can run: fp8 GEMMs need"),
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


def test_a_shape_too_large_says_what_it_needs_and_the_rest_runs(capsys, tmp_path):
    code, _, err = run(
        capsys, *QUICK, "-o", str(tmp_path), "--precision", "fp64", "--sizes", "1024,200000"
    )
    assert code == 1, err
    doc = _document(tmp_path)
    failed = [p for p in doc["points"] if p["status"] == "failed"]
    assert len(failed) == 1 and "MiB free" in failed[0]["error"] and "need" in failed[0]["error"]
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
    assert gm.to_dict(gm.from_dict(doc)) == doc
    code, out, _ = run(capsys, "history", "--json")
    assert json.loads(out)[0]["kind"] == "gemm"
    code, out, err = run(capsys, "report", "1", "-o", str(tmp_path / "b"))
    assert code == 0, err and "GEMMs" in out


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
    fp64 = [c for c in doc["cpu"] if c["precision"] == "fp64"]
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
    options = gm.GemmOptions(precisions=("fp32",), shapes=parse_sizes("--sizes", "256,8192"))
    assert gm.classes(gm.measure(SimulatedEngine(), options), "fp32") == []


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
    point = gm.GemmPoint.read(Field(big))
    assert point.transfer_flops("pinned", True) > point.transfer_flops("pinned", False)
    assert point.transfer_flops("pageable") < point.transfer_flops("pinned") < point.flops
    codes = {f["code"] for f in doc["findings"]}
    assert {"gemm_transfers_fp32_pinned", "gemm_break_even_fp32_1"} <= codes
    assert "pinned seq" in out and "of compute-only in sequence" in out


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

    spec = _spec("fp64", Shape(2048, 2048, 2048), usable_cores()[:1], 30.0, 5, 1)
    interrupt.request()
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_worker(spec, 1)
    assert time.monotonic() - start < 1.0
