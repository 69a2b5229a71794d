"""Records that serialize themselves (documents/records.py): every field written in order, read
back by its type, nested records and tuples included; a field's document name and its omission
at the default; a wrong value named by its path."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import pytest

from xferscope.documents.reader import Field, SchemaError
from xferscope.documents.records import (
    KEY,
    NON_EMPTY,
    OMIT_DEFAULT,
    OMIT_WHEN,
    Column,
    Derived,
    dumps_columns,
    from_plain,
    to_plain,
)


@dataclass(frozen=True, slots=True)
class Inner:
    seconds: float
    ok: bool


@dataclass(frozen=True, slots=True)
class Outer:
    name: str
    count: int
    samples: tuple[float, ...]
    inner: tuple[Inner, ...]
    first: Inner | None
    error: str | None = None
    mix: str = field(default="", metadata={OMIT_DEFAULT: True})
    mixed: int = field(default=0, metadata={OMIT_DEFAULT: True, KEY: "bytes"})


def test_a_record_round_trips_in_field_order():
    record = Outer("a", 2, (1.0, 2.5), (Inner(0.1, True), Inner(0.2, False)), None, "boom")
    plain = to_plain(record)
    assert list(plain) == ["name", "count", "samples", "inner", "first", "error"]
    assert plain["inner"] == [{"seconds": 0.1, "ok": True}, {"seconds": 0.2, "ok": False}]
    assert from_plain(Outer, Field(plain)) == record


def test_a_field_has_its_document_name_and_is_left_out_at_its_default():
    record = Outer("a", 1, (), (), Inner(1.0, True), mix="lognormal", mixed=4096)
    plain = to_plain(record)
    assert plain["mix"] == "lognormal" and plain["bytes"] == 4096 and "mixed" not in plain
    assert from_plain(Outer, Field(plain)) == record


def test_a_wrong_value_is_named_by_its_path():
    plain = to_plain(Outer("a", 1, (), (Inner(1.0, True),), None))
    plain["inner"][0]["seconds"] = "slow"
    with pytest.raises(
        SchemaError, match=r"inner\[0\]\.seconds: expected a number, found a string"
    ):
        from_plain(Outer, Field(plain))
    del plain["count"]
    with pytest.raises(SchemaError, match="count is missing"):
        from_plain(Outer, Field(plain))


@dataclass(frozen=True, slots=True)
class Rated:
    label: str
    seconds: float
    offset: int = field(default=0, metadata={OMIT_WHEN: lambda r: r.label == "aligned"})
    added_later: float = 1.5
    samples: tuple[float, ...] = field(default=(1.0,), metadata={NON_EMPTY: True})
    DERIVED: ClassVar[tuple[Derived, ...]] = (
        Derived("rate", lambda r: 1 / r.seconds),
        Derived("shout", lambda r: r.label.upper(), after="label"),
    )


def test_derived_entries_stand_after_their_field_and_are_ignored_when_read():
    record = Rated("x", 0.5, 3)
    plain = to_plain(record)
    assert list(plain) == ["label", "shout", "seconds", "offset", "added_later", "samples", "rate"]
    assert plain["rate"] == 2.0 and plain["shout"] == "X"
    assert from_plain(Rated, Field(plain)) == record


def test_a_field_is_left_out_when_its_predicate_holds_and_read_back_as_its_default():
    assert "offset" not in to_plain(Rated("aligned", 1.0, 0))
    assert to_plain(Rated("x", 1.0, 0))["offset"] == 0
    assert from_plain(Rated, Field({"label": "aligned", "seconds": 1.0})) == Rated("aligned", 1.0)


def test_a_field_with_a_default_may_be_absent_one_without_may_not():
    read = from_plain(Rated, Field({"label": "x", "seconds": 2.0}))
    assert read.added_later == 1.5
    with pytest.raises(SchemaError, match="seconds is missing"):
        from_plain(Rated, Field({"label": "x"}))


def test_a_list_that_must_hold_values_refuses_an_empty_one():
    plain = to_plain(Rated("x", 1.0)) | {"samples": []}
    with pytest.raises(SchemaError, match=r"samples: expected at least one value, found none"):
        from_plain(Rated, Field(plain))


def test_columns_are_declared_once_name_and_value():
    columns = (Column("label", lambda r: r.label), Column("rate", lambda r: f"{1 / r.seconds:g}"))
    text = dumps_columns(columns, [Rated("a", 0.5), Rated("b", 0.25)])
    assert text == "label,rate\na,2\nb,4\n"
