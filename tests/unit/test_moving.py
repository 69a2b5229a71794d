"""xferscope.to_device and to_host without a GPU: structures taken apart and built again (every
kind, tied leaves, a structure that contains itself), devices named in PyTorch's words, and the
move itself over the simulated engine with a stand-in framework. tests/gpu/test_moving_gpu.py
moves PyTorch tensors and CuPy arrays."""

from __future__ import annotations

import dataclasses
import types
from collections import OrderedDict, defaultdict, namedtuple
from typing import Any

import numpy as np
import pytest

from xferscope.core.compiled import engine_module
from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.transfer import moving
from xferscope.transfer import structure_copies as moves
from xferscope.transfer.structures import StructureError, each_leaf, flatten

staging_bytes = engine_module().staging_bytes
GPU_BASE = 0x2000_0000_0000  # below where the host maps its own memory
Pair = namedtuple("Pair", "x y")


@dataclasses.dataclass
class Batch:
    images: Any
    labels: Any
    name: str = "b"


def _is_array(x: Any) -> bool:
    return isinstance(x, np.ndarray)


def test_every_kind_of_structure_is_built_again_around_new_leaves():
    a, b, c = np.zeros(2), np.ones(3), np.arange(4)
    state = OrderedDict(w=a, tied=a)
    state._metadata = {"": {"version": 1}}  # type: ignore[attr-defined]
    counts: defaultdict[str, Any] = defaultdict(int, n=b)
    obj = {"state": state, "pair": Pair(b, [c, 7, "text"]), "batch": Batch(c, (a, None)),
           "counts": counts}  # fmt: skip
    flat = flatten(obj, _is_array)
    assert [id(x) for x in flat.leaves] == [id(a), id(b), id(c)]  # each once, first met first
    assert flat.paths == ("obj['state']['w']", "obj['pair'][0]", "obj['pair'][1][0]")
    new = flat.rebuild(["A", "B", "C"])
    assert new["state"] == OrderedDict(w="A", tied="A") and type(new["state"]) is OrderedDict
    assert new["state"]._metadata == {"": {"version": 1}}
    assert new["pair"] == Pair("B", ["C", 7, "text"]) and type(new["pair"]) is Pair
    assert new["batch"] == Batch("C", ("A", None))
    assert type(new["counts"]) is defaultdict and new["counts"]["missing"] == 0
    assert obj["state"]["w"] is a  # the original untouched


def test_a_structure_that_contains_itself_is_refused_naming_where():
    loop: list[Any] = [np.zeros(1)]
    loop.append({"again": loop})
    with pytest.raises(StructureError, match=r"obj\[1\]\['again'\] contains itself"):
        flatten(loop, _is_array)


@pytest.mark.parametrize(
    ("device", "index"),
    [
        (None, 0),
        (2, 2),
        ("cuda", 0),
        ("cuda:1", 1),
        (types.SimpleNamespace(type="cuda", index=3), 3),
    ],
)
def test_devices_are_named_in_pytorchs_words(device, index):
    assert moving.gpu_index(device) == index


@pytest.mark.parametrize(
    "device",
    ["cpu", "cuda:x", "", "cuda:", -1, True, 1.0, float("nan"), 10**30, "cuda:99999999999",
     types.SimpleNamespace(type="cpu", index=None)],
)  # fmt: skip
def test_a_device_that_is_no_gpu_is_one_clear_error(device):
    with pytest.raises(ValueError, match=r"^device: .* is not a CUDA device"):
        moving.gpu_index(device)


class FakeGpuArray:
    """An array on the simulated GPU: __cuda_array_interface__ over device memory it knows."""

    def __init__(self, address: int, nbytes: int):
        self.nbytes = nbytes
        self.__cuda_array_interface__ = {
            "data": (address, False), "shape": (nbytes,), "typestr": "|u1", "strides": None,
            "version": 3,
        }  # fmt: skip


def _framework(synchronized: list[set[int]]) -> types.SimpleNamespace:
    """NumPy arrays as the host side of a framework whose GPU arrays are FakeGpuArray."""
    next_at = [GPU_BASE]

    def upload(a: np.ndarray, index: int) -> tuple[Any, Any]:
        made = FakeGpuArray(next_at[0] + index * (1 << 40), a.nbytes)
        next_at[0] += max(a.nbytes, 256)
        return made, (a if a.nbytes else None)

    return types.SimpleNamespace(
        is_leaf=_is_array, gpu_of=lambda a: None, upload_many=lambda arrays, index: tuple(
            map(list, zip(*[upload(a, index) for a in arrays], strict=True))),
        synchronize=lambda gpus: synchronized.append(set(gpus)),
    )  # fmt: skip


