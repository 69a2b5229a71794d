"""The states a GL scenario is made of, parsed from the command line, and the plan: the cross
product of every list, each scenario normalised and checked by the engine's own rules
(gl_refusal, gl_normalised in engine/src/gl/states.cpp), duplicates dropped, refusals kept with
their reasons."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core import limits
from ..core.cases import DEFAULT_SEED
from ..core.compiled import engine_module
from ..core.errors import OptionError
from ..core.units import parse_list, parse_seconds_list, parse_size_option
from ..documents.records import to_plain

_e = engine_module()

OPS = ("upload", "readback")
UPLOAD_METHODS: tuple[str, ...] = tuple(_e.GL_UPLOAD_METHODS)
READBACK_METHODS: tuple[str, ...] = tuple(_e.GL_READBACK_METHODS)
FORMATS: tuple[str, ...] = tuple(f[0] for f in _e.GL_FORMATS)
TYPES: tuple[str, ...] = tuple(t[0] for t in _e.GL_TYPES)
INTERNAL_FORMATS: tuple[str, ...] = tuple(i[0] for i in _e.GL_INTERNAL_FORMATS)
TARGETS: tuple[str, ...] = tuple(_e.GL_TARGETS)
USAGES: tuple[str, ...] = tuple(_e.GL_USAGES)
DRAW_MODES: tuple[str, ...] = tuple(_e.GL_DRAW_MODES)
MAX_PBOS = int(_e.GL_MAX_PBOS)
ALIGNMENTS = (1, 2, 4, 8)

DEFAULT_BYTES = 6.25 * (1 << 30)  # the paper's 6.25 GB per scenario
QUICK_BYTES = 1 << 29
DEFAULT_LIMIT_S = 180.0  # the paper's 3 minutes
LIMITER_FRAMES = 10  # the paper's first frames, which estimate the whole
# --work auto: per-frame CPU work as shares of the frame's transfer time (0 to past it)
AUTO_WORK_SHARES = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0)

STATE_FIELDS = (
    "op",
    "width",
    "height",
    "alignment",
    "row_offset",
    "method",
    "format",
    "type",
    "internal_format",
    "target",
    "fbo",
    "shader",
    "pbos",
    "usage",
    "draw",
)


def _words(option: str, text: str, accepted: Sequence[str]) -> tuple[str, ...]:
    return parse_list(option, text, tuple(accepted))


def _integers(option: str, text: str, low: int, high: int) -> tuple[int, ...]:
    items = [w.strip() for w in text.split(",") if w.strip()]
    if not items:
        raise OptionError(option, f"give one or more whole numbers from {low} to {high}")
    for w in items:
        if not w.isdigit() or not low <= int(w) <= high:
            raise OptionError(option, f"'{w}' is not a whole number from {low} to {high}")
    return tuple(dict.fromkeys(int(w) for w in items))


def _switches(option: str, text: str) -> tuple[bool, ...]:
    values = {"on": True, "off": False, "true": True, "false": False, "1": True, "0": False}
    return tuple(values[w] for w in _words(option, text, tuple(values)))


def parse_dimensions(option: str, text: str) -> tuple[tuple[int, int], ...]:
    """'1024,4096x2048': squares as in the paper, or W x H; 1 to 32768 each."""
    out: list[tuple[int, int]] = []
    for item in (w.strip().lower() for w in text.split(",")):
        if not item:
            continue
        parts = item.split("x")
        if len(parts) > 2 or not all(p.isdigit() and 1 <= int(p) <= 32768 for p in parts):
            raise OptionError(
                option, f"'{item}' is not a size N or WxH with each side from 1 to 32768 pixels"
            )
        w, h = int(parts[0]), int(parts[-1])
        out.append((w, h))
    if not out:
        raise OptionError(option, "give one or more sizes, such as 1024 or 4096x2048")
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True, slots=True)
class GlOptions:
    """Every list of states (the scenarios are their cross product) and how to run them."""

    ops: tuple[str, ...] = OPS
    sizes: tuple[tuple[int, int], ...] = ((2048, 2048),)
    alignments: tuple[int, ...] = (4,)
    row_offsets: tuple[int, ...] = (0,)
    methods: tuple[str, ...] = ("texsubimage", "readpixels")
    formats: tuple[str, ...] = ("rgba",)
    types: tuple[str, ...] = ("ubyte",)
    internal_formats: tuple[str, ...] = ("rgba8",)
    targets: tuple[str, ...] = ("2d",)
    fbos: tuple[bool, ...] = (True,)
    shaders: tuple[bool, ...] = (False,)
    pbos: tuple[int, ...] = (0,)
    usages: tuple[str, ...] = ("none",)
    draws: tuple[str, ...] = ("quad",)
    work: tuple[float, ...] | str = ()  # seconds of CPU work per frame, or "auto"
    bytes: float = DEFAULT_BYTES  # moved per scenario
    limit_s: float = DEFAULT_LIMIT_S
    log_frames: bool = False
    baseline: bool = True  # CUDA pinned memcpy of the same bytes
    device: int = 0
    seed: int = DEFAULT_SEED
    preset: str | None = None
    extra: tuple[dict[str, Any], ...] = field(default=())  # a preset's own scenarios

    def to_dict(self) -> dict[str, Any]:
        """The options in the result's document: their fields, each size as 'WxH'."""
        return to_plain(self) | {"sizes": [f"{w}x{h}" for w, h in self.sizes]}


