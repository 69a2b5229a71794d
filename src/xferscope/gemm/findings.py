"""The findings of `xferscope gemm`, each a sentence with its figures: points that failed or
gave a wrong result; per precision the best throughput and its share of the GPU's peak, seed 003's
alignment classes and the measured gain of padding, the transfers' cost (seed 003's 0.95/0.87
ratios) and the size from which it falls below 5%, the CPU's scaling (seed 003's Figure 9), and
the sizes from which offloading to the GPU pays."""

from __future__ import annotations

from ..core.findings import INFO, WARNING, Finding
from .records import ELEMENT_BYTES, GemmPoint, GemmResult, classes


def findings(result: GemmResult) -> list[Finding]:
    out: list[Finding] = []
    for p in result.points:
        label = f"{p.precision} {p.shape.label}"
        if p.status == "failed":
            out.append(
                Finding(
                    "gemm_failed",
                    WARNING,
                    result.device,
                    label,
                    None,
                    None,
                    f"{label}: {p.error}",
                    "",
                    "",
                )
            )
        elif p.verified is False:
            v = p.verification or {}
            out.append(
                Finding(
                    "gemm_unverified",
                    WARNING,
                    result.device,
                    label,
                    float(v.get("worst_error", 0.0)),
                    None,
                    f"{label}: {v.get('failures')} of {v.get('samples')} sampled outputs differ "
                    f"from the double-precision reference beyond the tolerance (worst at "
                    f"[{v.get('worst_row')}, {v.get('worst_column')}])",
                    "a wrong result: a failing GPU or memory, or a library fault",
                    "rerun; if it repeats, check `nvidia-smi -q` for ECC and Xid errors",
                )
            )
    unsettled = [p for p in result.points if p.settled is False]
    if unsettled:
        worst = max(unsettled, key=lambda p: p.spread)
        out.append(
            Finding(
                "gemm_unsettled",
                WARNING,
                result.device,
                f"{len(unsettled)} unsettled",
                worst.spread,
                None,
                f"{len(unsettled)} GEMM(s) never ran at a steady rate, even after "
                f"{worst.warmup_s or 0:.1f} s of warm-up (worst: {worst.precision} "
                f"{worst.shape.label}, trials spread {worst.spread:.0%})",
                "the GPU's clocks kept moving: its power limit or temperature, or other work "
                "on the GPU",
                "check `nvidia-smi -q -d PERFORMANCE` for the clock event reasons and rerun on an "
                "idle GPU; compare figures only with others measured the same way",
            )
        )
    out += _cpu_findings(result)
    out += _transfer_findings(result)
    for precision in dict.fromkeys(p.precision for p in result.points):
        table = classes(result, precision)
        best = result.best(precision)
        if best is not None and best.flops:
            ceiling = result.peak(precision)
            share = ""
            if ceiling is not None:
                kind = "an estimated" if ceiling.estimate else "the spec's"
                share = (
                    f", {best.flops / ceiling.flops:.0%} of {kind} peak "
                    f"{ceiling.flops / 1e12:.1f} TFLOP/s ({ceiling.source})"
                )
            out.append(
                Finding(
                    f"gemm_best_{precision}",
                    INFO,
                    result.device,
                    f"{precision} best",
                    best.flops,
                    None if ceiling is None else ceiling.flops,
                    f"{precision}: best {best.flops / 1e12:.1f} TFLOP/s at {best.shape.label}"
                    + share,
                )
            )
        out += _padding(result, precision)
        if len(table) > 1:
            (top, top_flops, _), (low, low_flops, _) = table[0], table[-1]
            if low_flops > 0:
                out.append(
                    Finding(
                        f"gemm_alignment_{precision}",
                        INFO,
                        result.device,
                        f"{precision} alignment",
                        top_flops / low_flops,
                        None,
                        f"{precision}: shapes divisible by {top} run at {top_flops / 1e12:.1f} "
                        f"TFLOP/s on average, {top_flops / low_flops:.2f}x those divisible only "
                        f"by {low} ({low_flops / 1e12:.1f})",
                        ""
                        if top_flops / low_flops < 1.1
                        else "poorly aligned shapes fall off the fastest kernels",
                        ""
                        if top_flops / low_flops < 1.1
                        else f"pad M, N and K to multiples of {top}",
                    )
                )
    return out


