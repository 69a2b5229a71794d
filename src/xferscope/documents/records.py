"""Records that serialize themselves from their dataclass fields: `to_plain` writes a record as
a dict of its fields, in their order (nested records and tuples of them too), and `from_plain`
reads one back through the field reader (reader.Field), by each field's type, with its error
messages naming the field. Adding a field to such a record is one edit. What a document adds
for its readers (derived summaries) is written beside the fields and ignored when loading.

A field's metadata may give its name in the document (`KEY`) and say that it is left out when
it holds its default (`OMIT_DEFAULT`; read back as the default when absent)."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

from .reader import Field, SchemaError

T = TypeVar("T")
KEY = "document_key"
OMIT_DEFAULT = "omit_default"


def to_plain(record: Any) -> dict[str, Any]:
    """A record's fields as a dict, nested records and tuples made plain."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if f.metadata.get(OMIT_DEFAULT) and value == f.default:
            continue
        out[f.metadata.get(KEY, f.name)] = _plain(value)
    return out


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_plain(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def from_plain(cls: type[T], d: Field) -> T:
    """The record of class `cls` a document holds at `d`: every field read by its type."""
    hints = _hints(cls)
    values = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        key = f.metadata.get(KEY, f.name)
        if f.metadata.get(OMIT_DEFAULT) and key not in d:
            continue
        values[f.name] = _read(hints[f.name], d[key])
    return cls(**values)


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
