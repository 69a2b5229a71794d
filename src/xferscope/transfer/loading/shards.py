"""Which safetensors files a checkpoint is, and which tensors each holds: one file, several, a
directory, or a sharded set's index (`model.safetensors.index.json`, whose "weight_map" names
each tensor's shard, as Hugging Face writes it). Every file's layout is read and checked, the
index's map is held against the shards' headers, and a tensor in two files is refused."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from .layout import CheckpointError, Layout, read_layout

INDEX_SUFFIX = ".safetensors.index.json"


class Shard(NamedTuple):
    """One file of a checkpoint, and where an index names it, the index and the tensors it
    maps there."""

    path: Path
    index_file: Path | None = None
    mapped: tuple[str, ...] = ()


def checkpoint_files(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
) -> list[Shard]:
    """The files `paths` names (a file, a directory, an index, or a list of files), before any
    header is read; CheckpointError for none, or a shard an index names that is missing."""
    if isinstance(paths, (str, os.PathLike)):
        files = _one(Path(paths))
    else:
        files = [f for p in paths for f in _one(Path(p))]
    if not files:
        raise CheckpointError(f"{_named(paths)}: no safetensors file there")
    return files


def checkpoint_layouts(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    files: list[Shard] | None = None,
) -> list[Layout]:
    """The layouts of the files `paths` names (`files`, where already found), each tensor in
    exactly one; CheckpointError naming what is wrong."""
    layouts = [_checked(shard) for shard in (checkpoint_files(paths) if files is None else files)]
    seen: dict[str, Path] = {}
    for layout in layouts:
        for t in layout.tensors:
            other = seen.setdefault(t.name, layout.path)
            if other != layout.path:
                raise CheckpointError(
                    f"tensor {t.name!r} is in both {other} and {layout.path}: one checkpoint "
                    "holds each tensor once"
                )
    return layouts


def _named(paths: object) -> str:
    if isinstance(paths, (str, os.PathLike)):
        return str(paths)
    return ", ".join(str(p) for p in paths)  # type: ignore[attr-defined]


def _one(path: Path) -> list[Shard]:
    if path.is_dir():
        indexes = sorted(path.glob(f"*{INDEX_SUFFIX}"))
        if len(indexes) == 1:
            return _indexed(indexes[0])
        if len(indexes) > 1:
            raise CheckpointError(
                f"{path}: {len(indexes)} indexes ({', '.join(i.name for i in indexes)}); "
                "name the one to load"
            )
        return [Shard(f) for f in sorted(path.glob("*.safetensors"))]
    if path.name.endswith(INDEX_SUFFIX):
        return _indexed(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such file or directory")
    return [Shard(path)]


def _indexed(index: Path) -> list[Shard]:
    """The shards `index` maps tensors to, each there."""
    if not index.is_file():  # a directory, a FIFO (whose read would wait), or nothing
        raise CheckpointError(f"{index}: not a regular file (an index is a JSON file)")
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise CheckpointError(
            f'{index}: not an index of shards (a JSON object with a "weight_map" of tensor '
            f"names to files): {type(exc).__name__} {exc}"
        ) from None
    if not isinstance(weight_map, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
    ):
        raise CheckpointError(f"{index}: its weight_map is not an object of names to files")
    by_shard: dict[str, list[str]] = {}
    for name, shard in weight_map.items():
        by_shard.setdefault(shard, []).append(name)
    shards = []
    for shard, names in by_shard.items():
        file = index.parent / shard
        if Path(shard).name != shard:
            raise CheckpointError(f"{index}: shard {shard!r} is not a file beside the index")
        if not file.is_file():
            raise CheckpointError(
                f"{index}: shard {shard} ({len(names)} tensors, {names[0]!r} first) is missing"
            )
        shards.append(Shard(file, index, tuple(names)))
    return shards


def _checked(shard: Shard) -> Layout:
    """The shard's layout, checked to hold what its index maps to it."""
    layout = read_layout(shard.path)
    if shard.mapped:
        held = {t.name for t in layout.tensors}
        absent = [n for n in shard.mapped if n not in held]
        if absent:
            raise CheckpointError(
                f"{shard.index_file}: tensor {absent[0]!r} is mapped to {shard.path.name}, which "
                f"does not hold it ({len(absent)} such)"
            )
    return layout
