"""`xferscope run`'s short GL check: a few upload and readback paths of 2048x2048 RGBA8 (client
memory, PBOs, a persistent mapping, CUDA interop), 256 MiB each, verified, and the best of
each op. Well within 10 s on a GPU; where GL is missing it says why and the run goes on."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.engine import Engine
from ..core.errors import GlUnavailableError
from .measure import measure
from .states import GlOptions


@dataclass(frozen=True, slots=True)
class GlCheck:
    """The short OpenGL check of a run: the best upload and readback of a few paths (gl/check.py),
    or why GL was not there."""

    status: str  # complete, unavailable, failed, interrupted
    reason: str | None = None
    renderer: str | None = None
    upload_label: str | None = None
    upload_rate: float | None = None
    readback_label: str | None = None
    readback_rate: float | None = None
    unverified: tuple[str, ...] = ()  # paths whose test frame did not survive


CHECK_BYTES = 256 << 20
CHECK_LIMIT_S = 1.0
CHECK_SCENARIOS = tuple(
    {
        "op": op,
        "width": 2048,
        "height": 2048,
        "alignment": 4,
        "row_offset": 0,
        "format": "rgba",
        "type": "ubyte",
        "internal_format": "rgba8",
        "target": "2d",
        "fbo": True,
        "shader": False,
        "usage": "none",
        "draw": "quad" if op == "readback" else "none",
        "method": method,
        "pbos": pbos,
    }
    for op, method, pbos in (
        ("upload", "texsubimage", 0),
        ("upload", "texsubimage", 1),
        ("upload", "persistent", 3),
        ("upload", "cuda_interop", 0),
        ("readback", "readpixels", 0),
        ("readback", "readpixels", 2),
        ("readback", "cuda_interop", 0),
    )
)


def gl_check(engine: Engine, device: int) -> GlCheck:
    """The best verified upload and readback of CHECK_SCENARIOS on one GPU. Raises
    KeyboardInterrupt when a stop came during it."""
    options = GlOptions(
        ops=(),
        extra=CHECK_SCENARIOS,
        bytes=CHECK_BYTES,
        limit_s=CHECK_LIMIT_S,
        baseline=False,
        device=device,
    )
    try:
        result = measure(engine, options)
    except GlUnavailableError as exc:
        return GlCheck("unavailable", str(exc))
    if result.interrupted:
        raise KeyboardInterrupt
    up, down = result.best("upload"), result.best("readback")
    failed = [s for s in result.scenarios if s.status == "failed"]
    return GlCheck(
        "complete" if up and down else "failed",
        "; ".join(f"{s.label}: {s.error}" for s in failed) or None,
        result.gl.get("renderer"),
        up.label if up else None,
        up.rate if up else None,
        down.label if down else None,
        down.rate if down else None,
        tuple(s.label for s in result.scenarios if s.verified is False),
    )
