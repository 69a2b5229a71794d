"""What a finding advises, from what the trace shows the program doing: small copies by whether
their bytes repeat, pageable copies by their direction, slow copies only where a rate says
something, and a loader's wait at epoch starts only as its workers' restart."""

from __future__ import annotations

import pytest

from xferscope.trace.records import Copy, Trace

from .trace_loops import loader_loop


@pytest.mark.parametrize(("distinct", "constant"), [(True, False), (False, True), (None, False)])
def test_small_copies_are_advised_by_whether_their_bytes_repeat(distinct, constant):
    """Two runs of 20 small uploads: a batch's features (each copy's content new) are advised
    fewer, larger copies; the same bytes uploaded run after run (a constant made each step),
    made once on the GPU; no content recorded, as the batch's."""
    from xferscope.trace.findings import Context, small

    us = 1_000
    copies = []
    for run in range(2):
        for i in range(20):
            t = (1_000 + run * 1_000 + i * 10) * us
            content = None if distinct is None else (run * 20 + i if distinct else i)
            copies.append(Copy(1, "h2d", "pinned", "device", 4096, t, t + 2 * us, 0, 7, True,
                               run * 20 + i, content=content))  # fmt: skip
    f = small.find(Context(Trace(tuple(copies), (), (), (), {}, {}, ()), None))
    assert f is not None
    from xferscope.trace.findings.base import in_words

    assert f.advice == in_words(small.CONSTANT_ADVICE if constant else small.ADVICE, None)
    assert ("once, before the loop" in f.advice) is constant


def test_small_copies_made_by_jax_are_advised_in_jaxs_words():
    """A run of 20 small uploads that `jax.device_put` of a column dict made: stacked into
    one array, put once, cut on the device; no PyTorch or CuPy words."""
    from xferscope.trace.findings import Context, small
    from xferscope.trace.records import PyFrame

    put = (PyFrame("/v/site-packages/jax/_src/api.py", 2400, "device_put"),)
    put += (PyFrame("train.py", 90, "train"),)
    us = 1_000
    starts = [(1_000 + i * 10) * us for i in range(20)]
    copies = [
        Copy(
            1, "h2d", "pinned", "device", 4096, t, t + 2 * us, 0, 7, True, i, content=i, python=put
        )
        for i, t in enumerate(starts)
    ]
    f = small.find(Context(Trace(tuple(copies), (), (), (), {}, {}, ()), None))
    assert f is not None and f.framework == "JAX"
    assert "jax.device_put" in f.advice and "torch" not in f.advice and "cupy" not in f.advice


def test_small_copies_of_pjrts_threads_take_jaxs_words_from_the_processs_waits():
    """JAX's copies, made on PJRT's threads, carry no stack; a wait of the process that went
    through JAX's CUDA plugin tells the framework."""
    from xferscope.trace.findings import Context, small
    from xferscope.trace.records import Call

    us = 1_000
    copies = [
        Copy(1, "h2d", "pinned", "device", 4096, t, t + 2 * us, 0, 7, True, i, content=i)
        for i, t in enumerate((1_000 + i * 10) * us for i in range(20))
    ]
    wait = Call("cuStreamSynchronize", 2_000 * us, 2_100 * us, 1, 1, frames=(0xABC,))
    trace = Trace(tuple(copies), (), (), (wait,), {}, {0xABC: "xla_cuda_plugin.so+0x110715c0"}, ())
    f = small.find(Context(trace, None))
    assert f is not None and f.framework == "JAX" and "jax.device_put" in f.advice


