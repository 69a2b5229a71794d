"""The copy API's first calls (transfer/first.py, plain.py, setting_up.py) without a GPU: PyTorch
pairs go PyTorch's way while xferscope sets up on another thread, once; every other call, and
every call once set up, goes xferscope's way; the model that picks a first call's way. A stand-in
`torch` module is put in sys.modules (CI has no PyTorch); tests/gpu/test_moving_gpu.py runs the
real one. The simulated copier's staged batches going by the loop while its staged copy is made
are here too."""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
import pytest

import xferscope
from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.core.engine.simulated_batch import STAGED_MAKE_S
from xferscope.transfer import engine as engines
from xferscope.transfer import first, plain, setting_up
from xferscope.transfer.choice import MADE_BY_LOOP
from xferscope.transfer.copy import copies_of, copy_many


class Device:
    def __init__(self, kind: str, index: int | None):
        self.type, self.index = kind, index


class Tensor:
    """A stand-in PyTorch tensor: a NumPy array of bytes on the host or on GPU `gpu`."""

    copies: ClassVar[list[tuple[Tensor, Tensor, bool]]] = []

    def __init__(self, data: np.ndarray, gpu: int | None = None, pinned: bool = False):
        self.data, self.gpu, self.pinned = data, gpu, pinned

    is_cuda = property(lambda self: self.gpu is not None)
    nbytes = property(lambda self: self.data.nbytes)
    shape = property(lambda self: self.data.shape)
    dtype = property(lambda self: self.data.dtype)

    def numel(self) -> int:
        return int(self.data.size)

    device = property(
        lambda self: Device("cuda", self.gpu) if self.is_cuda else Device("cpu", None)
    )

    def is_contiguous(self) -> bool:
        return bool(self.data.flags.c_contiguous)

    def is_pinned(self) -> bool:
        return self.pinned

    def detach(self) -> Tensor:
        return self

    def reshape(self, *shape: int) -> Tensor:
        return Tensor(self.data.reshape(*shape), self.gpu, self.pinned)

    def view(self, dtype: Any) -> Tensor:
        return Tensor(self.data.view(np.uint8), self.gpu, self.pinned)

    def copy_(self, src: Tensor, non_blocking: bool = False) -> Tensor:
        self.data[...] = src.data
        Tensor.copies.append((self, src, non_blocking))
        return self


@pytest.fixture
def torch(monkeypatch) -> types.SimpleNamespace:
    """The stand-in torch module; each GPU's current stream counts its synchronizes."""
    synced: list[int] = []
    stream = lambda gpu: types.SimpleNamespace(synchronize=lambda: synced.append(gpu))  # noqa: E731
    fake = types.SimpleNamespace(
        Tensor=Tensor, uint8=np.uint8, synced=synced, device=lambda kind, i: f"{kind}:{i}",
        cuda=types.SimpleNamespace(current_stream=stream, current_device=lambda: 0),
    )  # fmt: skip
    monkeypatch.setitem(sys.modules, "torch", fake)
    Tensor.copies = []
    return fake


@pytest.fixture
def fresh(monkeypatch) -> Iterator[list[int]]:
    """A process where nothing is set up; the setting up (on its thread) only noted, by GPU."""
    began: list[int] = []
    monkeypatch.setattr(setting_up, "_switch", [])
    was = sys.getswitchinterval()
    monkeypatch.setattr(setting_up, "_real", {})
    monkeypatch.setattr(setting_up, "_setting_up", [])
    monkeypatch.setattr(plain, "_calls", [])
    monkeypatch.setattr(setting_up, "_set_up", lambda gpu: began.append(gpu))
    monkeypatch.setattr(engines, "_engine", [])
    yield began
    sys.setswitchinterval(was)


def _pair(nbytes: int, gpu: int = 0, up: bool = True, pinned: bool = False) -> tuple:
    host = Tensor(np.random.default_rng(nbytes).integers(0, 256, nbytes, np.uint8), None, pinned)
    dev = Tensor(np.zeros(nbytes, np.uint8), gpu)
    return (dev, host) if up else (host, dev)


