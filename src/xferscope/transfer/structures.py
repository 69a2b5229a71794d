"""The tensors and arrays of a nested structure (a state dict, a batch), taken out and put back:
what `xferscope.to_device` and `to_host` move with one copy_many under them. A structure is a
dict (or any mapping made from its items: OrderedDict, defaultdict), a list, a tuple, a
namedtuple or a dataclass instance, nested to any depth; what is not one is a leaf. One object
met twice (tied weights) is one leaf, moved once, and both places get the one copy. A structure
that contains itself is refused, naming where."""

from __future__ import annotations

import dataclasses
import gc
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

MOST_DEPTH = 100  # nesting deeper than this is refused (a structure that contains itself)


class StructureError(ValueError):
    """A structure that cannot be taken apart: it contains itself, or nests too deep."""


class Flat:
    """A structure taken apart: its leaves (each object once, in the order first met) with the
    path to the first place each was met (`state['layer.0.weight']`, `batch[1]`), and how to
    build the structure again from new leaves. Paths are written when asked for (an 18,867-
    tensor state dict is walked in about 6 us a leaf; writing each path cost a part of it)."""

    __slots__ = ("_build", "_where", "leaves")

    def __init__(
        self, leaves: tuple[Any, ...], where: list[Any], build: Callable[[list[Any]], Any]
    ) -> None:
        self.leaves, self._where, self._build = leaves, where, build

    def rebuild(self, new: list[Any]) -> Any:
        """The structure again, each leaf replaced by the new one at its place."""
        with _no_collection():
            return self._build(new)

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(_path(w) for w in self._where)


def _path(where: Any) -> str:
    """A path as walk keeps it: the root's name, or (parent, step, how) (how: "[]" an item by
    its key's repr, "." an attribute, "#" an item by its index)."""
    if isinstance(where, str):
        return where
    parent, step, how = where
    if how == ".":
        return f"{_path(parent)}.{step}"
    return f"{_path(parent)}[{step!r}]" if how == "[]" else f"{_path(parent)}[{step}]"


def flatten(obj: Any, is_leaf: Callable[[Any], bool], root: str = "obj") -> Flat:
    """`obj` taken apart down to the objects `is_leaf` says are leaves (the tensors and arrays
    to move); every other object that is not a structure stays as it is (numbers, strings,
    None), shared with the rebuilt structure as `copy.copy` would share it."""
    leaves: list[Any] = []
    paths: list[Any] = []  # where each leaf was first met (_path writes it)
    index: dict[int, int] = {}  # id(leaf) -> its place in leaves

    def leaf(x: Any, path: Any) -> int:
        at = index.get(id(x))
        if at is None:
            at = index[id(x)] = len(leaves)
            leaves.append(x)
            paths.append(path)
        return at

    # a part of a structure: a leaf's place in `leaves` (an int), else what builds it again
    def walk(x: Any, path: Any, depth: int, open_ids: set[int]) -> Any:
        if is_leaf(x):
            return leaf(x, path)
        kind = _kind(x)
        if kind is None:
            return lambda new: x
        if id(x) in open_ids or depth >= MOST_DEPTH:
            raise _too_deep(_path(path))
        open_ids = open_ids | {id(x)}
        deeper = depth + 1

        def part(v: Any, where: Any) -> Any:  # a leaf without a call of walk: most are
            return leaf(v, where) if is_leaf(v) else walk(v, where, deeper, open_ids)  # noqa: F821

        if kind == "mapping":
            keys = list(x.keys())
            parts = [part(x[k], (path, k, "[]")) for k in keys]
            return lambda new: _mapping(x, dict(zip(keys, _built(parts, new), strict=True)))
        if kind == "dataclass":
            names = _fields(x)
            parts = [part(getattr(x, n), (path, n, ".")) for n in names]
            return lambda new: dataclasses.replace(
                x, **dict(zip(names, _built(parts, new), strict=True))
            )
        parts = [part(v, (path, i, "#")) for i, v in enumerate(x)]
        if kind == "namedtuple":
            return lambda new: _tuple_like(x, _built(parts, new))
        if kind == "tuple":
            return lambda new: tuple(_built(parts, new))
        return lambda new: _built(parts, new)

    with _no_collection():
        top = walk(obj, root, 0, set())
    # walk refers to itself (it recurses): a cycle through leaf to every leaf, which would keep
    # them until the cyclic collector ran, and a GPU tensor collected in a forked DataLoader
    # worker aborts it. Its name dropped, the cycle is gone and they are freed as usual.
    del walk
    build = top if not isinstance(top, int) else lambda new: new[top]
    return Flat(tuple(leaves), paths, build)


