"""What `xferscope checkpoint` prints: the checkpoint, each stage of its path and each load
(medians of the repeats), and the bound each load hit."""

from __future__ import annotations

from rich.console import Console

from ..checkpoint.records import STAGES, STATES, CheckpointResult
from ..core.units import format_bytes, format_rate, format_seconds
from .style import print_findings, print_simulated, titled_table

# what each stage's rate is, as the table says it
STAGE_WORDS = {
    "disk": "threads of pread, the page cache dropped",
    "page cache": "threads of pread, every page resident",
    "headers": "the headers read and checked: the data's bytes over their time",
    "host memory": "threads of memcpy between host buffers",
    "link": "pinned host-to-GPU copies, device time",
}
# what to do about each bound
ADVICE = {
    "disk": "a faster disk or more of them (RAID 0, NVMe); keep the files in the page cache "
    "between runs",
    "page cache": "fewer, larger files; the page cache's read is a memcpy in the kernel",
    "headers": "fewer, larger tensors (an MoE's experts stacked into one tensor a layer): "
    "each tensor's header entry and view cost Python microseconds",
    "host memory": "fewer host copies: pinned memory the files are read into directly",
    "link": "the link is the limit: a wider or newer one, or several GPUs loading their "
    "shards at once (xferscope.load(..., device=device_map))",
}


def print_checkpoint(result: CheckpointResult, console: Console) -> None:
    if result.simulated:
        print_simulated(console)
    gpu = next((g.get("name") for g in result.machine.get("gpus", [])), "?")
    tensors = sum(f.tensors for f in result.files)
    console.print(
        f"Checkpoint to GPU {result.device} ({gpu}): {len(result.files)} file"
        f"{'' if len(result.files) == 1 else 's'}, {tensors} tensors, "
        f"{format_bytes(result.data_bytes)} of data (medians of "
        f"{result.options.get('repeats')} repeats)"
    )
    stages = titled_table("the path's stages", ("stage", "rate", "how"), ("stage", "how"))
    for stage, how in STAGE_WORDS.items():
        rate = result.rate(stage)
        if rate is not None:
            stages.add_row(stage, format_rate(rate), how)
    console.print(stages)
    columns = ("from", "time", "rate", "bound", "of the bound")
    loads = titled_table("xferscope.load", columns, ("from", "bound"))
    bounds = {b.state: b for b in result.bounds()}
    for state in STATES:
        seconds = result.medians().get(f"load_{state}_s")
        if seconds is None or state not in bounds:
            continue
        b = bounds[state]
        loads.add_row(state, format_seconds(seconds), format_rate(b.load_bps), b.stage,
                      f"{b.share:.0%}")  # fmt: skip
    console.print(loads)
    for b in bounds.values():
        others = ", ".join(s for s in STAGES[b.state] if s != b.stage)
        console.print(
            f"{b.state}: bound by the {b.stage} ({format_rate(b.stage_bps)}; {others} are "
            f"faster): the load reaches {b.share:.0%} of it. To go faster: {ADVICE[b.stage]}."
        )
    if result.verified is None and not result.interrupted:
        console.print("The load's bytes were not checked (the simulated engine moves none).")
    print_findings(result.findings, console)
