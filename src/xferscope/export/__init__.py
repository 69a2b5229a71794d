"""Writers for result files. Each writes atomically: a reader never sees half a file, and a
failed write leaves any earlier file in place."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .csv import write_csv
from .json import write_json

__all__ = ["atomic_write", "write_csv", "write_json"]


def atomic_write(path: Path, text: str) -> None:
    path = Path(path)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temp, 0o666 & ~umask)  # mkstemp makes the file private; results are shared
        with os.fdopen(fd, "w", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
