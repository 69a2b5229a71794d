"""Shared fixtures. GPU tests ask for `native_engine` and skip cleanly where there is no GPU."""

from __future__ import annotations

import pytest

from xferscope.simulate import SimulatedEngine


@pytest.fixture
def sim() -> SimulatedEngine:
    return SimulatedEngine(seed=7)


@pytest.fixture(scope="session")
def native_engine():
    from xferscope.engine import NativeEngine
    from xferscope.errors import NoDeviceError

    try:
        engine = NativeEngine()
        engine.device_count()
    except NoDeviceError as exc:
        pytest.skip(f"no GPU: {exc}")
    return engine


@pytest.fixture(autouse=True)
def fresh_interrupt_state():
    """A stop requested in one test (the simulated engine's interrupt_after) is not the next's."""
    from xferscope import interrupt

    interrupt.reset()
    yield
    interrupt.reset()
