"""The simulated engine's batch of copies: the engine's own refusals (batch_refusal, with the
model's driver and no GPU access to pageable memory), and a model of an H200 as measured there:
a cudaMemcpyAsync costs about 2.3 us of issue, cudaMemcpyBatchAsync about 0.7 us a copy, the SM
copy kernel about 80 us for a launch over the pointer list plus its bytes at 20 GB/s (1.2 TB/s
within the GPU, as d2d copies run), packing
about 10 GB/s of CPU memcpy plus one copy and a kernel, the staged method the staged copy's
model (its threads' rate and hand-over) plus a kernel; pinned copies at 55 GB/s, pageable at
10 (up) and 5 (down)."""

from __future__ import annotations

from typing import Any

from ..compiled import engine_module
from ..errors import EngineError
from .simulated_link import SimulatedHost, staged_model

_e = engine_module()
PINNED_BPS = 55e9
PAGEABLE_BPS = {"h2d": 10e9, "d2h": 5e9}
DEVICE_BPS = 1.2e12  # a copy within the GPU's memory (it reads and writes HBM)
ISSUE_S = {
    "loop": 2.3e-6,
    "graph": 2.25e-6,
    "batch-stream": 0.7e-6,
    "batch-any": 0.7e-6,
    "batch-call": 1.1e-6,
}
KERNEL_LAUNCH_S = 8e-5
KERNEL_BPS = 20e9
PACK_BPS = 10e9
SCATTER_S = 1e-5  # the staged method's kernel that scatters (or gathers) on the GPU
# making the staged copy's threads, memcpy probe and pinned chunks: 70-120 ms on H100 hosts
STAGED_MAKE_S = 0.1
# copy_many's own work on top of a method: each pointer's kind looked up, a table uploaded for
# the kernels, and the wait for the batch
CLASSIFY_S = 0.1e-6
TABLE_UPLOAD_S = 3e-6
WAIT_S = 5e-6


class SimulatedBatch:
    def __init__(self, engine: SimulatedHost, spec: dict[str, Any]) -> None:
        self._engine = engine
        self.spec = spec
        self.bytes = sum(spec["sizes"])

    def _seconds(self, method: str) -> float:
        s = self.spec
        sizes: list[int] = list(s["sizes"])
        n = len(sizes)
        total = float(self.bytes)
        if s["direction"] == "d2d":
            bps = DEVICE_BPS
        else:
            bps = PINNED_BPS if s["memory"] == "pinned" else PAGEABLE_BPS[s["direction"]]
        if method in ISSUE_S:
            per = ISSUE_S[method] + (2e-6 if s["memory"] == "pageable" else 0.0)
            return sum(max(per, b / bps + 1e-6) for b in sizes) + (
                8e-6 if method.startswith("batch") else 0
            )
        if method == "pack":
            return total / PACK_BPS + total / PINNED_BPS + 1.5e-5 + 0.05e-6 * n
        if method == "staged":
            return staged_model(s["direction"], "api", 0).seconds(int(total)) + SCATTER_S
        if method == "kernel":
            return KERNEL_LAUNCH_S + total / (DEVICE_BPS if s["direction"] == "d2d" else KERNEL_BPS)
        raise EngineError(f"unknown batch method '{method}'")

    def _check(self, method: str, as_copy_many: bool = False) -> None:
        s = self.spec
        driver = self._engine.driver_version()
        reason = (
            _e.copy_many_refusal(s["direction"], s["memory"], s["sizes"], method, driver)
            if as_copy_many
            else _e.batch_refusal(s["direction"], s["memory"], s["sizes"], method, driver, False)
        )
        if reason:
            raise EngineError(reason)

    def time(self, method: str, iterations: int, as_copy_many: bool = False) -> tuple[float, float]:
        self._check(method, as_copy_many)
        noise = 1.0 + abs(float(self._engine.rng.normal(0.0, self._engine.noise)))
        seconds = self._seconds(method) * noise
        if as_copy_many:
            seconds += copy_many_overhead(method, len(self.spec["sizes"]))
        self._engine.advance(seconds * iterations)
        # copy_many and the methods on streams of their own are timed on the host (the engine's
        # rule)
        host_timed = as_copy_many or _e.batch_host_timed(method)
        return seconds, seconds if host_timed else seconds * 0.98

    def verify(self, method: str, as_copy_many: bool = False) -> int:
        self._check(method, as_copy_many)
        self._engine.advance(1e-4)
        return 1 if self._engine.corrupt else 0

    def close(self) -> None:
        pass


