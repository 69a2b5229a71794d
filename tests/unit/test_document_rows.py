"""Every command's JSON file (documents/envelope.dumps_document): written as json.dumps with an
indent of 1 writes it, but a long list (a trace's spans, its copies) one compact item a line, so
that it is written by json's C encoder and reads as rows; the same JSON either way."""

from __future__ import annotations

import json
import math
import random

from xferscope.documents.envelope import ROWS_AFTER, dumps_document


def nested(rng: random.Random, depth: int) -> object:
    """A random document part: dicts (some keys not strings), lists short and long, scalars."""
    kind = rng.randrange(6 if depth < 3 else 3)
    if kind == 0:
        return rng.choice([None, True, False, 0, -7, 2.5, 1e300, 'a\nb "q" \u00e9', ""])
    if kind == 1:
        return rng.random()
    if kind == 2:
        return rng.choice(["x", 12, 3.25])
    if kind == 3:
        keys = [rng.choice(["k", "s p", 1, 2.5, True, None]) for _ in range(rng.randrange(4))]
        return {k: nested(rng, depth + 1) for k in keys}
    size = rng.choice([0, 1, 3, ROWS_AFTER, ROWS_AFTER + 1, ROWS_AFTER + 40])
    return [nested(rng, depth + 2) for _ in range(size)]


def test_a_document_reads_back_as_json_writes_it_whatever_its_lists():
    rng = random.Random(7)
    for _ in range(200):
        doc = {"schema": "x", "part": nested(rng, 0), "more": [nested(rng, 1) for _ in range(3)]}
        text = dumps_document(doc)
        assert json.loads(text) == json.loads(json.dumps(doc)), text[:400]
        assert text.endswith("\n")


def test_short_lists_are_written_as_an_indented_dump_and_long_ones_a_row_a_line():
    small = {"a": [1, 2, {"b": [3] * 10}], 1: {"x": None, 2.5: [True]}, "s": "l\nine"}
    assert dumps_document(small) == json.dumps(small, indent=1) + "\n"
    rows = [{"stream": 7, "start_ns": i, "end_ns": i + 5} for i in range(ROWS_AFTER + 1)]
    text = dumps_document({"summary": {"spans": rows, "n": 1}})
    lines = text.splitlines()
    assert lines[:3] == ["{", ' "summary": {', '  "spans": [']
    assert lines[3] == '   {"stream": 7, "start_ns": 0, "end_ns": 5},'
    assert len(lines) == 3 + len(rows) + 4  # the rows, "]," "n", "}" and "}"
    assert json.loads(text)["summary"]["spans"] == rows


def test_a_value_no_strict_reader_takes_is_written_as_null_in_a_row_too():
    rows = [{"v": float(i)} for i in range(ROWS_AFTER + 1)]
    rows[5]["v"] = math.nan
    back = json.loads(dumps_document({"rows": rows, "inf": math.inf}))
    assert back["rows"][5]["v"] is None and back["inf"] is None and back["rows"][6]["v"] == 6.0
