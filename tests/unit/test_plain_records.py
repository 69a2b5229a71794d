"""Records that serialize themselves (documents/records.py): every field written in order, read
back by its type, nested records and tuples included; a field's document name and its omission
at the default; a wrong value named by its path."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from xferscope.documents.reader import Field, SchemaError
from xferscope.documents.records import KEY, OMIT_DEFAULT, from_plain, to_plain


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
