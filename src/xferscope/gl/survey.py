"""What a GL run found, in sentences with figures: scenarios whose test frame did not survive
(and why: the internal format the driver chose), scenarios that failed or were estimated, the
best upload and readback against CUDA pinned memcpy, the share of CPU work the PBOs hid, and
for every state the matched comparisons ("uploads: format bgra runs 0.43x format rgba").
Also the survey preset: the scenario groups seed 000 reports on."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.findings import INFO, WARNING, Finding
from ..core.units import format_rate
from .states import STATE_FIELDS

if TYPE_CHECKING:
    from .records import GlResult, ScenarioResult

# Two states' rates differ enough to say so when one is this many times the other.
NOTABLE_RATIO = 1.10
# Sentences per op and state: the largest differences (the JSON's comparisons keep them all).
MOST_PER_STATE = 2
# Significant bits of each integer type (signed test data stays non-negative).
_TYPE_BITS = {"byte": 7, "ubyte": 8, "short": 15, "ushort": 16, "int": 31, "uint": 32}
_EXACT_STORE = {
    "float": "rgba32f (r32f, ...)",
    "half": "rgba16f",
    "ushort": "rgba16",
    "short": "rgba16",
    "ubyte": "rgba8",
    "byte": "rgba8",
    "int": "an integer texture (no float or normalized store keeps 31 bits)",
    "uint": "an integer texture (no float or normalized store keeps 32 bits)",
}
_FIX = (
    "ask for a sized internal format that holds the data exactly (float: rgba32f, half: "
    "rgba16f, ushort: rgba16, ubyte: rgba8), or accept the loss knowingly"
)


def _downconversion(s: ScenarioResult) -> tuple[str, str]:
    """Why the test frame changed, and the fix."""
    v = s.verification or {}
    typ = str(s.states["type"])
    bits = [b for b in v.get("bits", []) if b] or [0]
    ctype = v.get("component_type", "")
    stored = f"{v.get('actual_internal_format', '?')} ({max(bits)}-bit {ctype})"
    if s.states["internal_format"] == "none":
        return (
            f"the default framebuffer stores {stored}, too little for {typ} data",
            "read from an FBO with a texture of a sized internal format that holds the data",
        )
    if ctype == "float" and max(bits) == 32 and typ in ("int", "uint"):
        return (
            f"{typ} values above 2^24 do not survive a 32-bit float store ({stored}): its "
            "mantissa has 24 bits",
            "keep 32-bit integers in integer textures (rgba32ui with rgba_integer)",
        )
    needed = 24 if typ == "float" else 11 if typ == "half" else _TYPE_BITS.get(typ, 8)
    if max(bits) < needed or (typ in ("float", "half") and ctype != "float"):
        return (
            f"down-conversion: the driver chose {stored} for {typ} data, which needs "
            f"{_EXACT_STORE.get(typ, 'more bits')}",
            _FIX,
        )
    return (f"the GL changed the data on the way (it stores {stored})", _FIX)


def _per_scenario(result: GlResult) -> Iterator[Finding]:
    others = (
        "the other scenarios ran"
        if any(s.status != "failed" for s in result.scenarios)
        else "no scenario of this run could be measured"
    )
    for s in result.scenarios:
        v = s.verification
        if s.status == "failed":
            yield Finding(
                "gl_failed",
                WARNING,
                result.device,
                s.label,
                None,
                None,
                f"{s.label}: {s.error}",
                "the GL refused these states or ran out of memory",
                f"change the state the error names; {others}",
            )
        elif v is not None and not v["ok"]:
            cause, fix = _downconversion(s)
            yield Finding(
                "gl_unverified",
                WARNING,
                result.device,
                s.label,
                float(v["mismatched_bytes"]),
                float(v["compared_bytes"]),
                f"{s.label}: the test frame came back with {v['mismatched_bytes']:,} of "
                f"{v['compared_bytes']:,} bytes different; its rates are unreliable",
                cause,
                fix,
            )
    estimated = [s for s in result.scenarios if s.status == "estimated"]
    if estimated:
        limit = float(result.options.get("limit_s", 0.0))
        yield Finding(
            "gl_estimated",
            INFO,
            result.device,
            "limiter",
            float(len(estimated)),
            limit,
            f"{len(estimated)} scenario(s) would take longer than the {limit:g} s limit: their "
            "rates are estimates from the first 10 frames (labelled estimated)",
            "slow paths (conversions on the CPU) or a large --bytes",
            "raise --limit or lower --bytes to measure them in full",
        )


def _best(result: GlResult) -> Iterator[Finding]:
    for op, words in (("upload", "upload"), ("readback", "readback")):
        best = result.best(op)
        if best is None or best.rate is None:
            continue
        base = result.baseline(op, best.frame_bytes)
        against = ""
        ratio = None
        if base is not None and base.rate:
            ratio = best.rate / base.rate
            against = (
                f", {ratio:.2f}x CUDA pinned cudaMemcpy of the same bytes "
                f"({format_rate(base.rate)})"
            )
        yield Finding(
            f"gl_best_{op}",
            INFO,
            result.device,
            best.label,
            best.rate,
            None if base is None else base.rate,
            f"best {words}: {format_rate(best.rate)} with {best.label}{against}",
        )


def _async(result: GlResult) -> Iterator[Finding]:
    for s in result.scenarios:
        share = s.hidden_share()
        if share is None:
            continue
        yield Finding(
            "gl_async",
            INFO,
            result.device,
            s.label,
            share,
            1.0,
            f"{s.label}: {share:.0%} of CPU work as long as the transfer was hidden under it "
            "(ideal 100%)",
            "" if share > 0.8 else "the transfer call or the map blocks the CPU",
            "" if share > 0.8 else "read into PBOs (2 or more) and map the oldest one late",
        )


def _describe(name: str, value: Any) -> str:
    if name == "size":
        return str(value)
    if name == "pbos":
        return "client memory" if value == 0 else f"{value} PBO{'s' * (value != 1)}"
    if name == "fbo":
        return "an FBO" if value else "the default framebuffer"
    if name == "shader":
        return "a pass-through shader" if value else "the fixed function"
    if name == "row_offset":
        return f"a row offset of {value} B"
    if name == "method":
        return str(value)
    return f"{name.replace('_', ' ')} {value}"


@dataclass(frozen=True, slots=True)
class Comparison:
    """Two values of one state, every other state the same: how much faster the first is."""

    op: str
    state: str
    faster: Any
    slower: Any
    ratio: float  # geometric mean over the matched pairs
    pairs: int
    agreeing: int  # pairs whose difference exceeds both scenarios' spreads, this way round
    example: ScenarioResult  # the faster scenario of the most telling pair


def comparisons(result: GlResult) -> list[Comparison]:
    """Every matched comparison of two values of one state whose rates differ beyond the
    noise: the geometric mean ratio at least NOTABLE_RATIO, and most matched pairs differing
    by more than both scenarios' spreads the same way. Largest ratio first; only verified
    scenarios that ran in full take part."""
    fields = ["size", *(f for f in STATE_FIELDS if f not in ("op", "width", "height"))]

    def value(s: ScenarioResult, name: str) -> Any:
        return f"{s.states['width']}x{s.states['height']}" if name == "size" else s.states[name]

    done = [s for s in result.scenarios if s.verified and s.rate and s.status == "complete"]
    found = []
    for name in fields:
        groups: dict[tuple[Any, ...], list[ScenarioResult]] = defaultdict(list)
        for s in done:
            key = (*(value(s, f) for f in fields if f != name), s.op)
            groups[key].append(s)
        pairs: dict[tuple[str, Any, Any], list[tuple[ScenarioResult, ScenarioResult]]] = (
            defaultdict(list)
        )
        for group in groups.values():
            for a in group:
                for b in group:
                    if repr(value(a, name)) < repr(value(b, name)):
                        pairs[(a.op, value(a, name), value(b, name))].append((a, b))
        for (op, va, vb), matched in pairs.items():
            logs = [math.log((a.rate or 1.0) / (b.rate or 1.0)) for a, b in matched]
            mean = math.exp(sum(logs) / len(logs))
            if mean < 1:
                va, vb, mean = vb, va, 1 / mean
                matched = [(b, a) for a, b in matched]
            agreeing = [
                (a, b)
                for a, b in matched
                if (a.rate or 0.0) > (b.rate or 0.0) * max(NOTABLE_RATIO, 1 + a.spread + b.spread)
            ]
            if mean >= NOTABLE_RATIO and 2 * len(agreeing) > len(matched):
                a, _ = max(agreeing, key=lambda p: (p[0].rate or 0.0) / (p[1].rate or 1.0))
                found.append(Comparison(op, name, va, vb, mean, len(matched), len(agreeing), a))
    return sorted(found, key=lambda c: -c.ratio)


def _comparisons(result: GlResult) -> Iterator[Finding]:
    said: dict[tuple[str, str], int] = defaultdict(int)
    for c in comparisons(result):
        said[(c.op, c.state)] += 1
        if said[(c.op, c.state)] > MOST_PER_STATE:
            continue
        base = result.baseline(c.op, c.example.frame_bytes)
        against = (
            f"; the faster reaches {c.example.rate / base.rate:.2f}x CUDA pinned memcpy"
            if base is not None and base.rate and c.example.rate
            else ""
        )
        pairs = (
            f"{c.pairs} matched pair{'s' * (c.pairs != 1)}"
            if c.agreeing == c.pairs
            else f"beyond the noise in {c.agreeing} of {c.pairs} matched pairs"
        )
        yield Finding(
            "gl_state",
            INFO,
            result.device,
            f"{c.op} {c.state}",
            c.ratio,
            None,
            f"{c.op}s: {_describe(c.state, c.faster)} is {c.ratio:.2f}x as fast as "
            f"{_describe(c.state, c.slower)} ({pairs}{against})",
        )


def findings(result: GlResult) -> list[Finding]:
    return [*_per_scenario(result), *_best(result), *_async(result), *_comparisons(result)]


# ---- the survey preset -------------------------------------------------------------------------


def _s(op: str, **states: Any) -> dict[str, Any]:
    base: dict[str, Any] = dict(
        op=op,
        width=2048,
        height=2048,
        alignment=4,
        row_offset=0,
        method="texsubimage" if op == "upload" else "readpixels",
        format="rgba",
        type="ubyte",
        internal_format="rgba8",
        target="2d",
        fbo=True,
        shader=False,
        pbos=0,
        usage="none",
        draw="quad" if op == "readback" else "none",
    )
    if "size" in states:
        n = states.pop("size")
        states["width"] = states["height"] = n
    return base | states


def survey() -> tuple[dict[str, Any], ...]:
    """The groups the paper reports on, at 2048x2048 unless a group varies the size: PBO against
    none, TexSubImage against DrawPixels, formats and types, padding, texture sizes, GetTexImage
    against ReadPixels, PBO counts with the asynchronous mode, and today's paths (DSA, a
    persistent mapping, CUDA interop)."""
    out: list[dict[str, Any]] = []
    for pbos in (0, 1, 2):  # PBO against none, TexSubImage against DrawPixels
        out += [_s("upload", pbos=pbos), _s("upload", method="drawpixels", pbos=pbos)]
    out += [_s("upload", method="drawpixels", shader=True)]  # fragment program
    out += [_s("upload", method="drawpixels", fbo=False)]
    formats = [  # (format, type, internal)
        ("bgra", "ubyte", "rgba8"),
        ("rgb", "ubyte", "rgb8"),
        ("rgb", "ubyte", "rgba8"),  # component padding
        ("red", "ubyte", "r8"),
        ("red", "ubyte", "rgba8"),
        ("rgba", "ushort", "rgba16"),
        ("rgba", "short", "rgba16"),
        ("rgba", "half", "rgba16f"),
        ("rgba", "float", "rgba32f"),
        ("rgba", "float", "rgba16f"),  # down-conversion
        ("rgba", "float", "rgba"),  # unsized: down-conversion
        ("red", "float", "r32f"),
        ("red", "float", "rgba32f"),
        ("rgba", "int", "rgba32f"),  # integers beyond 24 bits
        ("rgba", "uint", "rgba8"),
        ("rgba_integer", "uint", "rgba32ui"),  # integers kept whole
        ("rgba_integer", "ubyte", "rgba8ui"),
    ]
    for fmt, typ, internal in formats:
        for op in ("upload", "readback"):
            out.append(_s(op, format=fmt, type=typ, internal_format=internal))
        out.append(_s("upload", format=fmt, type=typ, internal_format=internal, pbos=1))
    for align in (1, 8):  # padding of odd rows
        out += [
            _s(op, format="rgb", internal_format="rgb8", size=2047, alignment=align)
            for op in ("upload", "readback")
        ]
    out += [_s("upload", row_offset=3), _s("readback", row_offset=3)]  # misaligned host memory
    for n in (512, 1024, 2048, 4096):  # texture sizes, with and without PBOs
        out += [_s("upload", size=n), _s("upload", size=n, pbos=1), _s("readback", size=n)]
        out += [_s("readback", size=n, pbos=2)]
    for pbos in (0, 2):  # GetTexImage against ReadPixels
        out += [_s("readback", method="gettexture", pbos=pbos), _s("readback", pbos=pbos)]
    out += [_s("readback", size=4096, draw="repeat")]  # what drawing each frame costs
    out += [_s("readback", fbo=False), _s("readback", target="rectangle")]
    out += [_s("readback", target="rectangle", type="float", internal_format="rgba32f")]
    for n in (512, 1024):  # PBO counts and sizes: Table 1 and Figure 2
        for pbos in (1, 2, 4):
            out.append(
                _s(
                    "readback",
                    size=n,
                    pbos=pbos,
                    type="float",
                    internal_format="rgba32f",
                    asynchronous=True,
                )
            )
    out += [_s("readback", size=1024, pbos=2, draw="pixel", asynchronous=True)]
    out += [
        _s("upload", method="texsubimage_dsa"),
        _s("upload", method="persistent", pbos=3),
        _s("upload", method="cuda_interop"),
        _s("upload", method="cuda_interop", type="float", internal_format="rgba32f"),
        _s("readback", method="cuda_interop"),
        _s("readback", method="cuda_interop", type="float", internal_format="rgba32f"),
    ]
    return tuple(out)
