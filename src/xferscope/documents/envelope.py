"""The envelope every result opens with, as a record and in its document: the tool's version,
the creation time, whether it is simulated or interrupted, its wall time, its options, and (for
the results measured on one machine) the machine and the findings. Every result record extends
`Stamp` or `Envelope`, so a header field is declared once and the version filled in once; the
document's header is written by `document_header` and read by `header_fields`."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from ..core.findings import Finding, read_findings
from ..core.version import __version__
from .reader import Field


def now() -> str:
    """A result's creation time: now, in UTC, to the second (ISO 8601)."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True, slots=True, kw_only=True)
class Stamp:
    """What every result says of itself (keyword fields, after a record's own)."""

    created: str  # ISO 8601, UTC: when the measurement began (`now()`)
    simulated: bool
    options: dict[str, Any]
    interrupted: bool
    wall_s: float  # by the engine's clock: modelled time for a simulated result
    tool_version: str = __version__


@dataclass(frozen=True, slots=True, kw_only=True)
class Envelope(Stamp):
    """A result measured on one machine: that machine's facts and what was found."""

    machine: dict[str, Any]
    findings: tuple[Finding, ...] = ()


# The envelope's fields: the header of a result's document (document_header, header_fields).
ENVELOPE_FIELDS = frozenset(f.name for f in fields(Envelope))


def dumps_document(document: dict[str, Any], indent: int | None = 1) -> str:
    """A result document as the JSON file of every command that writes one: compact
    indentation, a final newline, and no NaN or infinity (strict JSON readers refuse them):
    such a value, which no measurement gives but an option or a division by zero might, is
    written as null, so a document can always be written and what was measured is kept."""
    try:
        text = _dumps(document, indent)
    except ValueError:
        text = _dumps(_finite(document), indent)
    return text + "\n"


# A list longer than this is written one item a line, each item compact: a trace's 20,000
# spans and one row a copy read as rows, and are written by json's C encoder (which an indented
# dump never uses): 0.12 s of a Ctrl-C'd trace's 0.84 s end on an H200 host was its indenting
ROWS_AFTER = 256


def _dumps(value: Any, indent: int | None, depth: int = 0) -> str:
    """`value` as json.dumps(indent=indent) writes it at `depth`, but for lists over ROWS_AFTER
    items: one compact item a line."""
    import json

    if indent is None or not _has_rows(value):
        text = json.dumps(value, indent=indent, allow_nan=False)  # a string's newline is "\\n"
        return text if indent is None else text.replace("\n", "\n" + " " * (indent * depth))
    pad, end = " " * (indent * (depth + 1)), "\n" + " " * (indent * depth)
    if isinstance(value, dict):  # a key that is not a string is written as json writes it
        items = [pad + json.dumps(k if isinstance(k, str) else json.dumps(k)) + ": "
                 + _dumps(v, indent, depth + 1) for k, v in value.items()]  # fmt: skip
        return "{\n" + ",\n".join(items) + end + "}"
    if len(value) > ROWS_AFTER:
        encode = json.JSONEncoder(allow_nan=False).encode  # one encoder for every row
        items = [pad + encode(item) for item in value]
    else:
        items = [pad + _dumps(item, indent, depth + 1) for item in value]
    return "[\n" + ",\n".join(items) + end + "]"


def _has_rows(value: Any) -> bool:
    """Whether `value` is, or holds, a list over ROWS_AFTER items."""
    if isinstance(value, (list, tuple)):
        return len(value) > ROWS_AFTER or any(
            _has_rows(v) for v in value if isinstance(v, (dict, list, tuple))
        )
    if isinstance(value, dict):
        return any(_has_rows(v) for v in value.values() if isinstance(v, (dict, list, tuple)))
    return False


def _finite(value: Any) -> Any:
    """`value` with every NaN and infinity replaced by None, at any depth."""
    import math

    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def dumps_table(columns: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A command's CSV: a header row, then one row per record, Unix line ends."""
    import csv
    import io

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(rows)
    return out.getvalue()


def document_header(name: str, version: int, result: Any) -> dict[str, Any]:
    """The fields every xferscope result document opens with (sweep, overlap, pageable)."""
    return {
        "schema": name,
        "schema_version": version,
        "tool_version": result.tool_version,
        "created": result.created,
        "simulated": result.simulated,
        "interrupted": result.interrupted,
        "wall_s": result.wall_s,
        "findings": [f.to_dict() for f in result.findings],
        "machine": result.machine,
        "options": result.options,
    }


def header_fields(d: Field) -> dict[str, Any]:
    """document_header read back, as keyword arguments of a result record."""
    return {
        "tool_version": d["tool_version"].string(),
        "created": d["created"].string(),
        "simulated": d["simulated"].boolean(),
        "machine": d["machine"].object(),
        "options": d["options"].object(),
        "interrupted": d["interrupted"].boolean(),
        "wall_s": d["wall_s"].number(),
        "findings": read_findings(d),
    }
