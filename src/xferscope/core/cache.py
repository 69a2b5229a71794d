"""What xferscope keeps between runs to spare the next one work: one directory, JSON files in
it. $XFERSCOPE_CACHE, else $XDG_CACHE_HOME/xferscope, else ~/.cache/xferscope. A file that is
missing, unreadable, not JSON or not a regular file is nothing kept; one that cannot be written
costs the next run only the work it would have spared."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..documents import files

CACHE_ENV = "XFERSCOPE_CACHE"


def cache_directory() -> Path:
    given = os.environ.get(CACHE_ENV, "").strip()
    if given:
        return Path(given).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(base).expanduser() if base else Path.home() / ".cache") / "xferscope"


def load(name: str) -> dict[str, Any]:
    """The cache file `name`'s object; {} where nothing usable is kept (a FIFO there would
    hold the read forever: not read)."""
    path = cache_directory() / name
    if files.special(path) is not None:
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def store(name: str, data: dict[str, Any]) -> None:
    """`data` written as the cache file `name`, whole or not at all; nothing where it cannot be."""
    path = cache_directory() / name
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        files.atomic_write(path, json.dumps(data, indent=1, sort_keys=True))
    except OSError:
        pass
