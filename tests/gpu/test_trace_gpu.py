"""`xferscope trace` on a real GPU: tests/trace_programs/copies.cu and a PyTorch script run
unchanged under the injection library; byte counts exact, totals within 2% of the program's own
event timing, a crash's trace kept. Skipped without a GPU (or nvcc, for the C++ program)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

PROGRAMS = Path(__file__).parent.parent / "trace_programs"


@pytest.fixture(scope="module")
def copies(tmp_path_factory, native_engine) -> Path:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc to build the test program")
    out = tmp_path_factory.mktemp("prog") / "copies"
    subprocess.run([nvcc, "-O2", "-o", str(out), str(PROGRAMS / "copies.cu"), "-lcuda"], check=True)
    return out


def trace(
    tmp_path: Path, *command: str, options: tuple[str, ...] = ()
) -> tuple[subprocess.CompletedProcess[str], dict]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "xferscope",
            "trace",
            "--reference",
            "none",
            "--no-history",
            *options,
            "-o",
            str(tmp_path),
            "--",
            *command,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    found = list(tmp_path.glob("trace-*/trace-summary.json"))
    return proc, json.loads(found[0].read_text()) if found else {}


def own(stdout: str) -> dict:
    return json.loads(next(line for line in stdout.splitlines() if line.startswith("{")))


def test_every_byte_the_program_copied_is_in_the_trace(copies, tmp_path):
    proc, doc = trace(tmp_path, str(copies), "--small", "300")
    assert proc.returncode == 0, proc.stderr
    mine = own(proc.stdout)
    for direction in ("h2d", "d2h"):
        traced = [c for c in doc["copies"] if c["direction"] == direction]
        assert len(traced) == mine[direction]["calls"]
        assert sum(c["bytes"] for c in traced) == mine[direction]["bytes"]
    assert all(c["function"] for c in doc["copies"])
    codes = {f["code"] for f in doc["findings"]}
    assert {"trace_pageable_copies", "trace_repeated_uploads"} <= codes
    # the buffer it pins and never copies is pinned before its loop: the start-up's
    pinned = sum(s["pinned_bytes"] for s in doc["summary"]["startup"])
    assert "trace_pinned_unused" in codes or pinned > 0


def test_driver_api_copies_are_recorded_with_their_callers(copies, tmp_path):
    proc, doc = trace(tmp_path, str(copies), "--small", "20", "--driver")
    assert proc.returncode == 0, proc.stderr
    driver = [c for c in doc["copies"] if (c["function"] or "").startswith("cuMemcpyHtoD")]
    assert len(driver) == 10 and all(c["bytes"] == 1 << 20 and c["where"] for c in driver)
    # a program that calls the driver itself keeps the driver's callbacks
    assert not any("driver_calls_off_ns" in p for p in doc["processes"])


def test_a_runtime_program_has_the_drivers_callbacks_turned_off_and_its_copies_named(
    native_engine, tmp_path
):
    """256 small uploads a step through the runtime (PyTorch's): past the first 2,000 driver
    calls that runtime calls made, CUPTI's driver callbacks are turned off, and every copy,
    before and after, is still recorded at the program's line."""
    pytest.importorskip("torch")
    script = str(PROGRAMS / "small_tensors.py")
    # 200 steps: the writer thread, which turns them off, wakes every 100 ms or at 8,192
    # queued calls (32 steps), and 40 steps can end before either
    proc, doc = trace(tmp_path, sys.executable, script, "--steps", "200")
    assert proc.returncode == 0, proc.stderr
    off = [p["driver_calls_off_ns"] for p in doc["processes"] if "driver_calls_off_ns" in p]
    assert len(off) == 1
    small = [c for c in doc["copies"] if c["direction"] == "h2d" and c["bytes"] == 4096]
    assert len(small) == 256 * (200 + 3)
    after = [c for c in small if c["start_ns"] > off[0]]
    assert len(after) >= 256 * 50
    assert all((c["where"] or "").startswith(script + ":") for c in small)


def test_a_loop_inside_device_frees_keeps_one_call_to_each_copy(native_engine, tmp_path):
    """A loop that frees the allocator's cache every step is inside cudaFree (and the driver's
    cuMemFree in it) much of the time: the driver's callbacks are turned off between calls, not
    inside one, so CUPTI's correlation ids keep advancing, every copy keeps its call and line,
    and the steps are the loop's."""
    pytest.importorskip("torch")
    script = str(PROGRAMS / "freeing_loop.py")
    proc, doc = trace(tmp_path, sys.executable, script, "--steps", "200")
    assert proc.returncode == 0, proc.stderr
    said = doc["summary"]["warnings"]
    assert not [w for w in said if "correlation id" in w], said
    assert [p for p in doc["processes"] if "driver_calls_off_ns" in p]
    batches = [c for c in doc["copies"] if c["direction"] == "h2d" and c["bytes"] == 2048**2 * 4]
    assert len(batches) == 203
    assert all((c["where"] or "").startswith(f"{script}:{_line_of(Path(script), '# STEP')} ")
               for c in batches)  # fmt: skip
    steps = doc["summary"]["steps"]
    assert 190 <= steps["count"] <= 203, steps
    waits = next(f for f in doc["summary"]["fixes"] if f["code"] == "synchronizations")
    assert "torch.cuda.empty_cache()" in waits["fix"]
    assert "device allocations (cudaMalloc)" in waits["detail"]


def test_totals_agree_with_the_programs_own_events(copies, tmp_path):
    proc, doc = trace(tmp_path, str(copies), "--accuracy")
    assert proc.returncode == 0, proc.stderr
    mine = own(proc.stdout)
    for direction in ("h2d", "d2h"):
        traced = sum(
            (c["end_ns"] - c["start_ns"]) * 1e-9
            for c in doc["copies"]
            if c["direction"] == direction
        )
        ratio = traced / mine[direction]["seconds"]
        assert 0.98 <= ratio <= 1.02, (direction, ratio)


def test_a_crash_keeps_its_trace(copies, tmp_path):
    proc, doc = trace(tmp_path, str(copies), "--small", "50", "--crash")
    assert proc.returncode == 134 and "SIGABRT" in proc.stderr
    assert doc["signal"] == "SIGABRT" and len(doc["copies"]) > 50


def test_a_pytorch_program_is_traced_unchanged(native_engine, tmp_path):
    pytest.importorskip("torch")
    kept = tmp_path / "kept"
    proc, doc = trace(
        tmp_path,
        sys.executable,
        str(PROGRAMS / "torch_copies.py"),
        options=("--records", str(kept)),
    )
    assert proc.returncode == 0, proc.stderr
    mine = own(proc.stdout)
    for direction in ("h2d", "d2h"):
        assert (
            sum(c["bytes"] for c in doc["copies"] if c["direction"] == direction) == mine[direction]
        )
    memories = {c["src"] for c in doc["copies"] if c["direction"] == "h2d"}
    assert memories == {"pageable", "pinned"}
    # every copy is placed at the script's own line, though PyTorch releases the GIL in it
    script = str(PROGRAMS / "torch_copies.py")
    where = {c["where"] for c in doc["copies"]}
    assert all(w.startswith(script + ":") for w in where), where
    # their native callers are unwound one copy in 64, as detail
    unwound = sum(1 for c in doc["copies"] if c.get("native"))
    assert 1 <= unwound <= len(doc["copies"]) // 32, unwound
    # the records keep the text of the script's lines they name, for a replay elsewhere
    sources = json.loads((kept / "run1" / "sources.json").read_text())
    lines = (PROGRAMS / "torch_copies.py").read_text().splitlines()
    assert sources[script] and all(t == lines[int(n) - 1] for n, t in sources[script].items())


LOOP = Path(__file__).parent.parent.parent / "benchmarks" / "torch_train_loop.py"


def test_kernels_are_recorded_only_in_their_windows(native_engine, tmp_path):
    """--kernels 20/100 on a PyTorch loop of about a second: kernels inside the windows only,
    every copy still recorded, and the tracing's own cost written."""
    pytest.importorskip("torch")
    from xferscope.trace.analyze import analyze
    from xferscope.trace.reading import read_trace
    from xferscope.trace.runner import run_traced

    ran = run_traced(
        [sys.executable, str(LOOP), "--steps", "600", "--warmup", "5"], tmp_path, kernels="20/100"
    )
    assert ran.returncode == 0
    trace = read_trace(ran.files)
    assert trace.kernel_coverage == "sampled" and len(trace.kernel_windows) >= 5
    kernels = trace.kernels()
    assert kernels
    late = 50_000_000  # ns: a kernel launched in a window may start after it closed
    for k in kernels:
        assert any(a <= k.start_ns <= b + late for _, a, b in trace.kernel_windows)
    line = f"{LOOP}:{_line_of(LOOP, 'x = batch.to(device)')} "
    at = [c for c in trace.copies if (trace.where(c.frames, c.python) or "").startswith(line)]
    assert len(at) == 600 + 5
    notes = " ".join(analyze(trace, ran.wall_s, None).notes)
    assert "windows of 20 ms (one every 100 ms at most)" in notes, notes
    assert "callbacks took" in notes, notes
    # the parts are timed inside the callbacks: together they cannot be much more than the
    # whole (the sampled parts' estimates vary; an unwinding timed 16 times over did not)
    cost = trace.processes[0]["cost"]
    print("tracing cost [calls, ns]:", cost)
    parts = sum(cost[k][1] for k in ("hash", "unwind", "python"))
    assert 0 < parts <= 1.25 * cost["callbacks"][1], cost


def test_the_first_window_closes_at_its_kernel_count(native_engine, tmp_path):
    """--kernels 50/500/30000/2000 on a PyTorch loop of about 40,000 kernels: the first window
    closes once about 2,000 kernels were recorded in it (CUPTI delivers them a buffer at a
    time), long before its 30 s, and windows follow it."""
    pytest.importorskip("torch")
    from xferscope.trace.reading import read_trace
    from xferscope.trace.runner import run_traced

    ran = run_traced([sys.executable, str(LOOP), "--steps", "1500", "--warmup", "5"], tmp_path,
                     kernels="50/500/30000/2000")  # fmt: skip
    assert ran.returncode == 0
    trace = read_trace(ran.files)
    assert trace.processes[0]["first_kernels"] == 2000
    (_, a, b), *after = sorted(trace.kernel_windows, key=lambda w: w[1])
    late = 50_000_000  # ns: a kernel launched in a window may start after it closed
    first = [k for k in trace.kernels() if a <= k.start_ns <= b + late]
    print(f"first window {(b - a) / 1e9:.3f} s, {len(first)} kernels; {len(after)} after it")
    assert 2000 <= len(first) <= 12_000
    assert (b - a) < 10e9 and after


@pytest.mark.parametrize("how", ["pause", "detach"])
def test_the_pause_switch_leaves_out_the_paused_blocks(native_engine, tmp_path, how):
    """torch_train_loop.py --alternate pauses the tracing (or detaches CUPTI) for half of its
    blocks: the copies of the upload line are those of the warm-up and the traced blocks (each
    with its untimed settling steps), exactly, and CUPTI attached again records as before."""
    pytest.importorskip("torch")
    sys.path.insert(0, str(LOOP.parent))
    from torch_train_loop import SETTLE

    proc, doc = trace(
        tmp_path, sys.executable, str(LOOP), "--steps", "10", "--warmup", "3", "--repeats", "2",
        "--alternate", how,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    mine = own(proc.stdout)
    assert len(mine["paused_s"]) == 2 and len(mine["loops_s"]) == 2
    line = f"{LOOP}:{_line_of(LOOP, 'x = batch.to(device)')} "
    at = [c for c in doc["copies"] if c["where"].startswith(line)]
    assert len(at) == 3 + 2 * (10 + SETTLE), {c["where"] for c in doc["copies"]}
    assert doc["summary"]["kernels"] > 0


def _line_of(path: Path, text: str) -> int:
    return next(i for i, t in enumerate(path.read_text().splitlines(), start=1) if text in t)


def test_child_processes_are_traced_too(copies, tmp_path):
    script = f"{copies} --small 10 > /dev/null; {copies} --small 20 > /dev/null"
    proc, doc = trace(tmp_path, "/bin/sh", "-c", script)
    assert proc.returncode == 0, proc.stderr
    assert len(doc["processes"]) == 2
    assert len({c["pid"] for c in doc["copies"]}) == 2


DDP = PROGRAMS / "ddp_loop.py"


def test_a_gpu_fed_slowly_waits_for_its_input_at_the_copy_line(native_engine, tmp_path):
    """One process whose host takes 30 ms to make each step's input (no DataLoader): with
    kernels recorded as by default (the first window, 30 s, holds the whole loop), the GPU's
    idle is judged where they were, and the input finding names the line where the looks found
    the host and the batch copy's line, with no DataLoader's knobs."""
    pytest.importorskip("torch")
    proc, doc = trace(tmp_path, sys.executable, str(DDP), "--input-ms", "30", "--steps", "80")
    assert proc.returncode == 0, proc.stderr
    s = doc["summary"]
    line = f"{DDP}:{_line_of(DDP, '# INPUT_LINE')} "
    (gpu,) = s["gpus"]
    assert s["kernels_recorded"] == "sampled" and 0 < gpu["judged_s"] <= gpu["span_s"]
    assert gpu["idle_share"] > 0.2
    starved = next(f for f in s["fixes"] if f["code"] == "input_starved")
    assert any(p["where"].startswith(line) for p in starved["places"])
    assert "next_input" in starved["places"][0]["where"] and "num_workers" not in starved["fix"]
    assert starved["each_fix"] and sum(x for _, x in starved["each_fix"]) == pytest.approx(
        starved["saving_s"]
    )
    assert s["steps"]["where"].startswith(line) and s["headline"]["code"] == "input_starved"


def test_the_rank_with_slow_input_is_named_as_the_one_the_others_waited_for(
    native_engine, tmp_path, monkeypatch
):
    """Two ranks under torchrun, rank 1's input 20 ms slower each step: the other GPU waits in
    NCCL's all-reduce, and rank 1 is named, its GPU idle until its batch copy's line."""
    torch = pytest.importorskip("torch")
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    for name in ("NCCL_NVLS_ENABLE", "NVSHMEM_DISABLE_NVLS"):
        monkeypatch.setenv(name, "0" if name == "NCCL_NVLS_ENABLE" else "1")
    proc, doc = trace(
        tmp_path, sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
        str(DDP), "--slow-rank", "1", "--steps", "80",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    s = doc["summary"]
    assert [r["device"] for r in s["ranks"]] == [0, 1]
    late = s["straggler"]
    assert late is not None and late["device"] == 1
    line = f"{DDP}:{_line_of(DDP, '# INPUT_LINE')} "
    assert late["cause"]["kind"] == "away" and late["cause"]["where"].startswith(line)
    assert "made the other ranks wait" in proc.stdout and s["headline"]["code"] == "straggler"


def test_a_program_forked_with_the_traces_environment_records_as_trace_does(
    native_engine, tmp_path
):
    """trace_bench's corpus part times programs forked from a process that imported PyTorch,
    with runner.traced_env: the injection library loads in the child at CUDA's start and
    records every byte it copied, and its main thread is looked at."""
    pytest.importorskip("torch")
    sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
    from corpus_zygote import Zygote
    from xferscope.trace.reading import read_trace
    from xferscope.trace.runner import traced_env

    records = tmp_path / "records"
    records.mkdir()
    env = dict(os.environ) | traced_env(records)
    with Zygote() as zygote:
        rc, out, err = zygote.run([sys.executable, str(PROGRAMS / "torch_copies.py")], env, 300)
    assert rc == 0, err
    mine = own(out)
    files = sorted(records.glob("trace-*.jsonl"))
    assert files and list(records.glob("pysamples-*.jsonl"))
    copies = read_trace(files).copies
    for direction in ("h2d", "d2h"):
        assert sum(c.bytes for c in copies if c.direction == direction) == mine[direction]