def _padding(result: GemmResult, precision: str) -> list[Finding]:
    """Whether padding poorly aligned shapes to a good multiple pays, its copies included."""
    padded = [p for p in result.measured(precision) if p.pad_gain is not None]
    if not padded:
        return []
    pad = result.options.get("pad") or 0
    pays = [p for p in padded if (p.pad_gain or 0.0) > 1.0]
    gains = sorted(p.pad_gain or 0.0 for p in padded)
    best = max(padded, key=lambda p: p.pad_gain or 0.0)
    worst = min(padded, key=lambda p: p.pad_gain or 0.0)
    span = f"{gains[0]:.2f}x" if len(gains) == 1 else f"{gains[0]:.2f}x to {gains[-1]:.2f}x"
    message = (
        f"{precision}: padding {len(padded)} shape(s) to multiples of {pad}, copies in and out "
        f"included, runs {span} as fast as the shape itself; it pays for {len(pays)} of them"
    )
    if pays:
        message += f" (most at {best.shape.label}: {best.pad_gain:.2f}x)"
    if len(pays) < len(padded):
        message += f", and costs most at {worst.shape.label} ({worst.pad_gain:.2f}x)"
    paying = bool(pays) and (best.pad_gain or 0.0) > 1.05
    return [
        Finding(
            f"gemm_padding_{precision}",
            INFO,
            result.device,
            f"{precision} padding",
            best.pad_gain,
            None,
            message,
            "poorly aligned shapes fall off cuBLASLt's fastest kernels" if paying else "",
            f"pad M, N and K to multiples of {pad} where the table shows a gain" if paying else "",
        )
    ]


# Transfers that cost less than this share of the time are "paid for" (the 5%).
TRANSFER_SHARE = 0.05


def _transfer_findings(result: GemmResult) -> list[Finding]:
    """Seed 003's ratios with and without transfers (at the largest size of the study), the
    size from which they cost less than 5% (over the study and the offload ladder), and where
    the GPU with its transfers overtakes the CPU."""
    out = []
    for precision in result.precisions:
        study = sorted(
            (p for p in result.measured(precision) if p.transfers), key=lambda p: p.shape.flops
        )
        ladder = [p for p in result.ladder if p.precision == precision and p.flops and p.verified]
        every = sorted(
            {p.shape: p for p in (*ladder, *study)}.values(), key=lambda p: p.shape.flops
        )
        for memory in dict.fromkeys(t["memory"] for p in every for t in p.transfers):
            big = study[-1] if study else None
            seq = None if big is None else big.transfer_flops(memory, False)
            if big is not None and big.flops and seq:
                tiled = big.transfer_flops(memory, True)
                tiles = next((t["tiles"] for t in big.transfers if t["tiles"] > 1), None)
                extra = f", {tiled / big.flops:.2f} in {tiles} tiles" if tiled and tiles else ""
                out.append(
                    Finding(
                        f"gemm_transfers_{precision}_{memory}",
                        INFO,
                        result.device,
                        f"{precision} {memory}",
                        seq / big.flops,
                        None,
                        f"{precision} at {big.shape.label} with its data from {memory} memory: "
                        f"{seq / big.flops:.2f} of compute-only in sequence{extra}",
                    )
                )
            paid = None
            for p in reversed(every):
                rate = p.transfer_flops(memory)
                if not (p.flops and rate and rate >= (1 - TRANSFER_SHARE) * p.flops):
                    break
                paid = p
            largest = every[-1]
            rate = largest.transfer_flops(memory)
            if paid is not None:
                message = (
                    f"{precision}: from {paid.shape.label} on, moving the data from {memory} "
                    f"memory costs less than {TRANSFER_SHARE:.0%} of the time"
                )
            elif rate and largest.flops:
                message = (
                    f"{precision}: moving the data from {memory} memory costs more than "
                    f"{TRANSFER_SHARE:.0%} of the time at every size measured (at "
                    f"{largest.shape.label}: {1 - rate / largest.flops:.0%})"
                )
                size, fits = _paid_from(result, largest, rate)
                if size is not None:
                    message += (
                        f"; scaling as N^2 against N^3, it would fall below {TRANSFER_SHARE:.0%} "
                        f"from about N = {size:,} (extrapolated), "
                        + ("which fits in this GPU's memory" if fits else "too large for this GPU")
                    )
            else:
                continue
            out.append(
                Finding(
                    f"gemm_transfers_paid_{precision}_{memory}",
                    INFO,
                    result.device,
                    f"{precision} {memory}",
                    None if paid is None else float(paid.shape.m),
                    None,
                    message,
                )
            )
        out += _break_even(result, precision)
    return out


