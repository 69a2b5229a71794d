"""Verdicts and warnings: what a run's figures mean, why, and what to change.

Each rule is a function from a run to findings. A finding names the figure that triggered it,
its value and what it was compared with, the likely cause and the fix. The rules on the run's
health (failures, the GEMM check, verification, noise and throttling) live in health.py; RULES
runs them all, in order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ..core import host
from ..core.findings import INFO, OK, SEVERITIES, WARNING, Finding
from ..core.units import format_rate
from ..sweep.records import Curve
from .health import failures, gemm_check, noisy_or_throttled, verification_failed
from .readings import figure_of, gpu_facts, largest, measured_gpus
from .records import Concurrent, RunResult

# A PCIe link delivers about 88% of its raw rate after packet overhead; below these shares of
# the raw rate a figure is worth a look.
GOOD_SHARE_OF_PCIE = 0.80
POOR_SHARE_OF_PCIE = 0.60
GOOD_SHARE_OF_HBM = 0.75
PAGEABLE_FACTOR = 1.5  # pinned this many times faster than pageable: warn
ASYMMETRY = 0.15  # H2D and D2H further apart than this: warn
DUPLEX_RATIO = 1.3  # both directions together below this times one direction: not full duplex
SHARED_LINK = 0.9  # all GPUs together below this times one GPU alone: collapse

Rule = Callable[[RunResult], Iterator[Finding]]


def _link_name(facts: dict[str, Any]) -> str:
    return f"PCIe Gen{facts.get('pcie_generation')} x{facts.get('pcie_width')}"


# ---- rules ------------------------------------------------------------------------------------


def headline_verdicts(result: RunResult) -> Iterator[Finding]:
    """Each headline figure as a share of its physical limit."""
    for gpu in measured_gpus(result):
        facts = gpu_facts(result, gpu.index)
        link = facts.get("pcie_peak_bps")
        for direction, name in (("h2d", "H2D"), ("d2h", "D2H")):
            value = largest(gpu.curve(direction, "pinned", "async", "device"))
            if value is None or not link:
                continue
            share = value / link
            severity, verdict = (
                (OK, "as good as this link gets")
                if share >= GOOD_SHARE_OF_PCIE
                else (WARNING, "well below what this link carries")
                if share < POOR_SHARE_OF_PCIE
                else (INFO, "below what this link usually carries")
            )
            yield Finding(
                "verdict",
                severity,
                gpu.index,
                figure_of(gpu.index, direction, "pinned", "async", "device"),
                value,
                link,
                f"GPU {gpu.index}: {name} from pinned memory reaches {format_rate(value)}, "
                f"{share:.0%} of the {_link_name(facts)} limit ({format_rate(link)}): {verdict}",
                ""
                if severity == OK
                else CC_CAUSE
                if _cc_on(result)
                else "something else shares or slows the link: another "
                "process's transfers, an IOMMU in translation mode, or a slow root port",
                ""
                if severity == OK
                else "expected in confidential computing mode (its note says what it cost)"
                if _cc_on(result)
                else "check the other warnings; compare with another node (xferscope compare)",
            )
        hbm = facts.get("memory_peak_bps")
        value = largest(gpu.curve("d2d", "device", "async", "device"))
        if value is not None and hbm:
            share = 2 * value / hbm
            yield Finding(
                "verdict",
                OK if share >= GOOD_SHARE_OF_HBM else INFO,
                gpu.index,
                figure_of(gpu.index, "d2d", "device", "async", "device"),
                value,
                hbm / 2,
                f"GPU {gpu.index}: device-to-device copies move {format_rate(value)} "
                f"({format_rate(2 * value)} of memory traffic, read and write), {share:.0%} of "
                f"its memory's {format_rate(hbm)}",
            )


def pageable_slow(result: RunResult) -> Iterator[Finding]:
    for gpu in measured_gpus(result):
        for direction, name in (("h2d", "H2D"), ("d2h", "D2H")):
            pageable = largest(gpu.curve(direction, "pageable", "memcpy", "api"))
            pinned = largest(gpu.curve(direction, "pinned", "memcpy", "api"))
            if not pageable or not pinned or pinned < PAGEABLE_FACTOR * pageable:
                continue
            pays = ""
            even = None if gpu.pinning is None else gpu.pinning.register_break_even
            if even is not None:
                pays = (
                    "; registering a buffer and copying it once already beats one pageable copy"
                    if even <= 1
                    else f"; registering a buffer pays for itself after {even:.1f} copies of it"
                )
            staged = largest(gpu.curve(direction, "pageable", "staged", "api"))
            if staged and staged > 1.5 * pageable:
                pays += (
                    "; or leave it pageable and copy it with xferscope's staged copy "
                    f"(xferscope.copy_to_device), which reached {format_rate(staged)} here"
                )
            yield Finding(
                "pageable_slow",
                WARNING,
                gpu.index,
                figure_of(gpu.index, direction, "pageable", "memcpy", "api"),
                pageable,
                pinned,
                f"GPU {gpu.index}: {name} from pageable memory reaches {format_rate(pageable)} "
                f"by cudaMemcpy, {pinned / pageable:.1f}x slower than from pinned memory "
                f"({format_rate(pinned)} by cudaMemcpy; both as an application times them, "
                "API time)",
                "the driver copies pageable memory through its own small pinned buffers, one "
                "chunk at a time",
                "allocate transfer buffers with cudaMallocHost (torch: pin_memory=True) or pin "
                "existing ones with cudaHostRegister" + pays,
            )


def cpu_overlap(result: RunResult) -> Iterator[Finding]:
    """Whether the CPU can work while a readback runs, pinned against pageable."""
    for gpu in result.gpus:
        by_memory = {o.memory: o for o in gpu.overlap}
        pinned, pageable = by_memory.get("pinned"), by_memory.get("pageable")
        if pinned is None or pageable is None or pageable.hidden > 0.5:
            continue
        yield Finding(
            "no_overlap",
            INFO,
            gpu.index,
            f"gpu{gpu.index}/overlap/d2h/pageable/hidden",
            pageable.hidden,
            pinned.hidden,
            f"GPU {gpu.index}: during a pinned readback the CPU did {pinned.hidden:.0%} of "
            f"{pinned.work_s * 1e3:.1f} ms of work for free; during a pageable one "
            f"{pageable.hidden:.0%}, because the call itself blocked for "
            f"{pageable.issue_s * 1e3:.1f} ms",
            "the driver copies pageable memory inside cudaMemcpyAsync, so the call returns only "
            "when the data has moved",
            "read back into pinned buffers with cudaMemcpyAsync and synchronise only when the "
            "data is needed (`xferscope overlap cpu` measures it)",
        )


def _cc_on(result: RunResult) -> bool:
    return bool((result.machine.get("confidential_computing") or {}).get("enabled"))


CC_CAUSE = (
    "confidential computing is on: the CPU encrypts every copy into bounce buffers in shared "
    "host memory and the GPU decrypts it (or the reverse), so copies run below the link"
)


def confidential_computing(result: RunResult) -> Iterator[Finding]:
    """In confidential computing mode: what it cost the measured copies, against the link."""
    if not _cc_on(result):
        return
    cc = result.machine["confidential_computing"]
    for gpu in measured_gpus(result):
        facts = gpu_facts(result, gpu.index)
        link = facts.get("pcie_peak_bps")
        h2d = largest(gpu.curve("h2d", "pinned", "async", "device"))
        d2h = largest(gpu.curve("d2h", "pinned", "async", "device"))
        if h2d is None or d2h is None or not link:
            continue
        yield Finding(
            "confidential_computing",
            INFO,
            gpu.index,
            figure_of(gpu.index, "h2d", "pinned", "async", "device"),
            h2d,
            link,
            f"GPU {gpu.index}: confidential computing is on ({cc.get('cpu_tee')}): every copy "
            "between host and GPU is encrypted and goes through bounce buffers; pinned H2D "
            f"reached {format_rate(h2d)} ({h2d / link:.0%} of the {_link_name(facts)} limit) "
            f"and D2H {format_rate(d2h)} ({d2h / link:.0%})",
            CC_CAUSE,
            "expected in this mode: move data once and keep it on the GPU, batch small copies; "
            "`xferscope compare` against a node outside confidential computing shows the cost",
        )


def link_downtrained(result: RunResult) -> Iterator[Finding]:
    for gpu in result.gpus:
        facts = gpu_facts(result, gpu.index)
        keys = ("pcie_generation", "pcie_generation_max", "pcie_width", "pcie_width_max")
        if any(facts.get(k) is None for k in keys):
            continue
        gen, gen_max, width, width_max = (int(facts[k]) for k in keys)
        if gen >= gen_max and width >= width_max:
            continue
        best = largest(gpu.curve("h2d", "pinned", "async", "device"))
        full = facts.get("pcie_peak_max_bps")
        # A link read right after traffic should be up; one that carried full speed anyway was
        # only resting when NVML read it.
        resting = best is not None and full and best >= GOOD_SHARE_OF_PCIE * full
        yield Finding(
            "link_downtrained",
            INFO if resting else WARNING,
            gpu.index,
            f"gpu{gpu.index}/pcie_link",
            float(gen * 100 + width),
            float(gen_max * 100 + width_max),
            f"GPU {gpu.index}: PCIe link at Gen{gen} x{width}, below its Gen{gen_max} "
            f"x{width_max}"
            + (" (it still reached full speed: a power-saving state)" if resting else ""),
            ""
            if resting
            else "a slot wired narrower than x16, a riser or retimer that fails "
            "at full speed, or a BIOS setting that caps the generation",
            ""
            if resting
            else "move the GPU to a full x16 slot, reseat it, check the BIOS "
            "PCIe settings; `nvidia-smi -q -d PCIE` shows the link",
        )


def numa_affinity(result: RunResult) -> Iterator[Finding]:
    process = host.cpus_of(result.machine.get("host", {}).get("process_cpus"))
    for gpu in result.gpus:
        facts = gpu_facts(result, gpu.index)
        local = host.cpus_of(facts.get("cpu_affinity"))
        if not process or not local or process <= local:
            continue
        node = facts.get("numa_node")
        far = not (process & local)
        yield Finding(
            "numa_far" if far else "affinity_mismatch",
            WARNING,
            gpu.index,
            f"gpu{gpu.index}/cpu_affinity",
            None,
            None,
            f"GPU {gpu.index} sits on NUMA node {node} (CPUs {facts.get('cpu_affinity')}), but "
            f"this process ran on CPUs {result.machine['host']['process_cpus']}"
            + (": its host memory is on another node" if far else ", not all of them near it"),
            "host buffers land on the node of the CPU that first touches them; crossing the "
            "socket link costs bandwidth and latency",
            f"run with `numactl --cpunodebind={node} --membind={node}` or set the process's CPU "
            "affinity to the GPU's CPUs (`nvidia-smi topo -m` lists them)",
        )


# A far node's figure is "slower beyond the noise" when it lies below the near node's by more
# than both points' spreads together, and by at least this share.
NUMA_LEAST_LOSS = 0.05


def numa_far_slower(result: RunResult) -> Iterator[Finding]:
    """Host memory on another NUMA node than the GPU's moves slower (nvbandwidth#53): each
    placed curve against the same curve on the GPU's own node (or, where the machine does not
    say which node that is, the fastest node); one finding per GPU and slower node, its figure
    the worst case."""
    for gpu in measured_gpus(result):
        own = gpu_facts(result, gpu.index).get("numa_node")
        by_case: dict[tuple[str, ...], dict[int, Curve]] = {}
        for curve in gpu.numa:
            c = curve.config
            if curve.points and c.numa_node is not None:
                case = (c.direction, c.memory, c.mechanism, c.timing)
                by_case.setdefault(case, {})[c.numa_node] = curve
        slower: dict[tuple[int, int], list[tuple[float, tuple[str, ...], Any, Any]]] = {}
        for key, nodes in by_case.items():
            near = own if own in nodes else max(nodes, key=lambda n: nodes[n].points[-1].bandwidth)
            best = nodes[near].points[-1]
            for node, curve in nodes.items():
                point = curve.points[-1]
                loss = 1 - point.bandwidth / best.bandwidth
                if node != near and loss > max(NUMA_LEAST_LOSS, point.rel_noise + best.rel_noise):
                    slower.setdefault((node, near), []).append((loss, key, point, best))
        for (node, near), cases in sorted(slower.items()):
            _, worst, point, best = max(cases, key=lambda c: c[0])
            where = (
                f"node {near}, the GPU's"
                if own == near
                else f"node {near}, the fastest: the machine does not say which node the GPU is on"
            )
            each = ", ".join(
                f"{d.upper()} {m} {1 - lost:.2f}x" for lost, (d, m, *_), _, _ in sorted(cases)
            )
            yield Finding(
                "numa_far_slower",
                WARNING,
                gpu.index,
                figure_of(gpu.index, worst[0], worst[1], worst[2], worst[3]) + f"/node{node}",
                point.bandwidth,
                best.bandwidth,
                f"GPU {gpu.index}: host memory on NUMA node {node} moves slower than on {where}: "
                f"{each} (worst {worst[0].upper()} from {worst[1]} memory, "
                f"{format_rate(point.bandwidth)} against {format_rate(best.bandwidth)})",
                "host memory on another socket crosses the link between the sockets, and its "
                "copies lose bandwidth there (nvbandwidth#53 saw H2D halve this way)",
                f"keep the job's host memory and threads on node {near}: `numactl "
                f"--cpunodebind={near} --membind={near} <command>`; `xferscope sweep "
                "--numa-node all` measures every placement",
            )


def asymmetry(result: RunResult) -> Iterator[Finding]:
    for gpu in measured_gpus(result):
        h2d = largest(gpu.curve("h2d", "pinned", "async", "device"))
        d2h = largest(gpu.curve("d2h", "pinned", "async", "device"))
        if not h2d or not d2h:
            continue
        gap = abs(h2d - d2h) / max(h2d, d2h)
        if gap > ASYMMETRY:
            slow = "H2D" if h2d < d2h else "D2H"
            yield Finding(
                "asymmetry",
                WARNING,
                gpu.index,
                figure_of(gpu.index, slow.lower(), "pinned", "async", "device"),
                min(h2d, d2h),
                max(h2d, d2h),
                f"GPU {gpu.index}: H2D {format_rate(h2d)} against D2H {format_rate(d2h)}, "
                f"{slow} {gap:.0%} slower",
                "reads and writes take different paths: PCIe relaxed ordering off, a small "
                "maximum read request, or an IOMMU translating every DMA",
                "enable relaxed ordering and IOMMU pass-through (iommu=pt) in the BIOS and "
                "kernel; compare with a node of the same kind",
            )


def concurrency_collapse(result: RunResult) -> Iterator[Finding]:
    sets: list[tuple[int | None, Concurrent]] = [
        (g.index, c) for g in result.gpus for c in g.concurrent
    ]
    sets += [(None, c) for c in result.multi if c.kind == "all_gpus_host"]
    for gpu, c in sets:
        alones = [s.alone_bandwidth for s in c.streams if s.alone_bandwidth]
        if c.status != "complete" or len(c.streams) < 2 or not alones:
            continue
        best_alone, total = max(alones), c.total_bandwidth
        if c.kind == "bidirectional" and total < DUPLEX_RATIO * best_alone:
            yield Finding(
                "concurrency_collapse",
                WARNING,
                gpu,
                f"gpu{gpu}/concurrent/{c.label}/total_bandwidth",
                total,
                2 * best_alone,
                f"GPU {gpu}: H2D and D2H together move {format_rate(total)}, barely more than "
                f"one direction alone ({format_rate(best_alone)}): the link is not carrying "
                "both directions at once",
                "one copy engine serving both directions, or a host bridge that serialises "
                "reads and writes",
                "issue the two directions on separate streams; check the platform's PCIe settings",
            )
        elif c.kind == "all_gpus_host" and total < SHARED_LINK * best_alone:
            yield Finding(
                "concurrency_collapse",
                WARNING,
                None,
                f"multi/{c.label}/total_bandwidth",
                total,
                best_alone,
                f"all GPUs together ({c.label}) move {format_rate(total)}, less than one GPU "
                f"alone ({format_rate(best_alone)})",
                "the GPUs share an upstream link or switch that gives way under load",
                "spread the GPUs over root ports (`nvidia-smi topo -m`) or stagger transfers",
            )


RULES: tuple[Rule, ...] = (
    failures,
    gemm_check,
    verification_failed,
    headline_verdicts,
    link_downtrained,
    numa_affinity,
    numa_far_slower,
    pageable_slow,
    cpu_overlap,
    asymmetry,
    concurrency_collapse,
    noisy_or_throttled,
    confidential_computing,
)


def diagnose(result: RunResult) -> list[Finding]:
    """Every rule's findings, the gravest first."""
    findings = [f for rule in RULES for f in rule(result)]
    rank = {s: i for i, s in enumerate(SEVERITIES)}
    return sorted(findings, key=lambda f: -rank[f.severity])
