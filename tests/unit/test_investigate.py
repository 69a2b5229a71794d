"""`xferscope run`'s investigation on the simulated engine: what each GPU section and the
multi-GPU measurements hold, and what a failing GPU, Ctrl-C and corrupt copies leave behind."""

from __future__ import annotations

import itertools

import pytest

from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.core.findings import ERROR, WARNING
from xferscope.run import investigate
from xferscope.run.investigate import (
    NUMA_CURVES,
    RunOptions,
    gpu_curves,
    run_investigation,
    steps,
)
from xferscope.run.plans import DEFAULT_PLAN, QUICK_PLAN
from xferscope.run.records import Concurrent, PinningCost

CURVES = len(gpu_curves(0))  # per GPU

GIB = 1 << 30
MIB = 1 << 20

P2P_LABELS = {
    f"{a}-{b}/{way}"
    for a, b in ((0, 1), (1, 0))
    for way in ("async/peer/one_way", "kernel/peer/one_way", "async/nopeer/one_way")
} | {"0-1/async/peer/both"}
ALL_GPUS_LABELS = {"all_gpus/h2d", "all_gpus/d2h", "all_gpus/both"}


def quick(devices: int = 1) -> RunOptions:
    return RunOptions(devices=tuple(range(devices)), quick=True)


class CountingEngine(SimulatedEngine):
    """Counts the engine calls a run makes, so an interruption can be placed in a phase."""

    calls = 0

    def advance(self, seconds: float) -> None:
        self.calls += 1
        super().advance(seconds)


class Recorder:
    """A core.progress.Progress that remembers what it was told."""

    def __init__(self) -> None:
        self.begun: list[str] = []
        self.steps: list[str] = []

    def begin(self, label: str) -> None:
        self.begun.append(label)

    def step(self, label: str) -> None:
        self.steps.append(label)

    @property
    def points(self) -> list[str]:
        """The steps that were a curve's point ('<curve label>  <size>: <rate>')."""
        curves = set(self.begun)
        return [s for s in self.steps if s.split("  ")[0] in curves]


@pytest.fixture(scope="module")
def one_gpu():
    return run_investigation(SimulatedEngine(), quick(1))


@pytest.fixture(scope="module")
def two_gpus():
    return run_investigation(SimulatedEngine(devices=2), quick(2))


def codes(result, severity: str | None = None) -> list[str]:
    return [f.code for f in result.findings if severity is None or f.severity == severity]


# ---- plans -------------------------------------------------------------------------------------


def test_default_plan_has_16_sizes_from_1_byte_to_1_gib():
    sizes = DEFAULT_PLAN.sizes
    assert len(sizes) == 16
    assert sizes[0] == 1 and sizes[-1] == GIB
    assert all(b == 4 * a for a, b in itertools.pairwise(sizes))


def test_quick_plan_has_8_sizes_to_256_mib():
    sizes = QUICK_PLAN.sizes
    assert len(sizes) == 8
    assert sizes[0] == 1 and sizes[-1] == 256 * MIB
    assert all(b == 16 * a for a, b in itertools.pairwise(sizes))


def test_options_pick_the_plan_and_record_it():
    assert RunOptions(devices=(0,)).plan is DEFAULT_PLAN
    assert RunOptions(devices=(0,), quick=True).plan is QUICK_PLAN
    d = RunOptions(devices=(0, 1), quick=True).to_dict()
    assert d["devices"] == [0, 1] and d["quick"] is True
    assert d["plan"]["mode"] == "quick" and d["plan"]["max_size"] == 256 * MIB


def test_gpu_curves_cover_every_host_kind_direction_and_mechanism():
    configs = gpu_curves(3)
    assert len(configs) == CURVES == 23 == len(set(configs))
    assert {c.device for c in configs} == {3}
    keys = {(c.direction, c.memory, c.mechanism, c.timing) for c in configs}
    for direction in ("h2d", "d2h"):
        for memory in investigate.HOST_KINDS:
            assert (direction, memory, "memcpy", "api") in keys
            assert (direction, memory, "async", "device") in keys
        assert (direction, "pageable", "staged", "api") in keys
        assert (direction, "pinned", "kernel", "device") in keys
    assert {
        ("d2d", "device", m, t)
        for m, t in (("memcpy", "api"), ("async", "device"), ("kernel", "device"))
    } <= keys
    assert not any(c.memory == "pageable" and c.mechanism == "kernel" for c in configs)