def _paid_from(result: GemmResult, p: GemmPoint, rate: float) -> tuple[int | None, bool]:
    """The square size from which moving the data would cost less than TRANSFER_SHARE of the
    time, extrapolated from one point (the copies grow as N^2, the GEMM as N^3), and whether
    its matrices (A, B, C, D) would fit in the GPU's memory."""
    if not p.flops or rate >= p.flops or p.shape.m != p.shape.n or p.shape.n != p.shape.k:
        return None, False
    ratio = p.flops / rate - 1  # copy time over compute time at this size
    size = int(p.shape.m * ratio * (1 - TRANSFER_SHARE) / TRANSFER_SHARE)
    inputs, output = ELEMENT_BYTES[p.precision]
    memory = int(result.gpu.get("total_memory_bytes") or 0)
    return size, size * size * 2 * (inputs + output) <= memory


def _break_even(result: GemmResult, precision: str) -> list[Finding]:
    """The smallest size at which the GPU, its transfers from pinned memory included, beats the
    CPU on all its threads, and on one: over the offload ladder and the study's own sizes."""
    cpu = [c for c in result.cpu if c.precision == precision and c.flops]
    if not cpu:
        return []
    most = max(c.threads for c in cpu)
    out = []
    for threads in dict.fromkeys((most, 1)):
        words = "one CPU thread" if threads == 1 else f"the CPU on {threads} threads"
        pairs, first = result.offload(precision, threads)
        if not pairs:
            continue
        if first is None:
            message = (
                f"{precision}: the GPU with its transfers from pinned memory never beat {words} "
                f"at the sizes measured (up to {pairs[-1][0].label})"
            )
        else:
            shape, cpu_rate, rate = pairs[first]
            message = (
                f"{precision}: the GPU, its transfers from pinned memory included, beats {words} "
                f"from {shape.label} on ({rate / 1e9:.0f} against {cpu_rate / 1e9:.0f} GFLOP/s)"
            )
            if first > 0:
                below, below_cpu, below_gpu = pairs[first - 1]
                ahead = below_cpu / max(below_gpu, 1e-30)
                message += f"; at {below.label} the CPU is {ahead:.1f}x as fast"
            else:
                message += ", the smallest size compared"
        out.append(
            Finding(
                f"gemm_break_even_{precision}_{threads}",
                INFO,
                result.device,
                f"{precision} break-even",
                None if first is None else float(pairs[first][0].m),
                None,
                message,
            )
        )
    return out


def _cpu_findings(result: GemmResult) -> list[Finding]:
    """Seed 003's Figure 9 in a sentence per precision, and the GPU against the whole CPU."""
    out = []
    blas = (result.cpu_blas or {}).get("internal_api") or "the BLAS"
    scaling = [c for c in result.cpu if c.flops and c.role == "scaling"]
    for precision in dict.fromkeys(c.precision for c in scaling):
        done = [c for c in scaling if c.precision == precision]
        biggest = max(done, key=lambda c: c.shape.flops).shape
        at = sorted((c for c in done if c.shape == biggest), key=lambda c: c.threads)
        one, every = at[0], at[-1]
        scale = (every.flops or 0.0) / (one.flops or 1.0)
        out.append(
            Finding(
                f"gemm_cpu_{precision}",
                INFO,
                None,
                f"{precision} CPU",
                every.flops,
                one.flops,
                f"{precision} on the CPU ({blas}) at {biggest.label}: {(one.flops or 0) / 1e9:.0f} "
                f"GFLOP/s on {one.threads} thread, {(every.flops or 0) / 1e9:.0f} on "
                f"{every.threads} ({scale:.1f}x, {scale / max(every.threads, 1):.0%} per thread)",
            )
        )
        gpu = [p for p in result.measured(precision) if p.shape == biggest]
        if gpu and gpu[0].flops and every.flops:
            out.append(
                Finding(
                    f"gemm_gpu_vs_cpu_{precision}",
                    INFO,
                    result.device,
                    f"{precision} GPU/CPU",
                    gpu[0].flops / every.flops,
                    None,
                    f"{precision} at {biggest.label}: the GPU computes "
                    f"{gpu[0].flops / every.flops:.0f}x as fast as the CPU on {every.threads} "
                    "threads (transfers not counted)",
                )
            )
    return out
