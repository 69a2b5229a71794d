"""`xferscope sweep`: bandwidth and latency against size, one curve per configuration."""

from __future__ import annotations

from typing import Any

import click

from ..core import cases, limits, plan
from ..core.cases import HOST_MEMORY, TIMINGS
from ..core.engine import Engine
from ..core.engine.placement import numa_nodes, numa_refusal
from ..core.errors import OptionError
from ..core.units import (
    format_bytes,
    parse_counts,
    parse_devices,
    parse_list,
    parse_size_option,
    parse_sizes,
)
from ..sweep.measure import prepare_sweep, run_sweep
from ..sweep.options import DIRECTIONS, SweepOptions
from ..sweep.records import SCHEMA_NAME as SWEEP_SCHEMA
from ..sweep.records import SweepResult, from_dict, to_dict
from .app import cli, described, stdout
from .common import parse_seed, sweep_plots
from .measured import DocumentKind, Measurement, register, run_measurement
from .options import (
    direction_option,
    flag,
    gpu_option,
    measured_options,
    mechanism_option,
    memory_option,
    names_option,
    option,
    target_time_option,
    trials_option,
)
from .outputs import Destination, Named, Output, text

# ---- sweep -------------------------------------------------------------------------------------

# `--alignment`: offsets that are multiples of nothing (1), of 4 and 16 but not 64, of 64 but
# not a page, and the last byte of a page; sizes from latency-bound to bandwidth-bound.
ALIGNMENT_HOST_OFFSETS = (0, 1, 4, 16, 64, 512, 4095)
ALIGNMENT_DEVICE_OFFSETS = (0, 1)
ALIGNMENT_SIZES = (4096, 65536, 1 << 20, 16 << 20)
APIS = ("runtime", "driver")  # `--api`: the CUDA runtime's copies, the driver API's, or both