def _join() -> None:
    for thread in setting_up._setting_up:
        thread.join()


def test_first_pytorch_copies_go_pytorchs_way_and_the_second_sets_up_on_a_thread(torch, fresh):
    dst, src = _pair(1 << 20, gpu=1)
    choice = first.copy_many([(dst, src)])
    got = (choice.method, choice.source, choice.direction, choice.memory, choice.device)
    assert got == ("loop", "first call", "h2d", "pageable", 1) and choice.bytes == 1 << 20
    assert np.array_equal(dst.data, src.data)
    assert Tensor.copies[0][2] is False and torch.synced == []  # PyTorch's blocking copy alone
    assert not setting_up._setting_up  # the first call is PyTorch's copy and nothing else
    two = [_pair(4096, gpu=1), _pair(64, gpu=1)]
    assert first.copy_many(two).count == 2 and torch.synced == [1]  # non_blocking, then synced
    back, there = _pair(4096, gpu=1, up=False)
    first.copy_to_host(back, there, device=1)
    assert np.array_equal(back.data, there.data) and np.array_equal(two[1][0].data, two[1][1].data)
    _join()
    assert fresh == [1] and len(setting_up._setting_up) == 1  # one setting up, begun by the second
    assert (
        setting_up._setting_up[0].name == "xferscope-set-up"
        and not setting_up._setting_up[0].daemon
    )


def test_once_set_up_every_call_goes_xferscopes_way(torch, fresh, monkeypatch):
    called: list[str] = []
    monkeypatch.setitem(setting_up._real, "copy_many", lambda *a, **k: called.append("copy_many"))
    monkeypatch.setitem(setting_up._real, "copy_pairs", lambda *a: called.append("copy_pairs"))
    monkeypatch.setitem(setting_up._real, "copy_to_device", lambda *a: called.append("to_device"))
    first.copy_many([_pair(64)])  # pairs alone: straight to copy_pairs
    first.copy_many([_pair(64)], method="loop")
    first.copy_to_device(*_pair(64))
    assert called == ["copy_pairs", "copy_many", "to_device"]
    assert not Tensor.copies and fresh == []


@pytest.mark.parametrize(
    "case",
    ["numpy source", "two GPUs", "mixed ways", "method asked", "engine given", "nbytes given",
     "wrong way", "other GPU", "simulated engine", "empty piece", "sizes differ", "no torch",
     "an iterator"],
)  # fmt: skip
def test_every_other_first_call_goes_xferscopes_way(case, torch, fresh, monkeypatch):
    called: list[tuple] = []

    def real(name: str) -> Any:
        return lambda *a, **k: called.append((name, a, k))

    monkeypatch.setattr(setting_up, "api", real)
    dst, src = _pair(4096)
    pairs: list = [(dst, src)]
    options: dict[str, Any] = {}
    if case == "numpy source":
        pairs = [(dst, src.data)]
    elif case == "two GPUs":
        pairs = [(dst, src), _pair(4096, gpu=1)]
    elif case == "mixed ways":
        pairs = [(dst, src), _pair(4096, up=False)]
    elif case == "method asked":
        options = {"method": "loop"}
    elif case == "engine given":
        options = {"engine": SimulatedEngine()}
    elif case == "simulated engine":
        monkeypatch.setattr(engines, "_engine", [SimulatedEngine()])
    elif case == "empty piece":
        pairs = [_pair(0)]
    elif case == "sizes differ":
        pairs = [(dst, Tensor(np.zeros(64, np.uint8)))]
    elif case == "no torch":
        monkeypatch.delitem(sys.modules, "torch")
    elif case == "an iterator":
        pairs = iter([(dst, src)])  # type: ignore[assignment]
    if case == "nbytes given":
        first.copy_to_device(dst, src, 64)
    elif case == "wrong way":
        first.copy_to_host(dst, src)  # a destination on the GPU: copy_to_host refuses it
    elif case == "other GPU":
        first.copy_to_device(dst, src, device=1)
    else:
        first.copy_many(pairs, **options)
    assert len(called) == 1 and not Tensor.copies and fresh == []
    if case == "an iterator":
        assert list(called[0][1][0]) == [(dst, src)]  # handed on whole


