"""Writers for result files, each atomic (files.atomic_write): a reader never sees half a file,
and a failed write leaves any earlier file in place."""

from __future__ import annotations

from ..files import atomic_write
from .csv import write_csv
from .json import write_json

__all__ = ["atomic_write", "write_csv", "write_json"]
