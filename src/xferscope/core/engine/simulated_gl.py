"""The simulated engine's OpenGL: the same scenario rules (the engine's gl_refusal and
gl_normalised), the same result classes, and a model of an H100's GL paths as measured there
(texsubimage 4.5 GB/s, a PBO source 11, CUDA interop 26; readpixels 11.8, gettexture 3.8;
floats into a half-float texture converted on the CPU at 0.27), with the down-conversion a real
driver does: the stored bits decide whether the test frame survives."""

from __future__ import annotations

from typing import Any

from ..compiled import engine_module
from ..errors import GlError
from .simulated_link import SimulatedHost

_e = engine_module()
_TYPES = {name: (bytes_, kind) for name, _, bytes_, kind in _e.GL_TYPES}
_INTERNAL = {name: (comps, bits, store) for name, _, comps, bits, store in _e.GL_INTERNAL_FORMATS}
_FORMATS = {name: (comps, integer) for name, _, comps, integer in _e.GL_FORMATS}

_UPLOAD_GBPS = {
    "texsubimage": 4.5,
    "texsubimage_dsa": 4.9,
    "drawpixels": 3.7,
    "persistent": 11.3,
    "cuda_interop": 26.0,
}
_READBACK_GBPS = {"readpixels": 11.8, "gettexture": 3.8, "cuda_interop": 17.8}
# The model's GPU refuses textures larger than this, as a real one runs out of memory.
MOST_TEXTURE_BYTES = 4 << 30
_SIGNIFICANT_BITS = {"byte": 7, "ubyte": 8, "short": 15, "ushort": 16, "int": 31, "uint": 32}


def _stored_bits(internal: str) -> tuple[int, bool]:
    """Bits per component a texture keeps, and whether they are float (unsized: 8-bit)."""
    _, bits, store = _INTERNAL[internal]
    return (bits or 8), store == "float"


def gl_error(s: Any) -> str | None:
    """What the GL itself would say of states the engine's session leaves to it (the engine's
    gl_api_refusal: its rule, as the planner applies it), as the driver says it."""
    if not _e.gl_api_refusal(s):
        return None
    call = "glDrawPixels" if s.internal_format == "none" else "glTexImage2D"
    return f"{call} failed for {label(s)}: GL_INVALID_OPERATION"


def label(s: Any) -> str:
    return f"{s.op} {s.width}x{s.height} {s.method} {s.format}/{s.type} -> {s.internal_format}"


def survives(s: Any) -> bool:
    """Whether the test frame comes back exactly: the store holds every component and bit."""
    if _INTERNAL[s.internal_format][0] < _FORMATS[s.format][0]:
        return False
    bits, flt = _stored_bits(s.internal_format)
    kind = _TYPES[s.type][1]
    if kind == "float":
        return flt and bits == 32
    if kind == "half":
        return flt and bits >= 16
    needed = _SIGNIFICANT_BITS[s.type]
    if _INTERNAL[s.internal_format][2].endswith("integer"):
        return bits >= needed
    return (bits == 32 and needed <= 24) if flt else bits >= needed


def rate(s: Any) -> float:
    """Modelled bytes per second of one scenario."""
    bytes_, kind = _TYPES[s.type]
    if s.op == "upload":
        gbps = 11.1 if s.pbos and s.method != "persistent" else _UPLOAD_GBPS[s.method]
        if s.format == "bgra":
            gbps *= 0.45
        if kind == "float" and _stored_bits(s.internal_format) == (16, True):
            gbps = 0.27  # converted on the CPU
    else:
        gbps = _READBACK_GBPS[s.method]
        if s.pbos and s.method != "cuda_interop":
            gbps = 11.6 if s.pbos > 1 else 8.4
        if s.draw == "pixel":
            gbps *= 0.27
    if kind in ("signed", "unsigned") and bytes_ > 1:
        gbps *= 0.5
    if s.alignment < 4 and s.row_bytes % 4:
        gbps *= 0.6
    return gbps * 1e9