# ---- one GPU -----------------------------------------------------------------------------------


def test_one_gpu_section_is_complete_and_verified(one_gpu):
    (gpu,) = one_gpu.gpus
    assert gpu.index == 0 and gpu.status == "complete" and gpu.error is None
    assert [c.config for c in gpu.curves] == gpu_curves(0)
    for curve in gpu.curves:
        assert curve.status == "complete", curve.config.label
        assert tuple(p.bytes for p in curve.points) == QUICK_PLAN.sizes
        assert all(p.verification is not None and p.verification.ok for p in curve.points)
        assert all(p.valid for p in curve.points)


def test_one_gpu_run_is_complete_simulated_quick(one_gpu):
    assert one_gpu.complete and not one_gpu.interrupted
    assert one_gpu.simulated is True and one_gpu.machine["simulated"] is True
    assert one_gpu.mode == "quick"
    assert one_gpu.multi == ()
    assert one_gpu.findings
    assert one_gpu.wall_s > 0
    assert one_gpu.options["devices"] == [0]
    assert [g["index"] for g in one_gpu.machine["gpus"]] == [0]


def test_one_gpu_bidirectional_streams_are_slower_together(one_gpu):
    (bidirectional,) = one_gpu.gpus[0].concurrent
    assert isinstance(bidirectional, Concurrent)
    assert bidirectional.kind == "bidirectional" and bidirectional.status == "complete"
    assert [s.direction for s in bidirectional.streams] == ["h2d", "d2h"]
    for stream in bidirectional.streams:
        assert stream.device == 0 and stream.bytes == QUICK_PLAN.stream_bytes
        assert len(stream.samples_s) == QUICK_PLAN.stream_trials
        assert stream.alone_bandwidth is not None
        assert stream.bandwidth < stream.alone_bandwidth
    # Both directions at once carry more than one alone: the link is full duplex.
    assert bidirectional.total_bandwidth > max(s.alone_bandwidth for s in bidirectional.streams)


def test_one_gpu_pinning_cost(one_gpu):
    pinning = one_gpu.gpus[0].pinning
    assert isinstance(pinning, PinningCost)
    assert pinning.device == 0 and pinning.bytes == QUICK_PLAN.pinning_bytes
    assert pinning.pinned_copy_s < pinning.pageable_copy_s
    assert pinning.alloc_break_even is not None and pinning.alloc_break_even > 0


def test_one_gpu_findings_have_no_errors(one_gpu):
    assert not codes(one_gpu, ERROR)
    assert "verdict" in codes(one_gpu)
    assert "pageable_slow" in codes(one_gpu, WARNING)


# ---- two GPUs ----------------------------------------------------------------------------------


def test_two_gpus_measure_the_p2p_matrix_and_all_gpus_to_the_host(two_gpus):
    assert two_gpus.complete
    assert [g.status for g in two_gpus.gpus] == ["complete", "complete"]
    labels = [c.label for c in two_gpus.multi]
    assert len(labels) == len(set(labels))
    assert set(labels) == P2P_LABELS | ALL_GPUS_LABELS
    assert all(c.status == "complete" for c in two_gpus.multi)
    p2p = {c.label: c for c in two_gpus.multi if c.kind == "p2p"}
    assert set(p2p) == P2P_LABELS
    assert p2p["0-1/kernel/peer/one_way"].mechanism == "kernel"
    assert p2p["0-1/async/nopeer/one_way"].peer_access is False
    (stream,) = p2p["1-0/async/peer/one_way"].streams
    assert (stream.device, stream.direction, stream.peer) == (1, "p2p", 0)
    both = p2p["0-1/async/peer/both"].streams
    assert {(s.device, s.peer) for s in both} == {(0, 1), (1, 0)}


