"""copy_many's one path, whatever the engine: xferscope._engine.Copies reads the batch, keeps
the decisions (the one cache) and copies through the engine's copier. The native engine differs
only in two places the simulated engine stands in for: the driver tells each pointer's memory
(here the engine's classify_pointers, which the same reader calls), and its copier is compiled
(`native`: copied without Python; here copy_resolved). So the path users hit on a GPU runs here
through the same native code: reading, rules, the decision cache and the copier's lifetime."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from xferscope import copy_many
from xferscope.core.compiled import engine_module
from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.transfer import copy as route
from xferscope.transfer.buffers import read_pair
from xferscope.transfer.policy import POINTER_KINDS, Choice, CopyRefused, Shape

GPU_BASE = 0x7F00_0000_0000
_e = engine_module()


class GpuArray:
    def __init__(self, address: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {"data": (address, False), "shape": (nbytes,),
                                         "typestr": "|u1", "version": 3}  # fmt: skip


class Copier:
    """An engine's copier as Copies sees it: not compiled, so copied through copy_resolved."""

    native = None

    def __init__(self) -> None:
        self.closed = False
        self.copied: list[tuple[str, int, bool]] = []

    def copy_resolved(self, method: str, batch: Any) -> None:
        self.copied.append((method, int(batch.count), bool(batch.upload)))


def _copies(look_again_s: float) -> tuple[Any, list[tuple], list[Copier], SimulatedEngine]:
    engine = SimulatedEngine()
    engine.register_memory(GPU_BASE, 1 << 30, "device", 0)
    decided: list[tuple] = []
    copiers: list[Copier] = []

    def decide(direction: str, memory: str, count: int, total: int, device: int, asked: Any):
        decided.append((direction, memory, count, total, device, asked))
        return Choice(asked or "loop", direction, memory, count, total, device, "rule", "test")

    def copier_of(device: int) -> Copier:
        copiers.append(Copier())
        return copiers[-1]

    copies = _e.Copies(engine.classify_pointers, decide, copier_of, read_pair, look_again_s)
    return copies, decided, copiers, engine


def test_a_decision_is_made_once_per_shape_and_kept_until_looked_at_again():
    copies, decided, copiers, _ = _copies(look_again_s=3600.0)
    host = np.random.default_rng(3).integers(1, 255, 4096, dtype=np.uint8)
    pairs = [(GpuArray(GPU_BASE + i * 64, 64), host[i * 64 : (i + 1) * 64]) for i in range(4)]
    for _ in range(3):
        assert copies.copy_pairs(pairs, -1, None).method == "loop"
    assert decided == [("h2d", "pageable", 4, 256, 0, None)]
    copies.copy_pairs(pairs[:2], -1, None)  # another shape: decided anew
    copies.copy_pairs(pairs, -1, "pack")  # a method asked for: its own decision
    copies.copy_pairs(pairs, -1, "pack")
    assert len(decided) == 3 and decided[-1][-1] == "pack"
    assert (
        copiers[0].copied == [("loop", 4, True)] * 3 + [("loop", 2, True)] + [("pack", 4, True)] * 2
    )
    _e.forget_decisions()  # as storing a calibration does
    copies.copy_pairs(pairs, -1, None)
    assert len(decided) == 4


def test_decisions_are_made_again_once_their_time_is_up_and_a_closed_copier_is_replaced():
    copies, decided, copiers, _ = _copies(look_again_s=0.0)
    host = np.random.default_rng(4).integers(1, 255, 128, dtype=np.uint8)
    pairs = [(GpuArray(GPU_BASE, 128), host)]
    copies.copy_pairs(pairs, -1, None)
    copies.copy_pairs(pairs, -1, None)
    assert len(decided) == 2  # look_again_s 0: every call asks the policy
    copiers[0].closed = True  # as the engine closes its handles at a command's end
    copies.copy_pairs(pairs, -1, None)
    assert len(copiers) == 2 and copiers[1].copied == [("loop", 1, True)]
    assert copies.copier(0) is copiers[1]


def test_rules_are_refused_before_anything_is_decided_or_copied():
    copies, decided, copiers, _ = _copies(look_again_s=3600.0)
    host = np.random.default_rng(5).integers(1, 255, 128, dtype=np.uint8)
    with pytest.raises(
        CopyRefused, match="copy_to_device copies host to GPU, and these buffers go"
    ):
        copies.copy_pairs([(host, GpuArray(GPU_BASE, 128))], -1, None, 1)
    with pytest.raises(CopyRefused, match=r"both ends are GPU memory \(device and device\)"):
        copies.copy_pairs([(GpuArray(GPU_BASE, 64), GpuArray(GPU_BASE + 64, 64))], -1, None)
    with pytest.raises(CopyRefused, match="sizes holds 0"):
        copies.copy_addresses(np.array([GPU_BASE], np.uint64), np.array([1 << 20], np.uint64),
                              np.array([0], np.uint64), -1, None)  # fmt: skip
    assert decided == [] and copiers == []
    assert issubclass(CopyRefused, ValueError) and POINTER_KINDS[:2] == ("pageable", "pinned")


def test_decide_answers_from_the_same_cache_copy_many_fills(monkeypatch):
    engine = SimulatedEngine()
    engine.register_memory(GPU_BASE, 1 << 30, "device", 0)
    made: list[Shape] = []
    choose = route.choose

    def counting(engine: Any, shape: Shape, asked: Any) -> Choice:
        made.append(shape)
        return choose(engine, shape, asked)

    monkeypatch.setattr(route, "choose", counting)
    host = np.random.default_rng(6).integers(1, 255, 1024, dtype=np.uint8)
    pairs = [(GpuArray(GPU_BASE + i * 256, 256), host[i * 256 : (i + 1) * 256]) for i in range(4)]
    done = copy_many(pairs, engine=engine)
    shape = Shape("h2d", "pageable", 4, 1024, 0)
    assert route.decide(shape, engine=engine) == done and made == [shape]
    assert route.decide(Shape("d2h", "pageable", 4, 1024, 0), engine=engine).direction == "d2h"
    assert len(made) == 2


def test_a_batch_read_while_another_is_being_read_keeps_both_apart():
    """Each thread reads its batches into memory kept between calls; a copy made from Python
    code that reading one ran (here an object's __cuda_array_interface__) reads into its own,
    and both batches come out whole: their counts, bytes and every address."""
    copies, decided, _, _ = _copies(look_again_s=3600.0)
    host = np.random.default_rng(7).integers(1, 255, 4096, dtype=np.uint8)
    inner = [(GpuArray(GPU_BASE + (1 << 20) + i * 64, 64), host[i * 64 : (i + 1) * 64])
             for i in range(3)]  # fmt: skip
    seen: list[Any] = []

    class Reentrant:
        @property
        def __cuda_array_interface__(self) -> dict:
            seen.append(copies.copy_pairs(inner, -1, None))
            return {"data": (GPU_BASE + 4096, False), "shape": (512,), "typestr": "|u1",
                    "version": 3}  # fmt: skip

    outer = [(GpuArray(GPU_BASE, 256), host[:256]), (Reentrant(), host[256:768])]
    done = copies.copy_pairs(outer, -1, None)
    assert (done.count, done.bytes) == (2, 768) and (seen[0].count, seen[0].bytes) == (3, 192)
    assert [d[2:4] for d in decided] == [(3, 192), (2, 768)]
    read = _e.resolve_pairs(outer, -1, _copies(3600.0)[3].classify_pointers, read_pair)
    assert list(read.destinations) == [GPU_BASE, GPU_BASE + 4096] and list(read.sizes) == [256, 512]