def parse_options(
    *,
    op: str,
    size: str,
    alignment: str,
    row_offset: str,
    method: str | None,
    format: str,
    type: str,
    internal: str,
    target: str,
    fbo: str,
    shader: str,
    pbos: str,
    usage: str,
    draw: str,
    work: str | None,
    bytes_text: str | None,
    limit: float,
    quick: bool,
    **rest: Any,
) -> GlOptions:
    """The command line's states, each checked with a one-line error naming the option."""
    ops = _words("--op", op, OPS)
    accepted = tuple(dict.fromkeys(m for o in ops for m in _methods_of(o)))
    methods = (
        _words("--method", method, accepted)
        if method
        else tuple(m for m in ("texsubimage", "readpixels") if m in accepted)
    )
    limits.GL_LIMIT.check("--limit", limit)
    total = QUICK_BYTES if quick else DEFAULT_BYTES
    if bytes_text:
        total = parse_size_option("--bytes", bytes_text)
    work_plan: tuple[float, ...] | str = ()
    if work:
        work_plan = "auto" if work.strip().lower() == "auto" else parse_seconds_list("--work", work)
    return GlOptions(
        ops=ops,
        sizes=parse_dimensions("--size", size),
        alignments=tuple(
            a for a in _integers("--alignment", alignment, 1, 8) if _check_alignment(a)
        ),
        row_offsets=_integers("--row-offset", row_offset, 0, 4095),
        methods=methods,
        formats=_words("--format", format, FORMATS),
        types=_words("--type", type, TYPES),
        internal_formats=_words("--internal", internal, INTERNAL_FORMATS),
        targets=_words("--target", target, TARGETS),
        fbos=_switches("--fbo", fbo),
        shaders=_switches("--shader", shader),
        pbos=_integers("--pbos", pbos, 0, MAX_PBOS),
        usages=_words("--pbo-usage", usage, ("none", *USAGES)),
        draws=_words("--draw", draw, DRAW_MODES),
        work=work_plan,
        bytes=float(total),
        limit_s=float(limit),
        **rest,
    )


def _check_alignment(a: int) -> bool:
    if a not in ALIGNMENTS:
        raise OptionError("--alignment", f"'{a}' is not one of 1, 2, 4, 8")
    return True


def _methods_of(op: str) -> tuple[str, ...]:
    return UPLOAD_METHODS if op == "upload" else READBACK_METHODS


def scenario(**states: Any) -> Any:
    """The engine's GlScenario of these states, normalised."""
    return _e.gl_normalised(_e.GlScenario(**states))


def states_of(s: Any) -> dict[str, Any]:
    return {name: getattr(s, name) for name in STATE_FIELDS}


def label(s: Any) -> str:
    """'upload 2048x2048 texsubimage rgba/ubyte>rgba8 2d fbo pbo2 a4' : the states that vary
    are read in tables; every state is in the JSON."""
    parts = [s.op, f"{s.width}x{s.height}", s.method, f"{s.format}/{s.type}>{s.internal_format}"]
    if s.target not in ("2d", "none"):
        parts.append(s.target)
    parts.append("fbo" if s.fbo else "nofbo")
    if s.shader:
        parts.append("shader")
    if s.pbos:
        parts.append(f"pbo{s.pbos}:{s.usage}")
    if s.alignment != 4:
        parts.append(f"align{s.alignment}")
    if s.row_offset:
        parts.append(f"+{s.row_offset}B")
    if s.op == "readback" and s.draw != "quad":
        parts.append(f"draw:{s.draw}")
    return " ".join(parts)


@dataclass(frozen=True, slots=True)
class Planned:
    """A scenario to run, and whether its asynchronous mode runs too."""

    scenario: Any  # the engine's GlScenario, normalised
    asynchronous: bool


def plan_scenarios(options: GlOptions) -> tuple[list[Planned], list[tuple[str, str]]]:
    """The scenarios to run (normalised, no duplicates, in the order of the lists) and those the
    rules refuse, each as (label, reason). The cross product's scenarios run the asynchronous
    mode when --work is given; a preset's own scenarios say so each."""
    combos: list[dict[str, Any]] = []
    for op in options.ops:
        methods = [m for m in options.methods if m in _methods_of(op)]
        draws = options.draws if op == "readback" else ("none",)
        axes: dict[str, Sequence[Any]] = {
            "size": options.sizes,
            "alignment": options.alignments,
            "row_offset": options.row_offsets,
            "method": methods,
            "format": options.formats,
            "type": options.types,
            "internal_format": options.internal_formats,
            "target": options.targets,
            "fbo": options.fbos,
            "shader": options.shaders,
            "pbos": options.pbos,
            "usage": options.usages,
            "draw": draws,
        }
        for values in itertools.product(*axes.values()):
            c: dict[str, Any] = dict(zip(axes, values, strict=True))
            width, height = c.pop("size")
            combos.append(
                {
                    "op": op,
                    "width": width,
                    "height": height,
                    **c,
                    "asynchronous": bool(options.work),
                }
            )
    combos += [dict(c) for c in options.extra]
    scenarios: list[Planned] = []
    refused: list[tuple[str, str]] = []
    seen: set[tuple[Any, ...]] = set()
    for c in combos:
        asynchronous = bool(c.pop("asynchronous", False))
        s = scenario(seed=options.seed, **c)
        key = tuple(states_of(s).values())
        if key in seen:
            continue
        seen.add(key)
        reason = _e.gl_refusal(s)
        if reason:
            refused.append((label(s), reason))
        else:
            scenarios.append(Planned(s, asynchronous))
    return scenarios, refused