@pytest.fixture
def engine() -> SimulatedEngine:
    """Two simulated GPUs, each with the device memory FakeGpuArray addresses."""
    made = SimulatedEngine(devices=2)
    for d in range(2):
        made.register_memory(GPU_BASE + d * (1 << 40), 1 << 40, "device", d)
    return made


@pytest.fixture
def calls(monkeypatch) -> list[tuple[int, int | None]]:
    """Each copy_many call the move makes: (pairs, GPU)."""
    made: list[tuple[int, int | None]] = []
    real = moving.copy_many

    def counted(pairs: list, device: int | None = None, **kw: Any) -> Any:
        made.append((len(pairs), device))
        return real(pairs, device=device, **kw)

    monkeypatch.setattr(moving, "copy_many", counted)
    return made


def test_to_device_moves_each_leaf_once_by_one_copy_many(monkeypatch, engine, calls):
    synchronized: list[set[int]] = []
    monkeypatch.setattr(moves, "FRAMEWORKS", (_framework(synchronized),))
    w = np.random.default_rng(0).random(1000)
    state = {"w": w, "tied": w, "b": np.ones(10), "empty": np.zeros(0), "step": 3}
    moved = moving.to_device(state, "cuda:1", engine=engine)
    assert calls == [(2, 1)]  # w and b; the tied one once, the empty one not copied
    assert synchronized == [{1}]
    assert moved["tied"] is moved["w"] and moved["step"] == 3
    assert all(isinstance(moved[k], FakeGpuArray) for k in ("w", "b", "empty"))
    address = moved["w"].__cuda_array_interface__["data"][0]
    assert address >> 40 == (GPU_BASE + (1 << 40)) >> 40  # on GPU 1


def test_nothing_to_move_makes_no_copy(monkeypatch):
    monkeypatch.setattr(moves, "FRAMEWORKS", (_framework([]),))
    monkeypatch.setattr(moving, "copy_many", lambda *a, **k: pytest.fail("copied"))
    assert moving.to_device({"n": 1, "s": "x"}, 0) == {"n": 1, "s": "x"}
    assert moving.to_host([1, (2, None)]) == [1, (2, None)]


def test_to_host_moves_each_gpus_leaves_by_one_copy_many_each(monkeypatch, engine, calls):
    synchronized: list[set[int]] = []

    def download(a: FakeGpuArray, non_blocking: bool) -> tuple[Any, Any]:
        return np.empty(a.nbytes, dtype=np.uint8), a

    def gpu_of(a: Any) -> int | None:
        if isinstance(a, np.ndarray):
            return None
        return int((a.__cuda_array_interface__["data"][0] - GPU_BASE) >> 40)

    framework = types.SimpleNamespace(
        is_leaf=lambda x: isinstance(x, FakeGpuArray), gpu_of=gpu_of,
        download_many=lambda arrays, pinned: tuple(
            map(list, zip(*[download(a, pinned) for a in arrays], strict=True))),
        synchronize=lambda gpus: synchronized.append(set(gpus)),
    )  # fmt: skip
    monkeypatch.setattr(moves, "FRAMEWORKS", (framework,))
    on = [FakeGpuArray(GPU_BASE + d * (1 << 40) + i * 4096, 4096) for d in (0, 1, 1) for i in [d]]
    back = moving.to_host({"a": on[0], "b": [on[1], on[2]]}, engine=engine)
    assert synchronized == [{0, 1}]
    assert calls == [(1, 0), (2, 1)]
    assert isinstance(back["a"], np.ndarray) and len(back["b"]) == 2


def test_warmup_makes_the_copier_and_its_staged_copy_ahead(engine):
    from xferscope.transfer.copy import copies_of

    moving.warmup("cuda:1", engine=engine)
    copier = copies_of(engine).copier(1)
    assert copier.staged_prepared and not copier.closed
    with pytest.raises(ValueError, match=r"^device: 'cpu'"):
        moving.warmup("cpu", engine=engine)


def test_pinned_memory_held_grows_to_the_largest_batch_then_stays(engine):
    """Pageable pieces of 1-64 KiB in batches of 6-40 (packed, under the rule), 300 calls of
    changing shapes: what copy_many's copier holds grows in steps to the largest and stays;
    release() gives it back."""
    moving.release()  # the copiers earlier tests left
    rng = np.random.default_rng(3)
    host = np.zeros(40 * 65536, dtype=np.uint8)
    largest, after_first_half = 0, 0
    for call in range(300):
        count, size = int(rng.integers(6, 41)), int(rng.integers(1024, 65537))
        blocks = [FakeGpuArray(GPU_BASE + i * 65536, size) for i in range(count)]
        pairs = [(g, host[i * size : (i + 1) * size]) for i, g in enumerate(blocks)]
        assert moving.copy_many(pairs, engine=engine).method == "pack"
        largest = max(largest, count * size)
        if call == 149:
            after_first_half = moving.pinned_bytes()
    # in steps (a power of two): reached in the first half, flat in the second
    assert moving.pinned_bytes() == staging_bytes(largest) == after_first_half >= largest
    moving.release()
    assert moving.pinned_bytes() == 0