def test_two_gpus_all_gpus_host_has_one_stream_per_gpu_and_direction(two_gpus):
    multi = {c.label: c for c in two_gpus.multi if c.kind == "all_gpus_host"}
    assert set(multi) == ALL_GPUS_LABELS
    for name in ("h2d", "d2h"):
        streams = multi[f"all_gpus/{name}"].streams
        assert sorted(s.device for s in streams) == [0, 1]
        assert {s.direction for s in streams} == {name}
    streams = multi["all_gpus/both"].streams
    assert sorted((s.device, s.direction) for s in streams) == [
        (0, "d2h"),
        (0, "h2d"),
        (1, "d2h"),
        (1, "h2d"),
    ]


def test_two_gpus_peer_access_is_far_faster_than_through_the_host(two_gpus):
    p2p = {c.label: c.total_bandwidth for c in two_gpus.multi if c.kind == "p2p"}
    for pair in ("0-1", "1-0"):
        assert p2p[f"{pair}/async/peer/one_way"] > 5 * p2p[f"{pair}/async/nopeer/one_way"]
        assert p2p[f"{pair}/kernel/peer/one_way"] > 5 * p2p[f"{pair}/async/nopeer/one_way"]


def test_steps_count_every_progress_unit():
    # three ways per ordered pair, both ways per pair, three all-GPU sets; --quick on three GPUs:
    # the two pairs between GPUs 1 and 2 (headline only) by copy engines alone
    for n, per_multi in ((1, 0), (2, 3 * 2 + 1 + 3), (3, 3 * 4 + 1 * 2 + 3 + 3)):
        options = quick(n)
        # --quick on more than two GPUs: every check on the first, the headline on the others
        full = n if n <= 2 else 1
        headline = (n - full) * (5 * 8 + 1)
        placed = 2 * len(NUMA_CURVES)  # one size on each of the fixed host's two nodes
        assert steps(options) == full * (CURVES * 8 + 5 + placed) + headline + per_multi
    # the default run: 16 sizes a curve, and the chases
    assert steps(RunOptions(devices=(0,))) == CURVES * 16 + 5 + 2 * len(NUMA_CURVES) + 1


@pytest.mark.parametrize("devices", [1, 2, 3])
def test_observer_is_told_of_every_point_and_step(devices):
    recorder = Recorder()
    options = quick(devices)
    result = run_investigation(SimulatedEngine(devices=devices), options, recorder)
    assert result.complete
    assert len(recorder.begun) == sum(len(g.curves) + len(g.numa) for g in result.gpus)
    # the fixed host's two NUMA nodes: the placement curves of every fully measured GPU
    placed = 2 * len(NUMA_CURVES) * (devices if devices <= 2 else 1)
    full = CURVES * devices if devices <= 2 else CURVES + 5 * (devices - 1)
    assert len(recorder.begun) == full + placed
    measured = sum(len(c.points) for g in result.gpus for c in (*g.curves, *g.numa))
    assert len(recorder.points) == measured
    assert any("H2D while D2H" in s for s in recorder.steps)
    assert any("pinning" in s for s in recorder.steps)
    if devices > 1:
        assert {c.label for c in result.multi if c.kind == "p2p"} <= set(recorder.steps)
        assert sum(s.startswith("all GPUs") for s in recorder.steps) == 3
    assert len(recorder.steps) == steps(options), "a complete run fills the progress bar"


def test_observer_units_stay_within_steps_when_a_gpu_fails():
    recorder = Recorder()
    options = quick(2)
    run_investigation(SimulatedEngine(devices=2, failing_devices=(1,)), options, recorder)
    assert recorder.points and recorder.steps
    assert len(recorder.steps) <= steps(options)


# ---- a failing GPU -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpu1_fails():
    return run_investigation(SimulatedEngine(devices=2, failing_devices=(1,)), quick(2))


def test_failed_gpu_is_recorded_with_the_cuda_error(gpu1_fails):
    gpu0, gpu1 = gpu1_fails.gpus
    assert gpu0.status == "complete" and len(gpu0.curves) == CURVES
    assert gpu0.pinning is not None and gpu0.concurrent
    assert gpu1.status == "failed"
    assert gpu1.error is not None and gpu1.error.startswith("CUDA error")
    assert "unspecified launch failure" in gpu1.error
    assert gpu1.pinning is None and gpu1.concurrent == ()
    assert not gpu1_fails.complete and not gpu1_fails.interrupted


