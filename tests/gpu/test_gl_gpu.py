"""OpenGL through EGL on a real GPU: the context is the CUDA device's, every method moves a test
frame exactly, a planted down-conversion is flagged with the format the driver chose, a GL
error costs only its scenario, PBOs hide CPU work, and `xferscope gl` runs whole. Skipped
without a GPU, or without the GL loader libraries (the message says which)."""

from __future__ import annotations

import json

import pytest

from xferscope import cli
from xferscope.core.errors import GlError, GlUnavailableError
from xferscope.gl import measure as gl_measure
from xferscope.gl import records as gl_records
from xferscope.gl import states

pytestmark = pytest.mark.gpu
N = 1024


@pytest.fixture(scope="module")
def gl(native_engine):
    try:
        context = native_engine.gl_context(0)
    except GlUnavailableError as exc:
        pytest.skip(f"no GL: {exc}")
    yield context
    context.close()


def _session(gl, **states_):
    states_.setdefault("method", "texsubimage" if states_["op"] == "upload" else "readpixels")
    states_.setdefault("width", N)
    states_.setdefault("height", N)
    return gl.session(states.scenario(**states_))


def test_the_context_is_the_cuda_device(gl, native_engine):
    info = gl.info()
    assert info["cuda_device"] == 0 and info["vendor"].startswith("NVIDIA")
    name = native_engine.device_info(0)["name"].replace("NVIDIA ", "")
    assert name.split()[0] in info["renderer"]
    assert info["version"].startswith("4.") and info["buffer_storage"]


@pytest.mark.parametrize(
    "states_",
    [
        {"op": "upload", "method": m, "pbos": p}
        for m, p in (
            ("texsubimage", 0),
            ("texsubimage", 2),
            ("texsubimage_dsa", 0),
            ("drawpixels", 0),
            ("drawpixels", 1),
            ("persistent", 3),
            ("cuda_interop", 0),
        )
    ]
    + [
        {"op": "readback", "method": m, "pbos": p}
        for m, p in (
            ("readpixels", 0),
            ("readpixels", 3),
            ("gettexture", 0),
            ("gettexture", 2),
            ("cuda_interop", 0),
        )
    ]
    + [
        {"op": "upload", "method": "drawpixels", "fbo": False},
        {"op": "readback", "method": "readpixels", "fbo": False},
        {"op": "upload", "format": "bgra", "shader": True, "target": "rectangle"},
        {
            "op": "readback",
            "format": "rgb",
            "internal_format": "rgb8",
            "alignment": 1,
            "row_offset": 3,
        },
        {"op": "upload", "type": "float", "internal_format": "rgba32f", "pbos": 1},
        {"op": "readback", "type": "half", "internal_format": "rgba16f", "pbos": 2},
        {"op": "upload", "format": "rgba_integer", "type": "uint", "internal_format": "rgba32ui"},
        {"op": "readback", "format": "rgba_integer", "type": "int", "internal_format": "rgba32i"},
        {
            "op": "upload",
            "method": "cuda_interop",
            "format": "red_integer",
            "type": "uint",
            "internal_format": "r32ui",
        },
    ],
)
def test_every_path_moves_the_test_frame_exactly(gl, states_):
    s = _session(gl, **states_)
    try:
        v = s.verify()
        assert v.ok, (states_, v.mismatched_bytes, v.actual_internal_format)
        t = s.run(5)
        assert t.frames == 5 and t.bytes == 5 * s.scenario.frame_bytes and t.seconds > 0
    finally:
        s.close()


def test_a_planted_down_conversion_is_flagged_with_what_the_driver_chose(gl):
    s = _session(gl, op="upload", type="float", internal_format="rgba")  # unsized: 8 bits
    try:
        v = s.verify()
        assert not v.ok and v.mismatched_bytes > 0
        assert v.red_bits == 8 and v.component_type == "unsigned_normalized"
    finally:
        s.close()
    s = _session(gl, op="readback", type="float", fbo=False)  # the default framebuffer: RGBA8
    try:
        assert not s.verify().ok
    finally:
        s.close()


def test_pbos_hide_cpu_work_and_a_blocking_read_does_not(gl):
    shares = {}
    for pbos in (0, 2):
        s = _session(gl, op="readback", pbos=pbos)
        try:
            s.run(10)
            base = s.run(40)
            frame = base.seconds / base.frames
            point = s.run(40, frame, False)
            times = [gl_measure._times(t, w) for t, w in ((base, 0.0), (point, frame))]
            shares[pbos] = gl_records.hidden(times[0], times[1])
        finally:
            s.close()
    assert shares[2] > 0.5 and shares[0] < 0.3, shares


def test_a_gl_error_costs_only_its_scenario(gl):
    # a normalized format into an integer texture: the GL's own rule, not the engine's
    with pytest.raises(GlError, match=r"glTexImage2D failed for upload .*GL_INVALID_OPERATION"):
        _session(gl, op="upload", format="rgba", type="uint", internal_format="rgba32ui")
    s = _session(gl, op="upload")
    try:
        assert s.verify().ok
    finally:
        s.close()


def _gl_refuses(gl, **states_: object) -> bool:
    """Whether the GL itself refuses these states (GL_INVALID_*), setting up or moving a
    frame."""
    try:
        s = _session(gl, width=64, height=64, **states_)
    except GlError as exc:
        assert "GL_INVALID" in str(exc), exc
        return True
    try:
        s.verify()
    except GlError as exc:
        assert "GL_INVALID" in str(exc), exc
        return True
    finally:
        s.close()
    return False


def test_the_gl_refuses_exactly_what_the_rule_says_it_does(gl):
    """The planner refuses what the GL would (gl_api_refusal); the session leaves it to the GL,
    so the driver is asked here, upload and readback, and must agree both ways."""
    from xferscope.core.compiled import engine_module

    disagree = []
    for op, fbo in (("upload", True), ("readback", True), ("readback", False)):
        for format_ in ("rgba", "red_integer", "rgba_integer"):
            for type_ in ("ubyte", "int", "half", "float"):
                for internal in ("rgba8", "rgba16f", "rgba32ui", "r32i") if fbo else ("none",):
                    given = {"op": op, "fbo": fbo, "format": format_, "type": type_,
                             "internal_format": internal}  # fmt: skip
                    rule = bool(engine_module().gl_api_refusal(states.scenario(
                        method="texsubimage" if op == "upload" else "readpixels",
                        width=64, height=64, **given)))  # fmt: skip
                    if rule != _gl_refuses(gl, **given):
                        disagree.append((given, rule))
    assert not disagree, disagree


def test_the_command_runs_whole(gl, capsys, tmp_path):
    code = cli.main(
        [
            "gl",
            "--bytes",
            "256MiB",
            "--pbos",
            "0,2",
            "--work",
            "auto",
            "--op",
            "readback",
            "-o",
            str(tmp_path),
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    (path,) = tmp_path.glob("gl-*/gl.json")
    doc = json.loads(path.read_text())
    assert doc["simulated"] is False and doc["gl"]["vendor"].startswith("NVIDIA")
    assert all(s["verification"]["ok"] for s in doc["scenarios"])
    assert doc["baselines"] and all(b["rate"] > 1e9 for b in doc["baselines"])
    assert "read blocking" in out