@cli.command(
    **described(
        "Bandwidth and latency against size, one curve per configuration.",
        "xferscope sweep --min-size 1MiB --max-size 1GiB --csv 1mib-1gib.csv --plot 1mib-1gib",
        "xferscope sweep --mechanism async --timing device -m pageable,pinned,wc,registered",
        "xferscope sweep -d roundtrip -m pageable,pinned --max-size 64MiB --perturbation 3",
    )
)
@direction_option(
    DIRECTIONS, "h2d,d2h", f"Directions, comma-separated: {', '.join(DIRECTIONS)}.", short=True
)
@memory_option(
    HOST_MEMORY,
    "pageable,pinned",
    f"Host memory kinds: {', '.join(HOST_MEMORY)} (d2d always uses device memory).",
)
@mechanism_option(
    "memcpy",
    "memcpy (synchronous cudaMemcpy), async (cudaMemcpyAsync: copy engines), "
    "kernel (SM copy kernel), staged (pageable memory through xferscope's pinned staging "
    "pool and host threads), driver (cuMemcpyHtoD/DtoH/DtoD), driver-async (their Async "
    "forms).",
)
@names_option(
    "--api",
    accepted=APIS,
    default="runtime",
    help="runtime, driver, or both: driver measures memcpy and async by the driver API's "
    "cuMemcpy calls instead (NetPIPE's cuMemcpy module); both draws them on the same curves.",
)
@names_option(
    "--timing",
    accepted=TIMINGS,
    default="api",
    help="api (host clock around calls that complete, as an application sees them), "
    "device (CUDA events around copies held behind a blocking kernel).",
)
@gpu_option("GPU indices, comma-separated.")
@option("--sizes", help="Explicit sizes, comma-separated (overrides the range).")
@option("--min-size", help="Smallest size of the range [default: 1].")
@option("--max-size", help="Largest size of the range [default: 1GiB].")
@option("--steps", bounds=limits.STEPS, help="Sizes per doubling [default: 1].")
@option(
    "--perturbation",
    help="NetPIPE's p: also measure c-p and c+p bytes around each size c [default: 0].",
)
@target_time_option(
    None,
    f"Seconds one trial lasts [default: {plan.DEFAULT_TARGET_S}; "
    f"{plan.QUICK_TARGET_S} with --quick].",
)
@trials_option(
    plan.DEFAULT_TRIALS,
    "Trials per size (more, up to --max-trials, while noisier than --noise-bound).",
)
@option("--max-trials", bounds=limits.TRIALS, help="Most trials per size [default: 2 x --trials].")
@option(
    "--noise-bound",
    default=plan.DEFAULT_NOISE_BOUND,
    bounds=limits.NOISE_BOUND,
    help="Relative noise (1.4826 MAD / median) under which a size needs no more trials.",
)
@option(
    "--budget",
    bounds=limits.BUDGET,
    help=f"Most seconds one curve may take; trials shorten to fit and sizes that still "
    f"do not fit are cut short and labelled. 0 = no limit "
    f"[default: {plan.DEFAULT_BUDGET_S:g}; {plan.QUICK_BUDGET_S:g} with --quick].",
)
@option(
    "--cache",
    type=click.Choice(["cold", "warm"]),
    default="cold",
    help="cold: copies of 64 KiB and more rotate through buffers larger than the GPU and CPU "
    "caches; warm: every copy reuses one buffer, as a loop over one array does (labelled "
    "cache-resident).",
)
@flag("--quick", help="Short trials and a small budget: a first look in seconds.")
@option(
    "--host-offset",
    default="0",
    help="Bytes past a page-aligned start at which every copy's host buffer begins, "
    "comma-separated, 0 to 4095: one curve per offset (0, the aligned reference, always "
    "included).",
)
@option(
    "--device-offset",
    default="0",
    help="The same for the device buffer: host and device offsets are measured in every "
    "combination.",
)
@flag(
    "--alignment",
    help=f"The alignment study: host offsets {','.join(map(str, ALIGNMENT_HOST_OFFSETS))} and "
    f"device offsets {','.join(map(str, ALIGNMENT_DEVICE_OFFSETS))} (unless given), sizes "
    f"{','.join(format_bytes(s) for s in ALIGNMENT_SIZES)} (unless given), and what "
    "misalignment costs per size.",
)
@option(
    "--rounds",
    bounds=limits.ROUNDS,
    help="Measure every curve this many times, in alternating order, and pool the trials, so "
    "drift during the run falls on every curve alike [default: 1; 2 with --alignment].",
)
@option(
    "--numa-node",
    default=None,
    help="Place the host memory, and the thread that copies it, on these NUMA nodes in turn "
    "(comma-separated, or all): one curve per node, as numactl --cpunodebind=N --membind=N "
    "would [default: where the operating system puts them].",
)
@flag(
    "--chase",
    help="Also the latency seen from the GPU: one GPU thread's dependent reads through 256 MiB "
    "of each memory swept that a GPU thread can read, and of device memory, in ns per read.",
)
@flag("--no-verify", help="Skip checking the destination after each size.")
@measured_options("sweep", "PREFIX-bandwidth.png and PREFIX-latency.png", gpu=None)
@click.pass_context
def sweep(ctx: click.Context, /, **kw: Any) -> None:
    """Bandwidth and latency against transfer size, one curve per configuration (NetPIPE's
    method: log-scale sizes, repeats sized to a target time, several trials per size)."""
    if kw["alignment"]:
        preset = {
            "host_offset": ",".join(map(str, ALIGNMENT_HOST_OFFSETS)),
            "device_offset": ",".join(map(str, ALIGNMENT_DEVICE_OFFSETS)),
        }
        for name, value in preset.items():
            if ctx.get_parameter_source(name) is click.core.ParameterSource.DEFAULT:
                kw[name] = value
        range_options = ("sizes", "min_size", "max_size", "steps", "perturbation")
        if all(kw[name] is None for name in range_options):
            kw["sizes"] = ",".join(map(str, ALIGNMENT_SIZES))
    options = build_sweep_options(kw)
    sizes_from = "--sizes" if kw["sizes"] is not None else "--max-size"
    blame = "--steps" if kw["steps"] is not None else sizes_from

    def plan(engine: Engine) -> Measurement[SweepResult]:
        planned = prepare_sweep(engine, options, sizes_from, blame)
        steps = len(planned.configs) * len(options.sizes) * options.rounds
        return Measurement(lambda bar: run_sweep(engine, options, bar, planned), steps)

    run_measurement(SWEEP, kw, plan)


def sweep_named(kw: dict[str, Any] | None = None) -> dict[str, Named]:
    """The sweep's files: where the options put them (kw None: the default names)."""
    from ..report.style import PLOTS

    kw = kw or {}
    return {
        "json": Named("--json", kw.get("json_path"), "sweep.json"),
        "csv": Named("--csv", kw.get("csv_path"), "sweep.csv"),
        "plot": Named("--plot", kw.get("plot_prefix"), "sweep", tuple(f"-{w}.png" for w in PLOTS)),
    }


def sweep_measured(result: SweepResult) -> bool:
    return any(c.points for c in result.curves)


def sweep_outputs(result: SweepResult, dest: Destination) -> list[Output]:
    """JSON, CSV, and the bandwidth and latency plots."""
    from ..documents import csv as csv_export
    from ..documents import json as json_export

    return [
        dest.output("json", text(lambda: json_export.dumps(result))),
        dest.output("csv", text(lambda: csv_export.dumps(result))),
        *(
            dest.output("plot", drawn, f"-{what}.png", render=True)
            for what, drawn in sweep_plots(result)
        ),
    ]


