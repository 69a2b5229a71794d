"""JSON: the whole result with its versioned schema, raw samples and machine metadata."""

from __future__ import annotations

import json
from pathlib import Path

from ..sweep.records import SweepResult, from_dict, to_dict
from .envelope import dumps_document


def dumps(result: SweepResult) -> str:
    return dumps_document(to_dict(result), indent=2)


def write_json(result: SweepResult, path: Path) -> None:
    from .files import atomic_write

    atomic_write(path, dumps(result))


def read_json(path: Path) -> SweepResult:
    return from_dict(json.loads(Path(path).read_text()))
