"""`xferscope gemm`'s tuning and warm-up: a tuning kept between runs (and what is never read
back), the warm-up a tuning stands for, and a GEMM whose rate never holds."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from xferscope.core import cache
from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.gemm import measure as gm
from xferscope.gemm import records as gr
from xferscope.gemm.shapes import Shape, parse_sizes


def test_a_tuning_is_kept_for_the_next_run_and_says_so(tmp_path, monkeypatch):
    """run's check takes the rank an earlier tuning of the same GEMM chose (tuning.py), timing
    no other; a rank kept in the file is what the engine is asked for; a file that does not
    parse is replaced; one that cannot be written costs nothing."""
    from xferscope.gemm import check, tuning

    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(
        tuning, "key", lambda engine, device, version, gemm: "|".join(map(str, gemm))
    )
    monkeypatch.setattr(SimulatedEngine, "blas_version", lambda self: 1)
    monkeypatch.setattr(SimulatedEngine, "simulated", False, raising=False)
    options = gr.GemmOptions(precisions=("bf16",), shapes=parse_sizes("--sizes", "1024"), tune=8)
    kept = replace(options, reuse_tuning=True)
    first = gm.measure(SimulatedEngine(), kept).points[0]
    assert first.algorithm["candidates"] == 8 and "reused" not in first.algorithm
    (entry,) = json.loads((tmp_path / "cache" / tuning.FILE).read_text()).values()
    assert entry == {"rank": 0, "candidates": 8}
    again = gm.measure(SimulatedEngine(), kept).points[0]
    assert again.algorithm["candidates"] == 0 and again.algorithm["reused"] is True
    path = tmp_path / "cache" / tuning.FILE
    data = json.loads(path.read_text())
    data[next(iter(data))]["rank"] = 3
    path.write_text(json.dumps(data))
    assert gm.measure(SimulatedEngine(), kept).points[0].algorithm["rank"] == 3
    # the gemm command (no reuse) tunes every time
    assert gm.measure(SimulatedEngine(), options).points[0].algorithm["candidates"] == 8
    path.write_text("{not json")
    assert gm.measure(SimulatedEngine(), kept).points[0].algorithm["candidates"] == 8
    assert json.loads(path.read_text())  # replaced
    monkeypatch.setenv(cache.CACHE_ENV, str(path / "below-a-file"))
    assert gm.measure(SimulatedEngine(), kept).points[0].status == "complete"
    assert check.gemm_check  # the check asks for it
    assert "reuse_tuning=True" in Path(check.__file__).read_text()


def test_nothing_is_kept_for_the_simulated_engine_or_without_a_driver(tmp_path, monkeypatch):
    from xferscope.gemm import tuning

    engine = SimulatedEngine()
    assert tuning.key(engine, 0, 1, ("fp32", 8, 8, 8, False, False, 8)) is None
    monkeypatch.setattr(SimulatedEngine, "simulated", False, raising=False)
    monkeypatch.setattr(tuning.nvml, "driver_version", lambda: None)
    assert tuning.key(engine, 0, 1, ("fp32", 8, 8, 8, False, False, 8)) is None
    monkeypatch.setattr(tuning.nvml, "driver_version", lambda: "580.1")
    assert tuning.key(engine, 0, 1, ("fp32", 8, 8, 8, False, False, 8)).startswith("GPU-")
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    tuning.remember(None, 1, 8)
    assert not (tmp_path / tuning.FILE).exists() and tuning.known(None) is None


@pytest.mark.parametrize("kept", [-1, 1 << 40, 64, "3", None, True, 2.5, [1], {"rank": 1}])
def test_a_kept_rank_out_of_range_or_of_another_type_is_nothing_kept(tmp_path, monkeypatch, kept):
    from xferscope.gemm import tuning

    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    (tmp_path / tuning.FILE).write_text(json.dumps({"k": {"rank": kept, "candidates": 8}}))
    assert tuning.known("k") is None
    (tmp_path / tuning.FILE).write_text(json.dumps({"k": {"rank": 3, "candidates": 8}}))
    assert tuning.known("k") == 3


def test_a_cache_path_that_is_no_regular_file_is_never_read_or_replaced(tmp_path, monkeypatch):
    """A FIFO, a directory or a dangling symlink where the file goes: nothing kept, nothing
    hangs, nothing replaced; the GEMM is tuned."""
    import os

    from xferscope.gemm import tuning

    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    path = tmp_path / tuning.FILE
    os.mkfifo(path)
    assert tuning.known("k") is None  # would block on a FIFO's read
    tuning.remember("k", 1, 8)
    assert path.is_fifo()
    path.unlink()
    path.mkdir()
    assert tuning.known("k") is None
    tuning.remember("k", 1, 8)
    assert path.is_dir()
    path.rmdir()
    path.symlink_to(tmp_path / "elsewhere.json")  # dangling: written through, as files are
    tuning.remember("k", 2, 8)
    assert tuning.known("k") == 2
    monkeypatch.setenv(cache.CACHE_ENV, str(path / "below-a-file"))
    assert tuning.known("k") is None
    tuning.remember("k", 1, 8)  # costs nothing


def test_a_tuning_longer_than_the_warm_up_stands_for_it_and_the_point_says_so():
    """The trials skip the warm-up only where the tuning just ran the GEMM on the GPU for at
    least as long; each point records the warm-up it had."""
    assert gm.warm_up(0.05, {"tuned_s": 0.08}) == 0.0
    assert gm.warm_up(0.05, {"tuned_s": 0.02}) == 0.05
    assert gm.warm_up(0.05, {}) == 0.05
    engine = SimulatedEngine(seed=1)
    shapes = (Shape(4096, 4096, 4096),)
    for tune, warmed in ((8, 0.0), (0, 0.05)):
        options = gr.GemmOptions(
            precisions=("fp32",), shapes=shapes, tune=tune, warmup_s=0.05, cpu_threads=(),
            heat_s=0.0,
        )  # fmt: skip
        (point,) = gm.measure(engine, options).points
        assert point.status == "complete", (tune, point)
        if warmed:  # at least the warm-up asked for, on until the rate held
            assert point.warmup_s is not None and point.warmup_s >= warmed and point.settled
        else:
            assert point.warmup_s == 0.0 and point.settled is None, point
        assert (point.algorithm or {}).get("tuned_s", 0.0) >= (0.05 if tune else 0.0)


def test_a_gemm_whose_rate_never_holds_is_said():
    """A warm-up that ends at its limit with the rate still moving (the GPU's clocks): the point
    says so, and so does a warning naming the GEMM and its spread."""
    from xferscope.gemm.findings import findings

    options = gr.GemmOptions(
        precisions=("bf16",), shapes=(Shape(4096, 4096, 4096),), warmup_s=0.05, settle_s=0.2,
        target_s=0.02,
        heat_s=0.0, tune=0, cpu_threads=(),
    )  # fmt: skip
    (steady,) = gm.measure(SimulatedEngine(seed=1, noise=0.0), options).points
    assert steady.settled is True and 0.05 <= (steady.warmup_s or 0) < 0.2

    class Slowing(SimulatedEngine):
        """Its GEMMs slow by 2% a call without end: a GPU whose clocks keep falling."""

        def gemm(self, *args, **kwargs):
            g = super().gemm(*args, **kwargs)
            made = g.time
            calls = [0]

            def time(n):
                calls[0] += 1
                return made(n) * 1.02 ** calls[0]

            g.time = time
            return g

    result = gm.measure(Slowing(seed=1, noise=0.0), options)
    (moving,) = result.points
    assert moving.settled is False and (moving.warmup_s or 0) >= 0.2
    (said,) = [f for f in findings(result) if f.code == "gemm_unsettled"]
    assert "bf16 4096" in said.message and said.fix
