"""Shared fixtures. GPU tests ask for `native_engine` and skip cleanly where there is no GPU.

Every test sees the same fictional host (FIXED_HOST), whatever machine runs it: no expectation
may depend on the CPU vendor, core count, host name or the CPUs this process may use. GPU tests
read the real host, since they measure it.
"""

from __future__ import annotations

import pytest

from xferscope.core import host
from xferscope.core.engine.simulated import SimulatedEngine

FIXED_HOST = {
    "hostname": "test-host",
    "cpu": "Intel(R) Xeon(R) Test CPU @ 2.10GHz",
    "cores": 12,
    "numa_nodes": 2,
    "os": "Linux 6.1.0-test",
    "python": "3.12.0",
    "process_cpus": "0-5,12-17",
    "numa_cpus": ["0-5,12-17", "6-11,18-23"],  # two sockets: the GPUs are on node 0
    "huge_pages": {"thp": "madvise", "hugetlb_page_bytes": 2 << 20, "hugetlb_free_bytes": 0},
}


_REAL_HOST_FACTS = host.host_facts


@pytest.fixture(scope="session", autouse=True)
def drawn_in_process():
    """Commands draw in their own process, whatever cores this machine has (report/drawing.py):
    the drawing workers are tested where a test asks for them."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XFERSCOPE_DRAWERS", "0")
        yield


@pytest.fixture(scope="session", autouse=True)
def fixed_host():
    """Session-wide, so module-scoped fixtures that build results see it too."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(host, "host_facts", lambda: dict(FIXED_HOST))
        yield


@pytest.fixture(autouse=True)
def real_host_for_gpu_tests(request, monkeypatch):
    if request.node.get_closest_marker("gpu") is not None:
        monkeypatch.setattr(host, "host_facts", _REAL_HOST_FACTS)


@pytest.fixture(autouse=True)
def own_places(request, tmp_path_factory, monkeypatch):
    """Every test runs in a directory of its own, with its own history, calibration and cache,
    so the suite leaves nothing in the checkout (xferscope-results/) or the user's data. A
    test's own fixture may set them again; GPU tests keep the machine's."""
    if request.node.get_closest_marker("gpu") is not None:
        return
    place = tmp_path_factory.mktemp("place")
    monkeypatch.chdir(place)
    monkeypatch.setenv("XFERSCOPE_HISTORY", str(place / "history.sqlite3"))
    monkeypatch.setenv("XFERSCOPE_CALIBRATION", str(place / "calibration"))
    monkeypatch.setenv("XFERSCOPE_CACHE", str(place / "cache"))


@pytest.fixture
def mpi4py_without_library(monkeypatch):
    """mpi4py 4 installed where no libmpi is: importing its MPI raises RuntimeError. (MPI can
    be opened once per process, so in-process tests of `fleet` stop there too.)"""
    import sys
    import types

    package = types.ModuleType("mpi4py")

    def missing(name: str) -> object:
        raise RuntimeError("cannot load MPI library")

    package.__getattr__ = missing  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "mpi4py", package)
    monkeypatch.delitem(sys.modules, "mpi4py.MPI", raising=False)


@pytest.fixture
def sim() -> SimulatedEngine:
    return SimulatedEngine(seed=7)


@pytest.fixture(scope="session")
def native_engine():
    from xferscope.core.engine import NativeEngine
    from xferscope.core.errors import NoDeviceError

    try:
        engine = NativeEngine()
        engine.device_count()
    except NoDeviceError as exc:
        pytest.skip(f"no GPU: {exc}")
    return engine


@pytest.fixture(autouse=True)
def fresh_interrupt_state():
    """A stop requested in one test (the simulated engine's interrupt_after) is not the next's."""
    from xferscope.core import interrupt

    interrupt.reset()
    yield
    interrupt.reset()
