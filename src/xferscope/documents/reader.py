"""Reading xferscope's JSON documents back, with errors that say what is wrong and where.

`read_document` reads and parses a file: a missing, unreadable or non-JSON file is a one-line
error naming it. `Field` walks a parsed document for the readers (records.from_dict and the
like): a value of the wrong shape is a SchemaError naming the field, as in
"gpus[0].curves[3].points: expected a list, found a string", never Python's "string indices
must be integers".
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..core.errors import XferscopeError
from .files import read_text

# The largest document read back: far above any result xferscope writes (a full sweep is
# about 7 MB), and small enough to hold in memory.
MOST_DOCUMENT_BYTES = 1 << 30


class SchemaError(ValueError):
    """A document is not an xferscope document of a version this code reads, or a field of it
    has the wrong shape; the message names the field."""


class DocumentError(XferscopeError):
    """A file named on the command line cannot be read as an xferscope document."""


def read_document(path: Path) -> dict[str, Any]:
    """The JSON object in `path`; a DocumentError naming the file if there is none."""
    try:
        raw = read_text(path, MOST_DOCUMENT_BYTES)
    except FileNotFoundError as exc:
        raise DocumentError(f"{path}: no such file (and not a run id)") from exc
    except IsADirectoryError as exc:
        raise DocumentError(f"{path} is a directory, not a result's JSON file") from exc
    except UnicodeDecodeError as exc:
        raise DocumentError(f"{path} is not a text file, so not a result's JSON") from exc
    except OSError as exc:
        raise DocumentError(f"{path} cannot be read: {exc.strerror or exc}") from exc
    try:
        document = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise DocumentError(
            f"{path} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from exc
    except RecursionError:
        raise DocumentError(
            f"{path} is not an xferscope result (its JSON is nested too deeply to read)"
        ) from None
    if not isinstance(document, dict):
        raise DocumentError(f"{path} is not an xferscope result (its JSON is not an object)")
    return document


def check_schema(d: dict[str, Any], name: str, version: int, oldest: int | None = None) -> None:
    """Refuses a document that is not `name` at a version from `oldest` (default: `version`) to
    `version`: every xferscope document says which schema it follows."""
    if d.get("schema") != name:
        raise SchemaError(f"not an {name} document (schema is {d.get('schema')!r})")
    found = d.get("schema_version")
    versions = range(version if oldest is None else oldest, version + 1)
    if isinstance(found, bool) or found not in versions:
        reads = f"{versions[0]} to {version}" if len(versions) > 1 else str(version)
        raise SchemaError(f"schema version {found} is not supported (this reads {reads})")


_KINDS = {
    dict: "an object",
    list: "a list",
    str: "a string",
    bool: "true or false",
    int: "a whole number",
    float: "a number",
    type(None): "null",
}


def _kind(value: object) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else "an infinity"
    return _KINDS.get(type(value), type(value).__name__)


class Field:
    """A value in a parsed document and where it lies ("gpus[0].status"). Reading it as the
    wrong shape raises a SchemaError that names the place."""

    __slots__ = ("path", "value")

    def __init__(self, value: Any, path: str = "") -> None:
        self.value = value
        self.path = path

    def _fail(self, expected: str) -> SchemaError:
        where = self.path or "the document"
        return SchemaError(f"{where}: expected {expected}, found {_kind(self.value)}")

    def _child(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def __getitem__(self, key: str) -> Field:
        """A field that must be there."""
        mapping = self.object()
        if key not in mapping:
            raise SchemaError(f"{self._child(key)} is missing")
        return Field(mapping[key], self._child(key))

    def get(self, key: str, default: Any = None) -> Field:
        """A field that may be absent (then `default`)."""
        return Field(self.object().get(key, default), self._child(key))

    def __contains__(self, key: str) -> bool:
        return key in self.object()

    @property
    def null(self) -> bool:
        return self.value is None

    def object(self) -> dict[str, Any]:
        if not isinstance(self.value, dict):
            raise self._fail("an object")
        return self.value

    def items(self) -> list[Field]:
        """The elements of a list."""
        if not isinstance(self.value, list):
            raise self._fail("a list")
        return [Field(v, f"{self.path}[{i}]") for i, v in enumerate(self.value)]

    def string(self) -> str:
        if not isinstance(self.value, str):
            raise self._fail("a string")
        return self.value

    def integer(self) -> int:
        if isinstance(self.value, bool) or not isinstance(self.value, int):
            raise self._fail("a whole number")
        return self.value

    def number(self) -> float:
        if isinstance(self.value, bool) or not isinstance(self.value, (int, float)):
            raise self._fail("a number")
        if not math.isfinite(self.value):
            raise self._fail("a finite number")
        return float(self.value)

    def boolean(self) -> bool:
        if not isinstance(self.value, bool):
            raise self._fail("true or false")
        return self.value

    def optional_string(self) -> str | None:
        return None if self.value is None else self.string()

    def optional_integer(self) -> int | None:
        return None if self.value is None else self.integer()

    def optional_number(self) -> float | None:
        return None if self.value is None else self.number()

    def optional_boolean(self) -> bool | None:
        return None if self.value is None else self.boolean()

    def numbers(self) -> tuple[float, ...]:
        return tuple(f.number() for f in self.items())

    def integers(self) -> tuple[int, ...]:
        return tuple(f.integer() for f in self.items())

    def strings(self) -> tuple[str, ...]:
        return tuple(f.string() for f in self.items())
