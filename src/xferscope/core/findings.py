"""Findings: what a measurement found that a person should know, typed, for every command. Each
names the figure that triggered it, the likely cause and the fix; the tables, the HTML report
and the JSON all carry the same records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..documents.reader import Field

# Severities, mildest first.
OK, INFO, WARNING, ERROR = "ok", "info", "warning", "error"
SEVERITIES = (OK, INFO, WARNING, ERROR)

# Why data arrives wrong and what to do: the same words wherever a verification fails.
CORRUPTED_CAUSE = "a failing GPU, memory or link, or a driver fault"
CORRUPTED_FIX = (
    "rerun; if it repeats, check `nvidia-smi -q` for ECC and Xid errors and take the GPU out of "
    "service"
)

_FIELDS = ("code", "severity", "gpu", "figure", "value", "reference", "message", "cause", "fix")


@dataclass(frozen=True, slots=True)
class Finding:
    """A verdict or a warning: what was seen (with the figure that triggered it), the likely
    cause and the fix."""

    code: str  # typed: every producer documents its codes
    severity: str  # ok, info, warning, error
    gpu: int | None
    figure: str  # the metric, curve or case that triggered it
    value: float | None
    reference: float | None  # the limit or the figure it was compared with
    message: str
    cause: str = ""
    fix: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _FIELDS}

    @classmethod
    def read(cls, x: Field) -> Finding:
        """A finding read back from a document."""
        return cls(
            code=x["code"].string(),
            severity=x["severity"].string(),
            gpu=x["gpu"].optional_integer(),
            figure=x["figure"].string(),
            value=x["value"].optional_number(),
            reference=x["reference"].optional_number(),
            message=x["message"].string(),
            cause=x.get("cause", "").string(),
            fix=x.get("fix", "").string(),
        )

    @classmethod
    def legacy(cls, message: str) -> Finding:
        """A warning string of a version 1 document, as a finding."""
        return cls("legacy_warning", WARNING, None, "", None, None, message)


def finding(
    code: str,
    severity: str,
    figure: str,
    message: str,
    cause: str = "",
    fix: str = "",
    gpu: int | None = None,
    value: float | None = None,
    reference: float | None = None,
) -> Finding:
    """A Finding, with keywords for the parts most producers leave empty."""
    return Finding(code, severity, gpu, figure, value, reference, message, cause, fix)


def failed(what: str, error: str) -> Finding:
    """A part of an experiment the engine could not run (an allocation or CUDA error)."""
    return finding("failed", ERROR, what, f"{what}: failed: {error}")


def corrupted(figure: str, message: str, mismatched: float | None = None) -> Finding:
    """Data that arrived wrong: every command's verification failure."""
    return finding(
        "verification_failed",
        ERROR,
        figure,
        message,
        CORRUPTED_CAUSE,
        CORRUPTED_FIX,
        value=mismatched,
        reference=0.0,
    )


def read_findings(d: Field) -> tuple[Finding, ...]:
    """A document's findings, or the warning strings of a version 1 document as findings."""
    if "findings" in d:
        return tuple(Finding.read(x) for x in d["findings"].items())
    return tuple(Finding.legacy(w) for w in d.get("warnings", []).strings())
