"""Writers for result files. Each writes atomically: a reader never sees half a file, and a
failed write leaves any earlier file in place."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .csv import write_csv
from .json import write_json

__all__ = ["atomic_write", "write_csv", "write_json"]


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# Read once, at import, while nothing else runs: os.umask can only be read by setting it.
_UMASK = _read_umask()


def atomic_write(path: Path, text: str) -> None:
    path = Path(path)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            os.fchmod(handle.fileno(), 0o666 & ~_UMASK)  # mkstemp makes it private
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