def build_sweep_options(kw: dict[str, Any]) -> SweepOptions:
    range_options = ("min_size", "max_size", "steps", "perturbation")
    if kw["sizes"] is not None:
        if any(kw[name] is not None for name in range_options):
            raise OptionError(
                "--sizes",
                "give either --sizes or a range (--min-size, --max-size, "
                "--steps, --perturbation), not both",
            )
        sizes = parse_sizes("--sizes", kw["sizes"])
    else:
        low = parse_size_option("--min-size", kw["min_size"] or str(plan.DEFAULT_MIN_SIZE))
        high = parse_size_option("--max-size", kw["max_size"] or str(plan.DEFAULT_MAX_SIZE))
        if high < low:
            raise OptionError(
                "--max-size", f"{format_bytes(high)} is smaller than --min-size {format_bytes(low)}"
            )
        steps = 1 if kw["steps"] is None else kw["steps"]
        perturbation = 0
        if kw["perturbation"] not in (None, "0"):
            perturbation = parse_size_option("--perturbation", kw["perturbation"])
        sizes = tuple(plan.log_sizes(low, high, steps, perturbation))
    quick = kw["quick"]
    target = (
        kw["target_time"]
        if kw["target_time"] is not None
        else (plan.QUICK_TARGET_S if quick else plan.DEFAULT_TARGET_S)
    )
    budget = (
        kw["budget"]
        if kw["budget"] is not None
        else (plan.QUICK_BUDGET_S if quick else plan.DEFAULT_BUDGET_S)
    )
    trials = kw["trials"]
    return SweepOptions(
        directions=kw["direction"],
        memories=kw["memory"],
        mechanisms=with_api(kw["mechanism"], kw["api"]),
        timings=kw["timing"],
        devices=parse_devices("--device", kw["device"]),
        sizes=sizes,
        target_s=target,
        trials=trials,
        max_trials=kw["max_trials"] if kw["max_trials"] is not None else 2 * max(trials, 1),
        noise_bound=kw["noise_bound"],
        budget_s=None if budget == 0 else budget,
        seed=parse_seed(kw["seed"]),
        cache=kw["cache"],
        verify=not kw["no_verify"],
        quick=quick,
        rounds=kw["rounds"] if kw["rounds"] is not None else (2 if kw["alignment"] else 1),
        host_offsets=parse_offsets("--host-offset", kw["host_offset"]),
        device_offsets=parse_offsets("--device-offset", kw["device_offset"]),
        numa_nodes=parse_numa_nodes(kw["numa_node"]),
        chase=kw["chase"],
    )


def parse_numa_nodes(text: str | None) -> tuple[int, ...]:
    """--numa-node: node numbers, or all of this host's; each one the host has."""
    if text is None:
        return ()
    if text.strip() == "all":
        nodes = tuple(numa_nodes())
        if not nodes:
            raise OptionError(
                "--numa-node", "this host lists no NUMA nodes (/sys/devices/system/node)"
            )
        return nodes
    try:
        nodes = parse_counts("--numa-node", text, 0)
    except OptionError as exc:
        said = str(exc).removeprefix("--numa-node: ")
        raise OptionError("--numa-node", f"{said} (or all: every node)") from None
    for node in nodes:
        why = numa_refusal(node)
        if why:
            raise OptionError("--numa-node", why)
    return tuple(nodes)


def parse_offsets(option: str, text: str) -> tuple[int, ...]:
    """Byte offsets 0..4095, with 0 (the aligned reference) always among them."""
    most = int(cases.LIMITS["most_offset"])
    offsets = parse_counts(option, text, 0)
    if offsets[-1] > most:
        raise OptionError(option, f"{offsets[-1]} is not an offset from 0 to {most} bytes")
    return tuple(sorted({0, *offsets}))


def _unverified(result: SweepResult) -> bool:
    return any(
        p.verification is not None and not p.verification.ok
        for c in result.curves
        for p in c.points
    )


SWEEP: DocumentKind[SweepResult] = DocumentKind(
    "sweep",
    from_dict,
    lambda r: _print_sweep(r),
    sweep_named,
    sweep_outputs,
    document=to_dict,
    # a sweep cut short before its first point is nothing; one whose curves all failed says so
    measured=lambda r: sweep_measured(r) or not r.interrupted,
    failed=lambda r: any(c.status == "failed" for c in r.curves),
    unverified=_unverified,
)
register(SWEEP_SCHEMA, SWEEP)


def _print_sweep(result: SweepResult) -> None:
    from ..report.sweep_tables import print_report

    print_report(result, stdout)


DRIVER_FORMS = {"memcpy": "driver", "async": "driver-async"}


def with_api(mechanisms: tuple[str, ...], api: str | tuple[str, ...]) -> tuple[str, ...]:
    """The mechanisms `--api` asks for (its names, or their text): the runtime's, their
    driver-API forms, or both."""
    apis = parse_list("--api", api, APIS) if isinstance(api, str) else api
    if "driver" in apis and not any(m in DRIVER_FORMS for m in mechanisms):
        raise OptionError(
            "--api", "driver needs --mechanism memcpy or async (the driver API's cuMemcpy forms)"
        )
    out: list[str] = []
    for m in mechanisms:
        if "runtime" in apis or m not in DRIVER_FORMS:
            out.append(m)
        if "driver" in apis and m in DRIVER_FORMS:
            out.append(DRIVER_FORMS[m])
    return tuple(dict.fromkeys(out))
