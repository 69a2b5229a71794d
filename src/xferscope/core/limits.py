"""What every numeric option accepts: one rule per kind of option, written once, used by every
command (through the CLI's parameter type, cli/params.py) and by the options dataclasses the
library API builds, so `--trials` means the same everywhere and says so the same way.

A value is refused with one line naming the option, the value as given and what is accepted:
`--trials: '0' is not a count from 1 to 1000`. NaN and infinities are never accepted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import OptionError


def _number(value: float) -> str:
    """Whole numbers in full (1000000, not 1e+06), others as %g."""
    if math.isfinite(value) and value == int(value) and abs(value) < 1e16:
        return str(int(value))
    return f"{value:g}"


@dataclass(frozen=True, slots=True)
class Range:
    """A closed (or, where `open_low`/`open_high`, open) range of one kind of value: `count`
    (a whole number), `seconds`, `fraction` or `number`. `unit` follows the numbers in the
    message ("seconds"); `zero` says what 0 means when it is allowed beside the range
    ("no limit")."""

    kind: str
    low: float
    high: float
    open_low: bool = False
    open_high: bool = False
    zero: str = ""

    def describe(self) -> str:
        """'a count from 1 to 1000', 'a number of seconds from 0.001 to 60', ..."""
        noun = {
            "count": "a count",
            "seconds": "a number of seconds",
            "fraction": "a fraction",
            "number": "a number",
        }[self.kind]
        if self.open_low and self.open_high:
            bounds = f"above {_number(self.low)} and below {_number(self.high)}"
        elif self.open_low:
            bounds = f"above {_number(self.low)}, up to {_number(self.high)}"
        else:
            bounds = f"from {_number(self.low)} to {_number(self.high)}"
        extra = f" (0: {self.zero})" if self.zero else ""
        return f"{noun} {bounds}{extra}"

    def contains(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        if self.zero and value == 0:
            return True
        if self.kind == "count" and value != int(value):
            return False
        above = value > self.low if self.open_low else value >= self.low
        below = value < self.high if self.open_high else value <= self.high
        return above and below

    def check(self, option: str, value: float, shown: str | None = None) -> float:
        """`value` if it is in range, else an OptionError naming `option` and the value as the
        person typed it (`shown`)."""
        if not self.contains(value):
            given = shown if shown is not None else _number(value)
            raise OptionError(option, f"'{given}' is not {self.describe()}")
        return value

    def parse(self, option: str, text: str) -> float:
        """A value from its text: whole numbers for counts (no 1e3, no 2.0), decimals and
        exponents otherwise."""
        given = text.strip()
        try:
            value: float = int(given, 10) if self.kind == "count" else float(given)
        except ValueError:
            raise OptionError(option, f"'{given}' is not {self.describe()}") from None
        if isinstance(value, int) and not self.contains(value):
            raise OptionError(option, f"'{given}' is not {self.describe()}")
        return self.check(option, value, given)

    def parse_all(self, option: str, text: str) -> tuple[float, ...]:
        """A comma-separated list of values, each checked, sorted, without duplicates."""
        items = [item for item in text.split(",") if item.strip()]
        if not items:
            raise OptionError(option, f"give one or more values, each {self.describe()}")
        return tuple(sorted({self.parse(option, item) for item in items}))


# The largest size in bytes any option accepts: more memory than any machine holds.
MOST_BYTES = 1 << 50

# ---- the ranges, by kind of option --------------------------------------------------------------

# How many trials a measurement repeats, in every command that repeats one.
TRIALS = Range("count", 1, 1000)
# How long one trial lasts.
TARGET_TIME = Range("seconds", 0.001, 60)
# The most seconds a part of a measurement may take.
BUDGET = Range("seconds", 0.01, 86400, zero="no limit")
# A relative noise under which no more trials are needed.
NOISE_BOUND = Range("fraction", 0, 1, open_low=True, open_high=True)
# Times every curve is measured again, alternating.
ROUNDS = Range("count", 1, 10)
# Sizes per doubling in a log-scale range.
STEPS = Range("count", 1, 256)
# CPU work per copy (overlap cpu --work): no single trial may run longer than this.
WORK = Range("seconds", 0, 10)
# Kernel FMAs per element (overlap gpu --work).
GPU_WORK = Range("count", 0, 1_000_000)
# A GEMM's scalars alpha and beta.
SCALAR = Range("number", -1e6, 1e6)
# How long a command waits for others (fleet's ranks).
TIMEOUT = Range("seconds", 1, 86400)
EVERY = Range("seconds", 1, 30 * 86400)  # the exporter's schedule: a second to 30 days
BUSY_PERCENT = Range("number", 0, 100)
BUSY_PROCESSES = Range("count", 0, 1024)
PORT = Range("count", 1, 65535)
# Seconds one GL scenario may take before the limiter estimates it.
GL_LIMIT = Range("seconds", 0, 3600, open_low=True)
# A comparison's threshold of a difference that counts (0.05 is 5%).
THRESHOLD = Range("fraction", 0, 10)
# How many rows a listing shows.
ROWS = Range("count", 1, 1_000_000)
# How many times a traced program is run.
RUNS = Range("count", 1, 100)
# How often a traced Python process's main thread is looked at.
LOOK_EVERY = Range("seconds", 0.001, 1, zero="no looks")
# Chunks in an overlap stream, copies per trial, pieces: counts with a bound on the plan.
CHUNKS = Range("count", 1, 100_000)
REPEATS = Range("count", 1, 100_000)
# How many times a buffer is sent, in a table of what each way of sending costs.
SENDS = Range("count", 1, 1_000_000_000)
# GEMM: samples of the distribution, tuning passes, tiles and streams of the tiled GEMM.
SAMPLES = Range("count", 2, 4096)
TUNE = Range("count", 0, 8)
TILES = Range("count", 1, 1024)
STREAMS = Range("count", 1, 64)


# ---- plans ------------------------------------------------------------------------------------

# The most points (sizes x curves x rounds, shapes x precisions, ...) one command plans: a
# sweep of that many points writes about 7 MB of JSON in a second or two, and any more could
# not be measured in a working day.
MOST_POINTS = 10_000


def check_plan(option: str, points: int, detail: str, advice: str) -> None:
    """Refuses a plan of more than MOST_POINTS points before anything is measured, with the
    estimate (`detail`, such as '4 curves x 30001 sizes') and what would shrink it."""
    if points > MOST_POINTS:
        raise OptionError(
            option,
            f"this plan has {points} points ({detail}); one run measures at most {MOST_POINTS}: "
            f"{advice}",
        )
