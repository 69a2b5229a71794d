"""Records that serialize themselves from their dataclass fields: `to_plain` writes a record as
a dict of its fields, in their order (nested records and tuples of them too), and `from_plain`
reads one back through the field reader (reader.Field), by each field's type, with its error
messages naming the field. Adding a field to a record is one edit. A result's whole document
(the envelope's header, then the record's own fields) is written by `result_document` and read
by `read_result`; a CSV's columns are declared once, name and value together (`Column`).

A field's metadata may give its name in the document (`KEY`), say that it is left out when it
holds its default (`OMIT_DEFAULT`) or when a predicate of the record holds (`OMIT_WHEN`), and
that a list must not be empty (`NON_EMPTY`). A field that has a default may be absent from a
document (it was added later, or left out at its default): it is read back as the default.

What a document adds for its readers beside the fields (derived summaries such as a bandwidth)
a record class lists in `DERIVED`, each written after the field it names (or after every field);
they are ignored when loading."""

from __future__ import annotations

import dataclasses
import operator
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, TypeVar, Union, get_args, get_origin, get_type_hints

from ..core import stats
from .envelope import ENVELOPE_FIELDS, document_header, dumps_table, header_fields
from .reader import Field, SchemaError, check_schema

T = TypeVar("T")
R = TypeVar("R")
KEY = "document_key"  # the field's name in the document
OMIT_DEFAULT = "omit_default"  # left out of the document when it holds its default
OMIT_WHEN = "omit_when"  # left out when this predicate of the record holds
NON_EMPTY = "non_empty"  # a list that must hold at least one value


@dataclasses.dataclass(frozen=True, slots=True)
class Derived:
    """An entry of a record's document that its fields imply (a rate, a label, a summary),
    written after the field `after` (None: after every field) and ignored when loading."""

    key: str
    value: Callable[[Any], Any]
    after: str | None = None


def to_plain(record: Any, skip: Iterable[str] = ()) -> dict[str, Any]:
    """A record's fields as a dict, nested records and tuples made plain, its DERIVED entries
    in their places; the fields named in `skip` are left out."""
    skipped = frozenset(skip)
    derived: tuple[Derived, ...] = getattr(type(record), "DERIVED", ())
    out: dict[str, Any] = {}
    for f in dataclasses.fields(record):
        if f.name in skipped:
            continue
        value = getattr(record, f.name)
        if not _omitted(f, value, record):
            out[f.metadata.get(KEY, f.name)] = _plain(value)
        out.update({d.key: _plain(d.value(record)) for d in derived if d.after == f.name})
    out.update({d.key: _plain(d.value(record)) for d in derived if d.after is None})
    return out


def _omitted(f: dataclasses.Field[Any], value: Any, record: Any) -> bool:
    if f.metadata.get(OMIT_DEFAULT) and value == f.default:
        return True
    when = f.metadata.get(OMIT_WHEN)
    return when is not None and bool(when(record))


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_plain(value)
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value


def from_plain(cls: type[T], d: Field, **given: Any) -> T:
    """The record of class `cls` a document holds at `d`: every field read by its type, but
    those `given` (read otherwise by the caller)."""
    hints = _hints(cls)
    values = dict(given)
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        key = f.metadata.get(KEY, f.name)
        if f.name in given or (_has_default(f) and key not in d):
            continue
        values[f.name] = value = _read(hints[f.name], d[key])
        if f.metadata.get(NON_EMPTY) and not value:
            raise SchemaError(f"{d[key].path}: expected at least one value, found none")
    return cls(**values)


def _has_default(f: dataclasses.Field[Any]) -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


def _hints(cls: type[Any]) -> dict[str, Any]:
    cached = _HINTS.get(cls)
    if cached is None:
        cached = _HINTS[cls] = get_type_hints(cls)
    return cached


_HINTS: dict[type[Any], dict[str, Any]] = {}


def _read(kind: Any, x: Field) -> Any:
    origin, args = get_origin(kind), get_args(kind)
    if origin in (Union, types.UnionType) and type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        return None if x.null else _read(inner, x)
    if kind is bool:
        return x.boolean()
    if kind is int:
        return x.integer()
    if kind is float:
        return x.number()
    if kind is str:
        return x.string()
    if origin is tuple:
        item = args[0]
        return tuple(_read(item, i) for i in x.items())
    if dataclasses.is_dataclass(kind):
        return from_plain(kind, x)  # type: ignore[arg-type]
    if kind is dict or origin is dict:
        return x.object()
    if kind is typing.Any:
        return x.value
    raise SchemaError(f"{x.path}: a field of type {kind!r} cannot be read")


# ---- whole results ----------------------------------------------------------------------------


def result_document(name: str, version: int, result: Any) -> dict[str, Any]:
    """A result's document: the envelope's header (envelope.document_header), then the record's
    own fields and derived entries."""
    return document_header(name, version, result) | to_plain(result, skip=ENVELOPE_FIELDS)


def read_result(
    cls: type[T], d: dict[str, Any], name: str, version: int, oldest: int | None = None
) -> T:
    """A result document read back as a `cls` record: its schema checked, its header and its
    fields read; a SchemaError names the field that is wrong."""
    check_schema(d, name, version, oldest)
    root = Field(d)
    return from_plain(cls, root, **header_fields(root))


# ---- CSV --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Column(Generic[R]):
    """A CSV column: its name and its value in a row's record."""

    name: str
    value: Callable[[R], object]


def dumps_columns(columns: Sequence[Column[R]], rows: Iterable[R]) -> str:
    """A CSV with one row per record, its columns declared once."""
    return dumps_table([c.name for c in columns], ([c.value(r) for c in columns] for r in rows))


def attribute_columns(*names: str) -> tuple[Column[Any], ...]:
    """Columns that are a record's attributes of the same names, as they are."""
    return tuple(Column(name, operator.attrgetter(name)) for name in names)


def median_text(samples: Sequence[float]) -> str:
    """The median of a record's trials in a CSV cell (empty when there were none)."""
    return "" if not samples else f"{stats.median(samples):.6g}"
