"""GEMM shapes from the command line: square sizes, a range with a step (seed 003's 8128-8180 by
8 is the `near-8k` preset), M,N,K triples, or a file of an application's GEMMs; and each shape's
alignment class, the largest power of two dividing M, N and K (seed 003's Table III groups
sizes by it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..core import limits
from ..core.errors import OptionError
from ..core.units import alignment_class
from ..documents.files import read_text

MOST_DIMENSION = (1 << 31) - 1
PRESETS = {
    # seed 003's Table III: square sizes from 8128 to 8180 by 8 (8128 = 64 x 127), alignment
    # classes 8 to 64 at nearly one size
    "near-8k": tuple(range(8128, 8181, 8)),
    # a quick look across sizes
    "sizes": (1024, 2048, 4096, 8192),
}
# Former preset names that old command lines still give, named in no help or message.
HIDDEN_PRESETS = {"seed003": "near-8k"}


@dataclass(frozen=True, slots=True)
class Shape:
    m: int
    n: int
    k: int

    @property
    def label(self) -> str:
        return f"{self.m}" if self.m == self.n == self.k else f"{self.m}x{self.n}x{self.k}"

    @property
    def flops(self) -> float:
        """Floating-point operations of one GEMM: 2 M N K."""
        return 2.0 * self.m * self.n * self.k

    @property
    def alignment(self) -> int:
        return alignment_class(self.m, self.n, self.k)


def _dimension(option: str, text: str, item: str) -> int:
    if not text.strip().isdigit() or not 1 <= int(text) <= MOST_DIMENSION:
        raise OptionError(option, f"'{item}' is not a whole number from 1 to 2^31 - 1")
    return int(text)


def parse_sizes(option: str, text: str) -> tuple[Shape, ...]:
    """'1024,4096' square; 'A:B:S' every S from A to B; preset names (near-8k, sizes; the
    former seed003 still names near-8k)."""
    shapes: list[Shape] = []
    for item in (w.strip() for w in text.split(",")):
        if not item:
            continue
        name = HIDDEN_PRESETS.get(item.lower(), item.lower())
        if name in PRESETS:
            shapes += [Shape(n, n, n) for n in PRESETS[name]]
        elif ":" in item:
            parts = item.split(":")
            if len(parts) != 3:
                raise OptionError(option, f"'{item}' is not a range FIRST:LAST:STEP")
            first, last, step = (_dimension(option, p, item) for p in parts)
            if last < first:
                raise OptionError(option, f"'{item}': the last size is below the first")
            limits.check_plan(
                option, (last - first) // step + 1, f"'{item}'", "a larger STEP or a shorter range"
            )
            shapes += [Shape(n, n, n) for n in range(first, last + 1, step)]
        else:
            n = _dimension(option, item, item)
            shapes.append(Shape(n, n, n))
    if not shapes:
        raise OptionError(option, "give sizes such as 4096, a range 8128:8180:8, or near-8k")
    return tuple(dict.fromkeys(shapes))


def parse_shape(option: str, item: str) -> Shape:
    """'MxNxK', 'M,N,K' or 'M N K'."""
    parts = item.replace("x", " ").replace("X", " ").replace(",", " ").split()
    if len(parts) != 3:
        raise OptionError(option, f"'{item}' is not a shape MxNxK")
    m, n, k = (_dimension(option, p, item) for p in parts)
    return Shape(m, n, k)


def parse_shapes(option: str, text: str) -> tuple[Shape, ...]:
    """'MxNxK;MxNxK' (or comma-separated when each is MxNxK)."""
    items = [w.strip() for w in text.replace(";", ",").split(",") if w.strip()]
    if not items:
        raise OptionError(option, "give shapes such as 4096x1024x8192")
    return tuple(dict.fromkeys(parse_shape(option, item) for item in items))


def read_shapes(option: str, path_text: str) -> tuple[Shape, ...]:
    """A file of GEMMs, one per line as M N K (or MxNxK, M,N,K); '#' starts a comment."""
    path = Path(path_text).expanduser()
    try:
        lines = read_text(path).splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise OptionError(option, f"cannot read {path}: {reason}") from None
    shapes = []
    for number, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if text:
            try:
                shapes.append(parse_shape(option, text))
            except OptionError as exc:
                raise OptionError(
                    option, f"{path}:{number}: {str(exc).split(': ', 1)[1]}"
                ) from None
    if not shapes:
        raise OptionError(option, f"{path} holds no shapes (one M N K per line)")
    return tuple(dict.fromkeys(shapes))