def test_a_tuple_subclass_that_is_no_namedtuple_is_made_from_its_values():
    class Shape(tuple):
        pass

    a, b = np.zeros(2), np.ones(3)
    new = flatten(Shape((a, 3)), _is_array).rebuild(["A"])
    assert type(new) is Shape and new == ("A", 3)
    one = flatten(Shape((a,)), _is_array).rebuild([b])  # not Shape(b), which iterates b
    assert type(one) is Shape and len(one) == 1 and one[0] is b


def test_a_structure_taken_apart_leaves_no_cycle_behind():
    """Its leaves are freed when the last reference goes, with the cyclic collector off: a GPU
    tensor kept in a cycle would be collected in a forked DataLoader worker, which aborts."""
    import gc
    import weakref

    class Leaf:
        pass

    leaves = [Leaf() for _ in range(4)]
    refs = [weakref.ref(x) for x in leaves]
    was = gc.isenabled()
    gc.disable()
    try:
        flat = flatten({"a": [leaves[0], (leaves[1], 5)], "b": {"c": leaves[2]}, "d": leaves[3]},
                       lambda x: isinstance(x, Leaf))  # fmt: skip
        built = flat.rebuild(list(flat.leaves))
        assert built["b"]["c"] is leaves[2]
        del flat, built, leaves
        assert all(r() is None for r in refs)
    finally:
        if was:
            gc.enable()


def test_each_leaf_meets_the_leaves_in_flattens_order():
    """Every kind of structure, nested; a leaf met twice is given twice (flatten keeps one)."""
    import dataclasses as dc

    @dc.dataclass
    class Batch:
        x: Any
        y: Any = dc.field(default=None, init=False)  # not the constructor's: not walked

    Pair = namedtuple("Pair", "a b")
    a, b, c, d = (np.arange(i + 1) for i in range(4))
    obj = OrderedDict(p=Pair(a, [b, (c, "label", 3)]), q=Batch({"d": d, "a": a}))
    found = list(each_leaf(obj, _is_array))
    assert [len(x) for x in found] == [1, 2, 3, 4, 1]
    assert [id(x) for x in found[:4]] == [id(x) for x in flatten(obj, _is_array).leaves]
    deep: list[Any] = []
    deep.append(deep)  # contains itself
    with pytest.raises(StructureError, match="contains itself"):
        list(each_leaf(deep, _is_array))


def test_a_non_blocking_move_queues_on_the_callers_stream_and_holds_its_sources(
    monkeypatch, engine
):
    """non_blocking=True: nothing synchronized, every pair queued on the stream given (or the
    current one: CUDA's default where no framework is imported), and the sources held until
    that stream has run them; `stream` without non_blocking is one clear error."""
    synchronized: list[set[int]] = []
    monkeypatch.setattr(moves, "FRAMEWORKS", (_framework(synchronized),))
    queued: list[tuple[int, int, int]] = []
    real = moving.copy_pairs

    def counted(pairs: list, device: int, method: Any, engine: Any, stream: int) -> Any:
        queued.append((len(pairs), device, stream))
        return real(pairs, device, method, engine, stream)

    held: list[tuple[int, int, int]] = []
    monkeypatch.setattr(moving, "copy_pairs", counted)
    monkeypatch.setattr(moving, "hold", lambda pairs, on, gpu: held.append((len(pairs), on, gpu)))
    monkeypatch.delitem(__import__("sys").modules, "torch", raising=False)
    monkeypatch.delitem(__import__("sys").modules, "cupy", raising=False)
    state = {"w": np.random.default_rng(1).random(100), "b": np.ones(10)}
    moved = moving.to_device(state, "cuda:1", non_blocking=True, stream=0x77, engine=engine)
    assert isinstance(moved["w"], FakeGpuArray) and synchronized == []
    assert queued == [(2, 1, 0x77)] and held == [(2, 0x77, 1)]
    moving.to_device(state, 0, non_blocking=True, engine=engine)
    assert queued[-1] == (2, 0, 0) and held[-1] == (2, 0, 0)  # CUDA's default stream
    with pytest.raises(ValueError, match=r"^stream: .*non_blocking=True"):
        moving.to_device(state, 0, stream=0x77, engine=engine)
    assert len(queued) == 2