def test_multi_measurements_leave_the_failed_gpu_out(gpu1_fails):
    assert gpu1_fails.multi, "the healthy GPU still goes to the host"
    assert not [c for c in gpu1_fails.multi if c.kind == "p2p"]
    assert {c.label for c in gpu1_fails.multi} == ALL_GPUS_LABELS
    for c in gpu1_fails.multi:
        assert c.status == "complete"
        assert {s.device for s in c.streams} == {0}
        assert all(s.peer in (None, 0) for s in c.streams)


def test_failed_gpu_gives_a_gpu_failed_error(gpu1_fails):
    failed = [f for f in gpu1_fails.findings if f.code == "gpu_failed"]
    assert len(failed) == 1
    assert failed[0].severity == ERROR and failed[0].gpu == 1
    assert "CUDA error" in failed[0].message
    assert gpu1_fails.findings[0].code == "gpu_failed", "errors come first"


def test_first_gpu_failing_does_not_stop_the_second():
    result = run_investigation(SimulatedEngine(devices=2, failing_devices=(0,)), quick(2))
    assert [g.status for g in result.gpus] == ["failed", "complete"]
    assert len(result.gpus[1].curves) == CURVES
    assert {s.device for c in result.multi for s in c.streams} == {1}


# ---- interruption ------------------------------------------------------------------------------


def _calls(devices: int) -> int:
    engine = CountingEngine(devices=devices)
    run_investigation(engine, quick(devices))
    return engine.calls


@pytest.fixture(scope="module")
def calls_per_gpu() -> int:
    return _calls(1)


@pytest.mark.parametrize("where", ["first call", "gpu0 early", "gpu0 later", "gpu1"])
def test_interruption_keeps_what_was_measured(where, calls_per_gpu):
    after = {"first call": 0, "gpu0 early": 50, "gpu0 later": 400, "gpu1": calls_per_gpu + 400}[
        where
    ]
    result = run_investigation(SimulatedEngine(devices=2, interrupt_after=after), quick(2))
    assert result.interrupted and not result.complete
    interrupted = 1 if where == "gpu1" else 0
    statuses = [g.status for g in result.gpus]
    assert statuses[interrupted] == "interrupted"
    assert statuses[interrupted + 1 :] == ["not_run"] * (1 - interrupted)
    assert statuses[:interrupted] == ["complete"] * interrupted
    section = result.gpus[interrupted]
    assert section.curves, "the GPU being measured keeps its curves"
    assert section.curves[-1].status == "interrupted"
    assert all(c.status == "complete" for c in section.curves[:-1])
    assert section.pinning is None
    if after >= 400:
        assert len(section.curves) > 1
        assert sum(len(c.points) for c in section.curves) > 0
    assert result.multi == ()
    for g in result.gpus:
        if g.status == "not_run":
            assert g.curves == () and g.concurrent == () and g.pinning is None
    incomplete = [f for f in result.findings if f.code == "incomplete"]
    assert len(incomplete) == 1 and incomplete[0].severity == WARNING
    missing = ", ".join(str(g.index) for g in result.gpus if g.status != "complete")
    assert f"GPU {missing} not" in incomplete[0].message


