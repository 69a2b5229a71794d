"""`xferscope gl` without a GPU: the engine's rules of which states combine, the plan (cross
product, normalised, no duplicates, refusals kept), option errors, and whole runs through the
simulated GL: verification and down-conversion, the time limiter, the asynchronous mode, a
failing scenario, Ctrl-C, the documents and `report`. tests/gpu/test_gl_gpu.py runs the GL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from xferscope import _engine, cli
from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.gl import measure as gl_measure
from xferscope.gl import records as gl_records
from xferscope.gl import states
from xferscope.gl.survey import comparisons, survey

ENGINE = "xferscope.cli.common.open_engine"
QUICK = ["gl", "--simulate", "--bytes", "64MiB", "--size", "512"]


@pytest.fixture(autouse=True)
def history(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "history.sqlite3"
    monkeypatch.setenv("XFERSCOPE_HISTORY", str(path))
    return path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def refusal(**states_: object) -> str:
    return str(_engine.gl_refusal(_engine.GlScenario(width=64, height=64, **states_)))


# ---- the rules ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("states_", "words"),
    [
        ({"op": "sideways"}, "op 'sideways' is not upload or readback"),
        ({"op": "upload", "method": "readpixels"}, "method 'readpixels' is not one of"),
        ({"op": "upload", "format": "argb"}, "format 'argb' is not one of red, rg, rgb"),
        ({"op": "upload", "type": "double"}, "type 'double' is not one of"),
        ({"op": "upload", "internal_format": "rgba9"}, "internal format 'rgba9'"),
        ({"op": "upload", "alignment": 3}, "alignment 3 is not 1, 2, 4 or 8"),
        ({"op": "upload", "row_offset": 4096}, "row offset 4096 is not 0 to 4095"),
        ({"op": "upload", "pbos": 65}, "pbos 65 is not 0 to 64"),
        ({"op": "upload", "method": "persistent"}, "pbos must be 1 or more"),
        ({"op": "readback", "method": "gettexture", "fbo": False}, "it needs an FBO"),
        ({"op": "upload", "internal_format": "none"}, "needs a texture"),
        ({"op": "upload", "method": "cuda_interop", "pbos": 1}, "pbos must be 0"),
        ({"op": "upload", "method": "cuda_interop", "internal_format": "rgba"}, "not rgba"),
        (
            {"op": "upload", "method": "cuda_interop", "format": "rgb", "internal_format": "rgb8"},
            "registers textures of 1, 2 or 4 whole components",
        ),
        (
            {"op": "upload", "method": "cuda_interop", "format": "bgra"},
            "bgra/ubyte is not the layout of rgba8",
        ),
        (
            {"op": "upload", "method": "cuda_interop", "type": "float"},
            "rgba/float is not the layout of rgba8",
        ),
        # what the GL itself refuses (GL_INVALID_OPERATION), known before asking it
        ({"op": "upload", "format": "red_integer", "type": "half"}, "--type: an _integer format"),
        (
            {"op": "upload", "format": "rgba_integer", "type": "uint"},
            "--internal: rgba8 stores normalized or float values",
        ),
        (
            {
                "op": "readback",
                "method": "readpixels",
                "format": "rgba_integer",
                "type": "int",
                "fbo": False,
                "internal_format": "none",
            },
            "--internal: the default framebuffer (RGBA8) stores normalized or float values",
        ),
        (
            {"op": "upload", "format": "bgra", "type": "int", "internal_format": "rgba32i"},
            "--internal: an integer texture (rgba32i) takes only _integer formats, not bgra",
        ),
    ],
)
def test_the_engine_refuses_states_that_cannot_combine(states_, words):
    assert words in refusal(**states_)


@pytest.mark.parametrize(
    "states_",
    [
        {"op": "upload"},
        {"op": "upload", "method": "cuda_interop", "type": "float", "internal_format": "rgba32f"},
        {"op": "upload", "method": "persistent", "pbos": 3},
        {"op": "upload", "method": "drawpixels", "fbo": False, "internal_format": "none"},
        {"op": "readback", "method": "readpixels", "pbos": 4, "draw": "pixel"},
        {
            "op": "readback",
            "method": "cuda_interop",
            "format": "red",
            "type": "half",
            "internal_format": "r16f",
        },
    ],
)
def test_the_engine_accepts_states_that_combine(states_):
    assert refusal(**states_) == ""


def test_normalising_sets_what_a_scenario_ignores():
    s = states.scenario(op="readback", width=8, height=8, method="readpixels", fbo=False, pbos=2)
    assert (s.internal_format, s.target, s.usage, s.draw) == ("none", "none", "stream_read", "quad")
    u = states.scenario(op="upload", width=8, height=8, draw="pixel", usage="static_draw")
    assert (u.draw, u.usage) == ("none", "none")  # no PBOs: no usage hint


def test_sizes_of_a_frame_count_padding_in_host_memory_only():
    s = _engine.GlScenario(op="upload", width=5, height=3, format="rgb", alignment=8)
    assert (s.pixel_bytes, s.row_bytes, s.row_stride, s.frame_bytes) == (3, 15, 16, 45)


# ---- the plan ----------------------------------------------------------------------------------


def test_the_plan_is_the_cross_product_without_duplicates_and_with_refusals():
    options = states.GlOptions(
        methods=("texsubimage", "drawpixels", "readpixels", "gettexture"),
        fbos=(True, False),
        internal_formats=("rgba8", "rgba32f"),
    )
    planned, refused = states.plan_scenarios(options)
    labels = [states.label(p.scenario) for p in planned]
    assert len(labels) == len(set(labels))
    # drawpixels and readpixels into the default framebuffer ignore the internal format: once
    assert sum("drawpixels rgba/ubyte>none nofbo" in x for x in labels) == 1
    assert sum("readpixels rgba/ubyte>none nofbo" in x for x in labels) == 1
    # upload: texsubimage 2 fbo x 2 internal + drawpixels 2 + 1; readback: readpixels 2 + 1,
    # gettexture 2 (fbo on)
    assert len(planned) == 4 + 3 + 3 + 2
    assert {why for _, why in refused} == {
        "--fbo: gettexture reads the texture the frame is drawn into: it needs an FBO (fbo on)"
    }
    assert not any(p.asynchronous for p in planned)


def test_the_survey_preset_plans_every_group_the_paper_reports_on():
    planned, refused = states.plan_scenarios(states.GlOptions(ops=(), extra=survey()))
    assert not refused and len(planned) > 60
    methods = {p.scenario.method for p in planned}
    assert methods == {*states.UPLOAD_METHODS, *states.READBACK_METHODS}
    assert {p.scenario.pbos for p in planned if p.asynchronous} == {1, 2, 4}
    assert {p.scenario.width for p in planned} >= {512, 1024, 2048, 4096}


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--size", "0"], "--size: '0' is not a size N or WxH"),
        (["--size", "12x34x5"], "--size: '12x34x5'"),
        (["--format", "argb"], "--format: unknown value 'argb' (accepted: red, rg, rgb, rgba,"),
        (["--type", "double"], "--type: unknown value 'double' (accepted: byte, ubyte,"),
        (["--internal", "rgba9"], "--internal: unknown value 'rgba9'"),
        (["--alignment", "3"], "--alignment: '3' is not one of 1, 2, 4, 8"),
        (["--pbos", "65"], "--pbos: '65' is not a whole number from 0 to 64"),
        (["--fbo", "maybe"], "--fbo: unknown value 'maybe'"),
        (["--op", "upload", "--method", "readpixels"], "--method: unknown value 'readpixels'"),
        (["--work", "soon"], "--work: 'soon' is not a time"),
        (["--bytes", "lots"], "--bytes: 'lots'"),
        (["--limit", "0"], "--limit: '0' is not a number of seconds above 0"),
        (["--survey", "--format", "bgra"], "--survey runs its own scenarios"),
        (
            ["--op", "readback", "--method", "gettexture", "--fbo", "off"],
            "--fbo: no scenario of these states can run: readback",
        ),
        (
            ["--format", "rgba_integer", "--type", "float", "--internal", "rgba8"],
            "--type: no scenario of these states can run: upload 512x512 texsubimage "
            "rgba_integer/float>rgba8 fbo: an _integer format (rgba_integer) takes byte, ubyte,",
        ),
        (
            ["--format", "rgba_integer", "--type", "uint", "--internal", "rgba8"],
            "--internal: no scenario of these states can run: upload 512x512 texsubimage "
            "rgba_integer/uint>rgba8 fbo: rgba8 stores normalized or float values",
        ),
        (
            ["--format", "rgba", "--internal", "rgba32ui"],
            "--internal: no scenario of these states can run: upload 512x512 texsubimage "
            "rgba/ubyte>rgba32ui fbo: an integer texture (rgba32ui) takes only _integer formats",
        ),
        (["--device", "3"], "--device"),
    ],
)
def test_bad_states_are_one_line_errors(capsys, tmp_path, args, fragment):
    code, _, err = run(capsys, *QUICK, "-o", str(tmp_path), *args)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code != 0 and len(lines) == 1 and lines[0].startswith("Error: "), err
    assert fragment in lines[0], lines[0]
    assert "Traceback" not in err
    assert not list(tmp_path.iterdir())  # nothing measured, nothing left behind


# ---- whole runs --------------------------------------------------------------------------------


def _document(out: Path) -> dict:
    (path,) = out.glob("gl-*/gl.json")
    return json.loads(path.read_text())


def test_a_run_verifies_times_and_flags_down_conversion(capsys, tmp_path):
    code, out, err = run(
        capsys, *QUICK, "-o", str(tmp_path), "--type", "ubyte,float", "--internal", "rgba,rgba32f"
    )
    assert code == 0, err
    doc = _document(tmp_path)
    assert doc["schema"] == "xferscope-gl" and doc["simulated"] is True
    by_label = {s["label"]: s for s in doc["scenarios"]}
    lossy = by_label["upload 512x512 texsubimage rgba/float>rgba fbo"]
    assert lossy["verification"]["ok"] is False
    assert lossy["verification"]["bits"][0] == 8
    exact = by_label["upload 512x512 texsubimage rgba/float>rgba32f fbo"]
    assert exact["verification"]["ok"] is True and exact["status"] == "complete"
    assert exact["timing"]["bytes"] >= 64 << 20 and exact["rate"] > 1e9
    codes = {f["code"] for f in doc["findings"]}
    assert {"gl_unverified", "gl_best_upload", "gl_best_readback"} <= codes
    unverified = next(f for f in doc["findings"] if f["code"] == "gl_unverified")
    assert "down-conversion" in unverified["cause"] and "rgba32f" in unverified["fix"]
    assert {b["op"] for b in doc["baselines"]} == {"upload", "readback"}
    assert "FAILED (rgba)" in out and "x CUDA pinned" in out
    (directory,) = tmp_path.glob("gl-*")
    assert (directory / "gl.csv").read_text().count("\n") == 1 + len(doc["scenarios"])
    assert (directory / "gl-rates.png").stat().st_size > 10_000


def test_the_limiter_estimates_a_scenario_that_would_take_too_long(capsys, tmp_path):
    code, out, err = run(capsys, *QUICK, "-o", str(tmp_path), "--bytes", "64GiB", "--limit", "1")
    assert code == 0, err
    doc = _document(tmp_path)
    for s in doc["scenarios"]:
        assert s["status"] == "estimated" and s["estimated_s"] > 1
        assert s["timing"]["frames"] == states.LIMITER_FRAMES
    assert "estimated" in out
    assert any(f["code"] == "gl_estimated" for f in doc["findings"])


def test_the_asynchronous_mode_gives_table_1_and_the_share_hidden(capsys, tmp_path):
    code, out, err = run(
        capsys, *QUICK, "-o", str(tmp_path), "--op", "readback", "--pbos", "0,2", "--work", "auto"
    )
    assert code == 0, err
    doc = _document(tmp_path)
    pbo, client = (next(s for s in doc["scenarios"] if s["states"]["pbos"] == n) for n in (2, 0))
    assert len(pbo["asynchronous"]) == len(states.AUTO_WORK_SHARES)
    assert pbo["hidden_share"] > 0.8  # the PBOs hide the work
    assert client["hidden_share"] < 0.2  # a blocking readback hides nothing
    row = pbo["asynchronous"][3]
    assert row["work_s"] > 0 and row["map_s"] >= 0 and row["call_s"] > 0
    assert "map blocking" in out and "read blocking" in out and "work hidden" in out
    (directory,) = tmp_path.glob("gl-*")
    assert (directory / "gl-async.png").exists()


def test_a_failing_scenario_costs_no_other(capsys, tmp_path):
    code, _, err = run(
        capsys,
        *QUICK,
        "-o",
        str(tmp_path),
        "--op",
        "upload",
        "--size",
        "512,32768",
        "--type",
        "float",
        "--internal",
        "rgba32f",
    )
    assert code == 0, err
    doc = _document(tmp_path)
    failed = [s for s in doc["scenarios"] if s["status"] == "failed"]
    assert len(failed) == 1 and "GL_OUT_OF_MEMORY" in failed[0]["error"]
    assert any(s["status"] == "complete" for s in doc["scenarios"])
    assert any(f["code"] == "gl_failed" for f in doc["findings"])


def test_ctrl_c_keeps_the_scenarios_measured(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(ENGINE, lambda simulate: SimulatedEngine(interrupt_after=12))
    code, _, err = run(capsys, *QUICK, "-o", str(tmp_path), "--pbos", "0,1,2,4")
    assert code == cli.EXIT_INTERRUPTED, err
    doc = _document(tmp_path)
    assert doc["interrupted"] is True
    assert doc["scenarios"] and doc["scenarios"][-1]["status"] in ("interrupted", "complete")


def test_the_document_reads_back_and_report_draws_it_again(capsys, tmp_path):
    assert run(capsys, *QUICK, "-o", str(tmp_path / "a"), "--pbos", "0,2", "--work", "1ms")[0] == 0
    (path,) = (tmp_path / "a").glob("gl-*/gl.json")
    doc = json.loads(path.read_text())
    again = gl_records.to_dict(gl_records.from_dict(doc))
    assert again == doc
    code, out, err = run(capsys, "report", str(path), "-o", str(tmp_path / "b"))
    assert code == 0, err
    assert "scenarios" in out
    assert list((tmp_path / "b").glob("*/gl.json"))


def test_comparisons_name_the_state_that_differs():
    options = states.GlOptions(
        ops=("upload",), sizes=((256, 256),), formats=("rgba", "bgra"), bytes=1 << 24
    )
    result = gl_measure.measure(SimulatedEngine(), options)
    (c,) = comparisons(result)
    assert (c.op, c.state, c.faster, c.slower, c.pairs, c.agreeing) == (
        "upload",
        "format",
        "rgba",
        "bgra",
        1,
        1,
    )
    assert c.ratio > 1.5
    sentence = next(f.message for f in result.findings if f.code == "gl_state")
    assert sentence.startswith(f"uploads: format rgba is {c.ratio:.2f}x as fast as format bgra")


def test_differences_within_the_noise_are_not_stated():
    from dataclasses import replace

    options = states.GlOptions(
        ops=("upload",), sizes=((256, 256),), formats=("rgba", "bgra"), bytes=1 << 24
    )
    result = gl_measure.measure(SimulatedEngine(), options)
    noisy = tuple(
        replace(s, trial_rates=(s.rate * 0.2, s.rate, s.rate * 5)) for s in result.scenarios
    )
    assert comparisons(replace(result, scenarios=noisy)) == []


def test_a_missing_gl_library_is_one_line_naming_the_package():
    """Run apart: the loader is loaded once per process."""
    env = dict(os.environ, XFERSCOPE_LIBEGL="/nonexistent/libEGL.so.1")
    code = (
        "from xferscope import _engine as e\n"
        "try:\n    e.GlContext(0)\nexcept e.GlUnavailable as x:\n    print(x)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out.startswith("cannot load /nonexistent/libEGL.so.1 (Debian/Ubuntu package libegl1")
    assert out.count("\n") == 1


def test_results_go_to_the_history_and_come_back(capsys, tmp_path, history):
    code, _, err = run(capsys, *QUICK, "-o", str(tmp_path / "a"), "--op", "upload")
    assert code == 0 and "saved as run 1 in" in err, err
    code, out, err = run(capsys, "history", "--json")
    (entry,) = json.loads(out)
    assert entry["kind"] == "gl" and entry["mode"] == "gl" and entry["simulated"] is True
    code, out, err = run(capsys, "report", "1", "-o", str(tmp_path / "b"))
    assert code == 0, err
    assert "upload 512x512 texsubimage" in out
    assert list((tmp_path / "b").glob("gl-1/gl.json"))
    code, _, err = run(capsys, "compare", "1", "1")
    assert code != 0 and "is an `xferscope gl` result, not a run" in err
    assert "Traceback" not in err
    code, _, err = run(capsys, *QUICK, "-o", str(tmp_path / "c"), "--op", "upload", "--no-history")
    assert code == 0 and "saved as" not in err
