"""The tables of the run page (run_html.py) that are not curves: concurrent copies, what
pinning costs, CPU work under a readback, host memory on each NUMA node, latency seen from the
GPU, the GL check and the GEMM check."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..core.units import format_bytes, format_flops, format_rate, format_seconds
from ..gemm.check import GemmCheck
from ..gl.check import GlCheck
from ..run.records import (
    Concurrent,
    OverlapPoint,
    PinningCost,
)
from ..sweep.chase import ChasePoint
from ..sweep.records import Curve
from .page import (
    RowClass,
    escape,
    noise,
    red,
    table,
)
from .sweep_tables import placed_label


def _concurrent_rows(c: Concurrent, share: bool = False) -> list[list[object]]:
    """One row per stream and a total; with `share`, each stream's share of the total."""
    name = f"{c.label} ({c.mechanism})"
    if c.status != "complete" or not c.streams:
        return [[name, "", "", "", "", "", red(f"{c.status}: {c.error or 'no streams'}")]]
    total = c.total_bandwidth
    rows: list[list[object]] = []
    for i, s in enumerate(c.streams):
        alone = s.alone_bandwidth
        rows.append(
            [
                name if i == 0 else "",
                s.label,
                format_bytes(s.bytes),
                format_rate(s.bandwidth),
                format_rate(alone) if alone else "not measured",
                f"{s.bandwidth / total:.0%} of total"
                if share
                else (f"{s.bandwidth / alone:.0%}" if alone else ""),
                noise(s.rel_noise),
            ]
        )
    alones = [s.alone_bandwidth for s in c.streams]
    alone_sum = sum(a for a in alones if a) if all(alones) else None
    rows.append(
        [
            RowClass("total"),
            "",
            "total",
            "",
            format_rate(total),
            format_rate(alone_sum) if alone_sum else "",
            "" if share or not alone_sum else f"{total / alone_sum:.0%}",
            "",
        ]
    )
    return rows


def concurrent_table(measurements: Sequence[Concurrent], share: bool = False) -> str:
    rows = [row for c in measurements for row in _concurrent_rows(c, share)]
    return table(
        [
            "measurement",
            "stream",
            "size per copy",
            "concurrent",
            "alone",
            "share" if share else "concurrent / alone",
            "noise",
        ],
        rows,
        ["", "", "num", "num", "num", "num", "num"],
    )


def pinning_table(p: PinningCost) -> str:
    per_gb = 1e9 / p.bytes
    size = format_bytes(p.bytes)
    rows: list[list[object]] = [
        [f"{call} ({size})", format_seconds(seconds), format_seconds(seconds * per_gb)]
        for call, seconds in (
            ("cudaMallocHost", p.host_alloc_s),
            ("cudaFreeHost", p.host_free_s),
            ("cudaHostRegister", p.register_s),
            ("cudaHostUnregister", p.unregister_s),
        )
    ]
    for memory, seconds in (
        ("pageable", p.pageable_copy_s),
        ("pinned", p.pinned_copy_s),
        ("registered", p.registered_copy_s),
    ):
        rows.append(
            [
                f"H2D copy of {size} from {memory} memory",
                format_seconds(seconds),
                f"{format_seconds(seconds * per_gb)} ({format_rate(p.bytes / seconds)})",
            ]
        )
    costs = table(["operation", "time", "per GB"], rows, ["", "num", "num"])

    def pays(n: float | None, what: str) -> list[object]:
        if n is None:
            return [what, red("never: these copies are not faster than pageable ones")]
        return [what, f"{n:,.1f} transfers of {size}"]

    even = table(
        ["pinning by", "pays for itself after"],
        [
            pays(p.alloc_break_even, "cudaMallocHost + cudaFreeHost"),
            pays(p.register_break_even, "cudaHostRegister + cudaHostUnregister"),
        ],
        ["", "num"],
    )
    return (
        f'<div class="pair">{costs}{even}</div><p class="caption">Break-even: the setup and '
        "teardown time divided by the time each copy saves against a pageable copy.</p>"
    )


def overlap_table(points: Sequence[OverlapPoint]) -> str:
    rows = [
        [
            f"{o.direction} {o.memory}, {format_bytes(o.bytes)}",
            format_seconds(o.alone_s),
            format_seconds(o.work_s),
            format_seconds(o.issue_s),
            format_seconds(o.total_s),
            f"{o.hidden:.0%}",
        ]
        for o in points
    ]
    markup = table(
        ["readback", "alone", "CPU work", "blocked in the call", "total", "work hidden"],
        rows,
        ["", "num", "num", "num", "num", "num"],
    )
    return (
        f'{markup}<p class="caption">The copy is issued, the CPU works for half the copy\'s time, '
        "then waits (asynchronous readback). Hidden: the share of the work that cost "
        "no extra time. `xferscope overlap cpu` sweeps the work.</p>"
    )


