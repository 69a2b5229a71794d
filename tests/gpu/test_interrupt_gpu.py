"""Ctrl-C at random moments of real measurements on a GPU: the native engine, the staged
copier's threads and the pinned buffers are released, the process exits with 130 within two
seconds of the signal without a crash, and what was measured is written whole."""

from __future__ import annotations

import random

import pytest

from ..unit.test_interrupts import (
    Outcome,
    check_run,
    check_signalled,
    check_sweep,
    interrupt_once,
)

pytestmark = pytest.mark.gpu

# Pageable memcpy, pinned async and the staged copier (its host threads), both directions.
SWEEP = [
    "sweep",
    "--quick",
    "-d",
    "h2d,d2h",
    "-m",
    "pageable",
    "--mechanism",
    "memcpy,staged",
    "--sizes",
    "4KiB,1MiB,64MiB,256MiB",
]


# A signal this close to the process's end, with every file written and exit 0, came after the
# command had finished: it lands while the kernel tears the CUDA context down after os._exit
# (seen on an H100: exit 0.03 s after a SIGINT 3.75 s into a 3.78 s sweep), too late for any
# handler to run.
LEAVING_S = 0.05


def leaving(outcome: Outcome) -> bool:
    return (
        outcome.code == 0
        and outcome.after_signal_s is not None
        and outcome.after_signal_s < LEAVING_S
        and check_sweep(outcome, curves=4, sizes=4) == "writing"
    )


def test_sigint_during_a_native_sweep(tmp_path, native_engine):
    whole = interrupt_once("sweep", tmp_path / "whole", None, SWEEP)
    assert whole.code == 0, whole.stderr
    rng = random.Random("xferscope-gpu-sweep")
    phases = []
    for i in range(8):
        delay = rng.uniform(0.0, 0.95 * whole.lifetime_s)
        outcome = interrupt_once("sweep", tmp_path / f"try{i}", delay, SWEEP)
        if outcome.after_signal_s is None or leaving(outcome):
            phases.append("finished")
            continue
        check_signalled(f"sweep: SIGINT {delay:.2f} s in", outcome)
        phases.append(check_sweep(outcome, curves=4, sizes=4))
        print(
            f"sweep: SIGINT {delay:.2f} s in ({phases[-1]}): exit 130 "
            f"{outcome.after_signal_s:.3f} s after it"
        )
    assert phases.count("measuring") >= 2, phases


def test_sigint_during_a_native_run(tmp_path, native_engine):
    rng = random.Random("xferscope-gpu-run")
    # `run --quick` takes about 12 s on one H100 once its directory exists (24 s before the
    # run's trials were shortened): signals within its first 10 s.
    for i, delay in enumerate(rng.uniform(0.5, 10.0) for _ in range(3)):
        outcome = interrupt_once("run", tmp_path / f"try{i}", delay, ["run", "--quick", "-g", "0"])
        if outcome.after_signal_s is None:
            continue
        check_signalled(f"run: SIGINT {delay:.2f} s in", outcome)
        phase = check_run(outcome, tmp_path / f"try{i}")
        print(
            f"run: SIGINT {delay:.2f} s in ({phase}): exit 130 {outcome.after_signal_s:.3f} s "
            "after it"
        )