def copy_many_overhead(method: str, count: int) -> float:
    """copy_many's own seconds on top of `method` for `count` copies."""
    return (
        2 * count * CLASSIFY_S
        + WAIT_S
        + (TABLE_UPLOAD_S if method in ("pack", "staged", "kernel") else 0)
    )


class SimulatedManyCopier:
    """copy_many's copier: it moves no bytes, only advances the virtual clock by the model."""

    def __init__(self, engine: SimulatedHost, device: int) -> None:
        self._engine = engine
        self.device = device
        self.calls: list[tuple[str, bool, int, bool]] = []  # method, upload, count, pinned
        self.closed = False
        self.native = None  # copies through copy_resolved
        # as the native copier's: the staged copy's threads and chunks are made on another
        # thread from the first staged batch (the virtual time it began), ready STAGED_MAKE_S on
        self._staged_begun: float | None = None
        self._staging = 0  # bytes of pinned staging the native copier would hold

    @property
    def staged_prepared(self) -> bool:
        """Whether the staged copy's threads and chunks are made (its batches go staged)."""
        begun = self._staged_begun
        return begun is not None and self._engine.now() >= begun + STAGED_MAKE_S

    def pinned_bytes(self) -> int:
        """As the native copier's: its pack staging, grown to the largest packed batch."""
        return self._staging

    def prepare_staged(self) -> None:
        """As the native copier's: the staged copy's threads and chunks made, or waited for."""
        if self.closed:
            raise EngineError("this copier is closed")
        if self._staged_begun is None:
            self._staged_begun = self._engine.now()
        left = self._staged_begun + STAGED_MAKE_S - self._engine.now()
        if left > 0:
            self._engine.advance(left)

    def read_to_device(
        self,
        fd: int,
        device_destination: int,
        file_offsets: Any,
        sizes: Any,
        offsets: Any,
        readers: int = 0,
    ) -> None:
        """As the native copier's: the staged copy made or waited for, the file's ranges read
        by the native read loop (its errors) and kept nowhere, the clock advanced as for staging
        their bytes up."""
        self.prepare_staged()
        engine_module().read_ranges(fd, file_offsets, sizes)
        self._engine.advance(staged_model("h2d", "api", 0).seconds(int(sum(map(int, sizes)))))

    def _made_by(self, method: str) -> str:
        """As the native copier's: a staged batch goes by the loop while the staged copier is
        made, which the first one begins."""
        if method != "staged" or self.staged_prepared:
            return method
        if self._staged_begun is None:
            self._staged_begun = self._engine.now()
        return "loop"

    def _copy(
        self,
        method: str,
        upload: bool,
        destinations: Any,
        sources: Any,
        sizes: Any,
        pinned: bool,
        mapped: Any = None,
    ) -> str:
        if self.closed:
            raise EngineError("this copier is closed")
        sizes = [int(n) for n in sizes]
        if not sizes:
            return method
        method = self._made_by(method)
        memory = "pinned" if pinned else "pageable"
        direction = "h2d" if upload else "d2h"
        reason = _e.copy_many_refusal(
            direction, memory, sizes, method, self._engine.driver_version()
        )
        if reason:
            raise EngineError(reason)
        spec = {"direction": direction, "memory": memory, "sizes": sizes}
        seconds = SimulatedBatch(self._engine, spec)._seconds(method)
        self._engine.advance(seconds + copy_many_overhead(method, len(sizes)))
        self.calls.append((method, upload, len(sizes), pinned))
        if method == "pack":  # the native copier's pinned staging, grown in its steps
            self._staging = max(self._staging, int(_e.staging_bytes(sum(sizes))))
        return method

    def copy_resolved(self, method: str, batch: Any) -> str:
        """copy_many's copy of a read batch; the method that made it."""
        mapped = batch.mapped if batch.pinned else None
        return self._copy(method, batch.upload, batch.destinations, batch.sources, batch.sizes,
                          batch.pinned, mapped)  # fmt: skip

    def finish(self) -> None:
        """As the native copier's: every queued copy landed (here each landed as it was made)."""
        if self.closed:
            raise EngineError("this copier is closed")

    def close(self) -> None:
        self.closed = True