def test_a_first_call_goes_xferscopes_way_where_that_ends_first_with_the_setting_up():
    assert plain.plain_first(1, 1 << 20, 0)  # one batch of 1 MB
    assert plain.plain_first(1, 1 << 30, 0)  # one pageable GiB: the setting up costs more
    assert plain.plain_first(292, 710_000_000, 0)  # a transformer's state dict
    assert not plain.plain_first(18_867, 930_000_000, 0)  # an MoE's: 18,867 pieces
    assert not plain.plain_first(18_867, 0, 930_000_000)


def test_a_structures_first_move_goes_pytorchs_way(torch, fresh, monkeypatch):
    made: list[Tensor] = []

    def empty(shape: Any, dtype: Any, device: str, pin_memory: bool = False) -> Tensor:
        made.append(Tensor(np.zeros(shape, np.uint8), int(device.split(":")[1])))
        return made[-1]

    torch.empty = empty
    src = _pair(256)[1]
    moved = first.to_device({"w": src, "tied": src, "n": 3}, "cuda:0")
    assert moved["w"] is moved["tied"] is made[0] and moved["n"] == 3
    assert np.array_equal(made[0].data, src.data) and len(Tensor.copies) == 1


def test_the_package_gives_the_first_calls_until_set_up_then_the_apis_own(monkeypatch):
    monkeypatch.setattr(setting_up, "_real", {})
    monkeypatch.delitem(vars(xferscope), "copy_many", raising=False)
    assert xferscope.copy_many is first.copy_many and "copy_many" not in vars(xferscope)
    setting_up._import_api()
    assert xferscope.copy_many is copy_many and vars(xferscope)["copy_many"] is copy_many
    monkeypatch.delitem(vars(xferscope), "copy_many")


def test_a_call_meeting_the_setting_up_waits_for_it_not_sets_up_twice(monkeypatch):
    monkeypatch.setattr(setting_up, "_real", {})
    gate = threading.Event()
    thread = threading.Thread(target=lambda: (gate.wait(5), setting_up._import_api()))
    monkeypatch.setattr(setting_up, "_setting_up", [thread])
    thread.start()
    gate.set()
    assert setting_up.api("copy_many") is copy_many and not thread.is_alive()


def test_a_staged_batch_goes_by_the_loop_while_the_staged_copy_is_made():
    """The simulated copier as the native one: the first staged batch begins making the staged
    copy and goes by the loop, saying why; once made (STAGED_MAKE_S on), batches go staged."""
    engine = SimulatedEngine()
    engine.register_memory(1 << 45, 1 << 40, "device", 0)
    host = np.random.default_rng(0).integers(0, 256, 64 << 20, np.uint8)
    pair = [(1 << 45, host.ctypes.data, host.nbytes)]
    made = copy_many(pair, engine=engine)
    assert (made.method, made.reason) == ("loop", MADE_BY_LOOP)
    copier = copies_of(engine).copier(0)
    assert not copier.staged_prepared
    engine.advance(STAGED_MAKE_S)
    assert copy_many(pair, engine=engine).method == "staged" and copier.staged_prepared


def test_the_setting_up_switches_threads_often_and_gives_the_interval_back(monkeypatch):
    """While the set-up thread imports, the program's thread waits at most SWITCH_S for the GIL
    after a copy; the interval is the program's again once set up."""
    from xferscope.transfer import moving

    seen: list[float] = []
    monkeypatch.setattr(moving, "warmup", lambda device: seen.append(sys.getswitchinterval()))
    for name in ("_real", "_setting_up", "_switch"):
        monkeypatch.setattr(setting_up, name, {} if name == "_real" else [])
    was = sys.getswitchinterval()
    setting_up._begin_set_up(0)
    _join()
    assert (
        seen == [setting_up.SWITCH_S] < [was]
        and sys.getswitchinterval() == was
        and setting_up.ready()
    )