class SimulatedGlSession:
    def __init__(self, engine: SimulatedHost, scenario: Any) -> None:
        self._engine = engine
        self.scenario = _e.gl_normalised(scenario)
        reason = _e.gl_refusal(self.scenario)
        if reason and reason != _e.gl_api_refusal(self.scenario):  # the engine's own rules
            raise GlError(reason)
        comps, bits, _ = _INTERNAL[self.scenario.internal_format]
        if (
            self.scenario.width * self.scenario.height * comps * (bits or 8) // 8
            > MOST_TEXTURE_BYTES
        ):
            raise GlError(f"glTexImage2D failed for {label(self.scenario)}: GL_OUT_OF_MEMORY")
        refused = gl_error(self.scenario)
        if refused:
            raise GlError(refused)

    def verify(self) -> Any:
        s = self.scenario
        ok = survives(s) and not self._engine.corrupt
        compared = s.frame_bytes
        internal = "rgba8" if s.internal_format == "none" else s.internal_format
        bits, _ = _stored_bits(s.internal_format)
        comps, _, store = _INTERNAL[s.internal_format]
        sizes = [bits if i < comps else 0 for i in range(4)]
        self._engine.advance(2 * compared / rate(s))
        return _e.GlVerification(
            ok=ok,
            compared_bytes=compared,
            mismatched_bytes=0 if ok else compared // 2,
            first_mismatch=-1 if ok else 0,
            expected=0 if ok else 0x3F,
            actual=0 if ok else 0x3E,
            actual_internal_format=internal,
            red_bits=sizes[0],
            green_bits=sizes[1],
            blue_bits=sizes[2],
            alpha_bits=sizes[3],
            component_type={"float": "float", "unsigned_integer": "unsigned_int"}.get(
                store, "int" if store == "signed_integer" else "unsigned_normalized"
            ),
        )

    def run(self, frames: int, work_s: float = 0.0, log: bool = False) -> Any:
        if frames < 1:
            raise GlError("a run needs at least one frame")
        s = self.scenario
        noise = 1.0 + abs(self._engine.rng.normal(0.0, self._engine.noise))
        t = s.frame_bytes / rate(s) * noise + 20e-6  # one frame's transfer
        asynchronous = (s.pbos > 0 and s.method != "persistent") or s.method == "persistent"
        if asynchronous:  # the transfer runs while the CPU works; the map waits for the rest
            call, map_ = 1e-5, max(0.0, t - work_s)
        else:
            call, map_ = t, 0.0
        frame = call + map_ + work_s
        total = frames * frame
        self._engine.advance(total)
        frame_log = [_e.GlFrame(call_s=call, map_s=map_, work_s=work_s)] * (frames if log else 0)
        return _e.GlRunTiming(
            seconds=total,
            frames=frames,
            bytes=frames * s.frame_bytes,
            call_s=frames * call,
            map_s=frames * map_,
            work_s=frames * work_s,
            log=frame_log,
        )

    def close(self) -> None:
        pass


class SimulatedGl:
    def __init__(self, engine: SimulatedHost, device: int) -> None:
        self._engine = engine
        self._device = device

    def info(self) -> dict[str, Any]:
        return {
            "cuda_device": self._device,
            "egl_device": self._device,
            "egl_vendor": "NVIDIA",
            "egl_version": "1.5",
            "vendor": "NVIDIA Corporation",
            "renderer": "SIMULATED H100/PCIe/SSE2",
            "version": "4.6.0 NVIDIA (simulated)",
            "shading_language": "4.60 NVIDIA",
            "max_texture_size": 32768,
            "buffer_storage": True,
            "direct_state_access": True,
        }

    def session(self, scenario: Any) -> SimulatedGlSession:
        return SimulatedGlSession(self._engine, scenario)

    def close(self) -> None:
        pass