def numa_table(machine: Mapping[str, Any], curves: Sequence[Curve]) -> str:
    rows = [
        [
            placed_label(machine, c),
            format_rate(c.points[-1].bandwidth),
            format_bytes(c.points[-1].bytes),
            f"{c.points[-1].rel_noise:.1%}",
        ]
        for c in curves
        if c.points
    ]
    markup = table(["curve", "bandwidth", "at", "noise"], rows, ["", "num", "num", "num"])
    return (
        f'{markup}<p class="caption">The host memory and the thread copying it placed on each '
        "NUMA node in turn (as numactl --cpunodebind=N --membind=N). `xferscope sweep "
        "--numa-node all` measures whole curves this way.</p>"
    )


def chase_table(points: Sequence[ChasePoint]) -> str:
    rows = [
        [
            c.label,
            "" if c.median_ns is None else format_seconds(c.median_ns * 1e-9),
            f"{format_bytes(c.bytes)} by {format_bytes(c.stride)}",
            f"{c.reads:,} x {len(c.ns_per_read)}" if c.ns_per_read else "",
            {True: "yes", False: "NO"}.get(c.verified, c.error or ""),  # type: ignore[arg-type]
        ]
        for c in points
    ]
    markup = table(
        ["memory read", "one read", "chain through", "reads x trials", "chain verified"],
        rows,
        ["", "num", "num", "num", ""],
    )
    return (
        f'{markup}<p class="caption">One GPU thread follows a chain of pointers, each read '
        "waiting for the one before (nvbandwidth's host_device_latency_sm): what one read of that "
        "memory costs a kernel, beside the copies' API latencies above. The median of the "
        "trials.</p>"
    )


def gl_table(check: GlCheck) -> str:
    if check.status == "unavailable":
        return f'<p class="muted">No OpenGL here: {escape(check.reason)}</p>'
    rows = [
        [op, label.removeprefix(op + " ") if label else "none verified", rate_text]
        for op, label, rate_text in (
            ("upload", check.upload_label, format_rate(check.upload_rate or 0.0)),
            ("readback", check.readback_label, format_rate(check.readback_rate or 0.0)),
        )
    ]
    markup = table(["op", "best path", "rate"], rows, ["", "", "num"])
    notes = ""
    if check.unverified:
        notes += (
            f"<p>Test frame changed (rates unreliable): {escape(', '.join(check.unverified))}</p>"
        )
    if check.reason:
        notes += f'<p class="gpu-error">{escape(check.reason)}</p>'
    return (
        f'{markup}{notes}<p class="caption">{escape(check.renderer or "")}: the best of a few '
        "2048x2048 RGBA8 paths (client memory, PBOs, a persistent mapping, CUDA interop), "
        "each verified. `xferscope gl --survey` explores every state.</p>"
    )


def gemm_table(check: GemmCheck) -> str:
    rows: list[list[object]] = []
    for g in check.points:
        share = g.get("share_of_peak")
        verified = {None: "", True: "yes", False: red("NO: wrong result")}[g.get("verified")]
        rows.append(
            [
                g["precision"],
                f"{g['size']}³",
                format_flops(g["tflops"] * 1e12) if g.get("tflops") else g["status"],
                "" if share is None else f"{share:.0%}",
                verified,
                g.get("error") or "",
            ]
        )
    markup = table(
        ["precision", "size", "throughput", "of peak", "verified", "note"],
        rows,
        ["", "num", "num", "num", "", ""],
    )
    b = check.break_even
    offload = ""
    if b:

        def _size(size: object) -> str:
            return "never, up to the largest size tried" if size is None else f"from N = {size}"

        offload = (
            f"<p>{escape(b['precision'])}, its transfers from pinned memory included, beats one "
            f"CPU thread {escape(_size(b.get('one_thread')))} and the CPU on "
            f"{escape(b['threads'])} threads {escape(_size(b.get('all_threads')))}.</p>"
        )
    return (
        f'{markup}{offload}<p class="caption">cuBLASLt, inputs random, timed with CUDA events, '
        "a sample of outputs checked in double precision; peak from the GPU's datasheet or an "
        "estimate from SMs and clock. `xferscope gemm` runs the whole study.</p>"
    )