def each_leaf(obj: Any, is_leaf: Callable[[Any], bool], depth: int = 0) -> Iterator[Any]:
    """The leaves of `obj` in the order flatten meets them (one met twice, twice), found by the
    same structures and nothing built: for a look at them (a batch's first tensor, each tensor
    of a batch). StructureError for one that nests deeper than MOST_DEPTH."""
    if is_leaf(obj):
        yield obj
        return
    kind = _kind(obj)
    if kind is None:
        return
    if depth >= MOST_DEPTH:
        raise _too_deep("obj")
    if kind == "mapping":
        parts: Any = obj.values()
    elif kind == "dataclass":
        parts = (getattr(obj, n) for n in _fields(obj))
    else:
        parts = obj
    for part in parts:
        yield from each_leaf(part, is_leaf, depth + 1)


def _too_deep(where: str) -> StructureError:
    return StructureError(
        f"{where} contains itself, or nests deeper than {MOST_DEPTH}: "
        "to_device takes dicts, lists, tuples, namedtuples and dataclasses of tensors"
    )


def _fields(x: Any) -> list[str]:
    """A dataclass instance's fields that its constructor takes (what replace() rebuilds)."""
    return [f.name for f in dataclasses.fields(x) if f.init]


@contextmanager
def _no_collection() -> Iterator[None]:
    """Python's cyclic collector paused: a walk makes an object or two per leaf and no cycle,
    and the collections these set off took half of a large state dict's walk."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _built(parts: list[Any], new: list[Any]) -> list[Any]:
    """Each part built again: a leaf's new object by its place, else its builder's."""
    return [new[p] if type(p) is int else p(new) for p in parts]


def _kind(x: Any) -> str | None:
    """Which structure `x` is: mapping, dataclass, namedtuple, tuple, list; None for a leaf left
    as it is."""
    if isinstance(x, Mapping):
        return "mapping"
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return "dataclass"
    if isinstance(x, tuple):  # a subclass: a namedtuple, made again from its fields
        return "tuple" if type(x) is tuple else "namedtuple"
    if isinstance(x, list):
        return "list"
    return None


def _tuple_like(original: tuple[Any, ...], values: list[Any]) -> Any:
    """A tuple of the original's type holding exactly `values`: a namedtuple takes them one by
    one, another tuple subclass as one iterable, as tuple does (whichever holds them, each the
    very object given; else a plain tuple)."""
    kind: Any = type(original)
    for args in (values, [values]):
        try:
            made = kind(*args)
        except TypeError:
            continue
        if len(made) == len(values) and all(m is v for m, v in zip(made, values, strict=True)):
            return made
    return tuple(values)


def _mapping(original: Mapping[Any, Any], items: dict[Any, Any]) -> Any:
    """A mapping of the original's type with `items`: a dict subclass made from its items (a
    defaultdict keeps its default factory), else a plain dict."""
    kind: Any = type(original)
    if kind is dict:
        return items
    made: Any
    if isinstance(original, defaultdict):
        made = defaultdict(original.default_factory)
        made.update(items)
    else:
        try:
            made = kind(items)
        except TypeError:  # a mapping type not made from its items
            return dict(items)
    # its own attributes too: PyTorch's state dict keeps each module's version in _metadata
    for name, value in getattr(original, "__dict__", {}).items():
        try:
            setattr(made, name, value)
        except AttributeError:
            break
    return made
