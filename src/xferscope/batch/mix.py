"""Batches of mixed sizes for `xferscope batch --size-mix`: each batch of N copies takes N sizes
drawn from a distribution or from a file of sizes (an application's own, such as the copy sizes
`xferscope trace` recorded), with the run's seed, so every method of a batch moves the same
pieces and a run can be repeated.

    lognormal:MEDIAN:SIGMA   sizes around MEDIAN, spread by SIGMA (the log's standard deviation)
    uniform:MIN:MAX          every size from MIN to MAX equally likely
    file:PATH                sizes from PATH (one or more per line, commas or spaces between,
                             units allowed, # comments), or from its `bytes` column when it is
                             a CSV with a header, such as the copies.csv `xferscope trace`
                             writes; drawn with replacement"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import OptionError
from ..core.units import format_bytes, parse_size
from ..documents.files import read_text

OPTION = "--size-mix"
ACCEPTED = "lognormal:MEDIAN:SIGMA, uniform:MIN:MAX or file:PATH (sizes such as 4KiB)"
LARGEST = 256 << 20  # a drawn size is clipped to this, so a long tail cannot exhaust memory
_MEAN_DRAWS = 200_000  # draws that fix a distribution's mean, the size its cells are keyed by


@dataclass(frozen=True, slots=True)
class SizeMix:
    spec: str  # as given
    kind: str  # lognormal, uniform, file
    low: float = 0.0  # lognormal: the median; uniform: MIN
    high: float = 0.0  # lognormal: sigma; uniform: MAX
    values: tuple[int, ...] = ()  # file: its sizes

    @property
    def label(self) -> str:
        if self.kind == "lognormal":
            return f"lognormal {format_bytes(int(self.low))} s={self.high:g}"
        if self.kind == "uniform":
            return f"uniform {format_bytes(int(self.low))}-{format_bytes(int(self.high))}"
        return f"{Path(self.spec[5:]).name} ({len(self.values)} sizes)"

    def draw(self, count: int, seed: int) -> list[int]:
        """`count` sizes, the same for the same count and seed."""
        rng = np.random.default_rng([seed & 0xFFFFFFFF, count])
        if self.kind == "lognormal":
            raw = self.low * np.exp(self.high * rng.standard_normal(count))
            return [int(x) for x in np.clip(np.rint(raw), 1, LARGEST)]
        if self.kind == "uniform":
            return [int(x) for x in rng.integers(int(self.low), int(self.high) + 1, count)]
        return [int(x) for x in rng.choice(np.asarray(self.values, dtype=np.int64), count)]

    def mean(self) -> int:
        """The mean size in bytes: the size a mixed batch's cells are keyed and labelled by."""
        if self.kind == "uniform":
            return round((self.low + self.high) / 2)
        if self.kind == "file":
            return round(sum(self.values) / len(self.values))
        return round(float(np.mean(self.draw(_MEAN_DRAWS, 0))))


def _size(text: str, what: str) -> int:
    try:
        size = parse_size(text)
    except ValueError as exc:
        raise OptionError(OPTION, f"{what} {exc}") from None
    if size < 1:
        raise OptionError(OPTION, f"{what} must be at least 1 byte, not {text!r}")
    if size > LARGEST:
        raise OptionError(OPTION, f"{what} {text!r} is over {format_bytes(LARGEST)}")
    return size


def parse_size_mix(text: str) -> SizeMix:
    """A --size-mix value; OptionError naming the option and what is accepted otherwise."""
    kind, _, rest = text.strip().partition(":")
    if kind == "lognormal":
        parts = rest.split(":")
        if len(parts) != 2:
            raise OptionError(OPTION, f"{text!r} is not {ACCEPTED}")
        median = _size(parts[0], "the median")
        try:
            sigma = float(parts[1])
        except ValueError:
            sigma = math.nan
        if not 0 <= sigma <= 4:
            raise OptionError(OPTION, f"sigma {parts[1]!r} must be a number from 0 to 4")
        return SizeMix(text, "lognormal", median, sigma)
    if kind == "uniform":
        parts = rest.split(":")
        if len(parts) != 2:
            raise OptionError(OPTION, f"{text!r} is not {ACCEPTED}")
        low, high = _size(parts[0], "MIN"), _size(parts[1], "MAX")
        if low > high:
            raise OptionError(OPTION, f"MIN {parts[0]!r} is more than MAX {parts[1]!r}")
        return SizeMix(text, "uniform", low, high)
    if kind == "file":
        return SizeMix(text, "file", values=_read_sizes(Path(rest)))
    raise OptionError(OPTION, f"{text!r} is not {ACCEPTED}")


def _read_sizes(path: Path) -> tuple[int, ...]:
    try:
        text = read_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or "not a text file"
        raise OptionError(OPTION, f"cannot read {str(path)!r}: {reason}") from None
    first = next((line for line in text.splitlines() if line.strip()), "")
    if "bytes" in [field.strip() for field in first.split(",")]:
        return _csv_sizes(path, text)
    sizes = []
    for number, line in enumerate(text.splitlines(), 1):
        for token in re.split(r"[,\s]+", line.split("#", 1)[0].strip()):
            if token:
                sizes.append(_size(token, f"{path.name} line {number}:"))
    if not sizes:
        raise OptionError(OPTION, f"{str(path)!r} holds no sizes")
    return tuple(sizes)


def _csv_sizes(path: Path, text: str) -> tuple[int, ...]:
    """The `bytes` column of a CSV with a header (a trace's copies.csv), every row that holds a
    size of at least a byte."""
    sizes = []
    for number, row in enumerate(csv.DictReader(io.StringIO(text)), 2):
        value = (row.get("bytes") or "").strip()
        if not value:
            continue
        size = _size(value, f"{path.name} row {number}:")
        sizes.append(size)
    if not sizes:
        raise OptionError(OPTION, f"{str(path)!r} holds no sizes in its bytes column")
    return tuple(sizes)