@pytest.mark.parametrize(
    ("directions", "leads", "then"),
    [(("h2d",), "pin the host buffers once", None),
     (("d2h",), "copy into host buffers pinned once", None),
     (("h2d", "d2h", "d2h"), "copy into host buffers pinned once", "for the uploads: pin"),
     (("h2d", "h2d", "d2h"), "pin the host buffers once", "for the copies back: copy into")],
)  # fmt: skip
def test_pageable_copies_are_advised_for_the_direction_that_costs_most(directions, leads, then):
    """Pageable uploads are advised pinned sources; pageable reads back (`.cpu()`), a pinned
    destination and an event; both, the costlier first."""
    from xferscope.trace.findings import Context, pageable

    us = 1_000
    copies = [Copy(1, d, "pageable" if d == "h2d" else "device", "device" if d == "h2d"
                   else "pageable", 1 << 20, (1_000 + 100 * i) * us, (1_050 + 100 * i) * us,
                   0, 7, False, i) for i, d in enumerate(directions)]  # fmt: skip
    f = pageable.find(Context(Trace(tuple(copies), (), (), (), {}, {}, ()), None))
    assert f is not None and f.advice.startswith(leads)
    assert (then is None and ";" not in f.advice) or (then is not None and then in f.advice)


def test_a_small_copy_is_never_slow_for_its_rate():
    """Reads back of 8 B and 4 KiB ten times this machine's curve (a `.tolist()` or `.cpu()` of
    a result: their time is the copy's fixed cost) are not slow copies; one of 1 MiB is."""
    from xferscope.trace.findings import Context, slow
    from xferscope.trace.reference import Reference

    ms = 1_000_000
    reference = Reference("test", {("d2h", "pinned"): ((8, 5e-6), (4096, 6e-6), (1 << 20, 1e-4))})
    sizes = (8, 4096, 8, 4096)
    copies = [Copy(1, "d2h", "device", "pinned", b, (i + 1) * ms, (i + 1) * ms + 60_000, 0, 7,
                   True, i) for i, b in enumerate(sizes)]  # fmt: skip
    assert slow.find(Context(Trace(tuple(copies), (), (), (), {}, {}, ()), reference)) is None
    big = Copy(1, "d2h", "device", "pinned", 1 << 20, 9 * ms, 10 * ms, 0, 7, True, 9)
    found = slow.find(Context(Trace((*copies, big), (), (), (), {}, {}, ()), reference))
    assert found is not None and found.calls == 1


def test_a_wait_only_at_epoch_starts_is_the_loaders_restart():
    """Forty steps of 3 ms with no wait between them, but at two epoch starts 60 ms waiting for
    the batch (the workers start again): all alike, none long beside the others, yet no step's
    wait: the fix is persistent workers, for all of it."""
    from xferscope.trace.findings import Context, input_starved
    from xferscope.trace.steps import loops

    trace = loader_loop(40, 3, 63, (14, 28))
    found = loops(trace)
    assert found and found[0].count >= 38
    f = input_starved.find(Context(trace, None, loops=found))
    assert f is not None
    ((restart, saved),) = f.each_fix
    assert "persistent_workers=True" in restart and saved == pytest.approx(f.saving_s)
    assert f.advice.startswith(restart)  # the headline's fix is the restart's, not the knobs'
    assert input_starved.find(Context(trace, None)) is not None  # no loop known: as before


def test_small_copies_whose_bytes_come_back_only_a_period_later_are_new_each_step():
    """A loop's 20 small uploads a step, each step's bytes new but the steps' replayed every 4
    steps (a clip's parameters): no constant to keep (repeated.WITHIN steps), fewer and larger
    copies advised; the same bytes every step: made once."""
    from xferscope.trace.findings import Context, small
    from xferscope.trace.findings.base import in_words
    from xferscope.trace.steps import Steps

    us = 1_000
    for period, constant in ((4, False), (1, True)):
        copies = []
        for step in range(12):
            for i in range(20):
                t = (1_000 + step * 1_000 + i * 10) * us
                copies.append(Copy(1, "h2d", "pinned", "device", 4096, t, t + 2 * us, 0, 7, True,
                                   step * 20 + i, content=(step % period) * 20 + i))  # fmt: skip
        loop = Steps("train.py:9 (train)", 12, 1e-3, 0.5, 1_000 * us, 12_000 * us, pid=1)
        f = small.find(Context(Trace(tuple(copies), (), (), (), {}, {}, ()), None, (loop,)))
        assert f is not None
        assert f.advice == in_words(small.CONSTANT_ADVICE if constant else small.ADVICE, None)