def test_interruption_in_one_gpu_run_keeps_curves(calls_per_gpu):
    result = run_investigation(SimulatedEngine(interrupt_after=calls_per_gpu // 2), quick(1))
    (gpu,) = result.gpus
    assert gpu.status == "interrupted" and result.interrupted
    assert 1 < len(gpu.curves) < CURVES
    assert "incomplete" in codes(result)


def test_interruption_after_the_curves_keeps_all_curves(calls_per_gpu):
    """Ctrl-C in the last measurements of a GPU: the curves are all there."""
    result = run_investigation(SimulatedEngine(interrupt_after=calls_per_gpu - 1), quick(1))
    (gpu,) = result.gpus
    assert gpu.status == "interrupted" and result.interrupted
    assert len(gpu.curves) == CURVES
    assert all(c.status == "complete" for c in gpu.curves)
    assert gpu.overlap and gpu.gl and gpu.gemm is None  # the GEMM check, last, was cut


def test_the_gemm_check_runs_every_precision_and_the_fp32_break_even():
    result = run_investigation(SimulatedEngine(), quick(1))
    check = result.gpus[0].gemm
    assert check is not None and check.status == "complete"
    assert [p["precision"] for p in check.points] == ["fp64", "fp32", "tf32", "fp16", "bf16", "fp8"]
    assert all(
        p["size"] == 8192 and p["verified"] and 0 < p["share_of_peak"] < 1 for p in check.points
    )
    assert all(len(p["trials_tflops"]) == 3 for p in check.points)
    b = check.break_even
    assert b["precision"] == "fp32" and b["one_thread"] <= b["all_threads"] <= 4096
    # the run's own figures: a metric per precision, a row in the tables and the HTML
    from xferscope.run.metrics import run_metrics

    assert "gpu0/gemm/bf16/8192/flops" in run_metrics(result)
    assert check.wall_s < 10


def test_the_gl_check_finds_the_best_paths_or_says_why_not(monkeypatch):
    result = run_investigation(SimulatedEngine(), quick(1))
    check = result.gpus[0].gl
    assert check is not None and check.status == "complete" and not check.unverified
    assert check.upload_label and check.upload_label.startswith("upload 2048x2048")
    assert check.upload_rate and check.readback_rate and check.upload_rate > 1e9
    from xferscope.core.errors import GlUnavailableError

    def no_gl(self, device):
        raise GlUnavailableError("cannot load libEGL.so.1 (Debian/Ubuntu package libegl1; ...)")

    monkeypatch.setattr(SimulatedEngine, "gl_context", no_gl)
    result = run_investigation(SimulatedEngine(), quick(1))
    check = result.gpus[0].gl
    assert result.complete and check is not None and check.status == "unavailable"
    assert check.reason and "libegl1" in check.reason


MULTI_DROPPED = (
    "bug: investigate.run_investigation drops the multi-GPU measurements taken before Ctrl-C "
    "(`multi` is assigned only when investigate_multi returns)"
)
EMPTY_GPU_LIST = (
    "bug: health.failures names no GPU when Ctrl-C comes after every GPU section completed: "
    "'the run was interrupted; GPU  not fully measured'"
)


@pytest.fixture(scope="module")
def interrupted_in_multi():
    total = _calls(2)
    # The last calls of a two-GPU run are the all-GPUs-to-host measurements.
    return run_investigation(SimulatedEngine(devices=2, interrupt_after=total - 5), quick(2))


def test_interruption_during_multi_keeps_the_gpu_sections(interrupted_in_multi):
    result = interrupted_in_multi
    assert result.interrupted and not result.complete
    assert [g.status for g in result.gpus] == ["complete", "complete"]
    assert all(len(g.curves) == CURVES for g in result.gpus)
    assert "incomplete" in codes(result)


def test_interruption_during_multi_keeps_the_multi_measured_so_far(interrupted_in_multi):
    assert {c.label for c in interrupted_in_multi.multi} >= P2P_LABELS


def test_interruption_during_multi_says_what_is_missing(interrupted_in_multi):
    (incomplete,) = [f for f in interrupted_in_multi.findings if f.code == "incomplete"]
    assert "GPU  not" not in incomplete.message


# ---- corrupt copies ----------------------------------------------------------------------------


def test_corrupt_copies_give_verification_failed_errors():
    result = run_investigation(SimulatedEngine(corrupt=True), quick(1))
    failed = [f for f in result.findings if f.code == "verification_failed"]
    assert len(failed) == CURVES, "one per curve"
    assert all(f.severity == ERROR and f.gpu == 0 for f in failed)
    assert result.findings[0].severity == ERROR
    labels = {c.config.label for c in result.gpus[0].curves}
    assert all(any(label in f.message for label in labels) for f in failed)
    # The concurrent streams verify their data too.
    (bidirectional,) = result.gpus[0].concurrent
    assert bidirectional.status == "failed" and "verification failed" in bidirectional.error
    assert "measurement_failed" in codes(result, WARNING)
    # Figures from wrong data are no verdict.
    assert "verdict" not in codes(result)


def test_clean_copies_give_no_verification_finding(one_gpu):
    assert "verification_failed" not in codes(one_gpu)
