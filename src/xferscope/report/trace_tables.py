"""What `xferscope trace` prints: nvprof's table (Time%, Time, Calls, Avg, Min, Max
per kind of copy), the copies per direction and host memory against what this machine reaches,
and the fixes, priced, the largest saving first."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from rich.console import Console
from rich.markup import escape

from ..core.units import format_bytes, format_rate, format_seconds
from ..trace.analyze import WORTH
from ..trace.document import TraceResult, steady_s
from ..trace.findings.base import counted
from ..trace.findings.runs import SMALL_BYTES
from ..trace.idle import LONG_GAP
from ..trace.records import shown
from .style import titled_table

IDLE_KINDS = {
    "launch": "between launches",
    "blocked": "blocked in {function}",
    "away": "away from CUDA",
    "after_wait": "after a wait for the GPU at {waited}, away from CUDA",
}


def cause_text(cause: dict[str, Any]) -> str:
    """An idle cause in words: what it was, at which line, in how many gaps."""
    function, _, line = (cause.get("waited_at") or "").partition(" at ")
    waited = f"{function} at {shown(line)}" if line else function
    what = IDLE_KINDS.get(cause["kind"], cause["kind"]).format(
        function=cause["function"], waited=waited
    )
    if cause["kind"] in ("away", "after_wait") and cause["function"]:
        what += f", back with {cause['function']}"
    where = cause["where"]
    where = f" {where}" if where.startswith("(") else f" at {shown(where)}" if where else ""
    said = f"{what}{where}, {cause['gaps']} gap{'' if cause['gaps'] == 1 else 's'}"
    return said + seen_text(cause)


def seen_text(cause: dict[str, Any]) -> str:
    """Where the looks at the main thread saw it during an idle cause's time, if any did."""
    looks = cause.get("looks") or 0
    seen = [(where, n) for where, n in cause.get("seen_at") or () if where]
    if not looks or not seen:
        return ""
    return "; the main thread meanwhile at " + ", ".join(
        f"{shown(where)} ({n / looks:.0%})" for where, n in seen
    )


def idle_lines(gpu: dict[str, Any], most: int = 4) -> list[str]:
    """A GPU's idle time by cause, a line each, the largest first: what it was, at which line."""
    idle = gpu.get("idle_s") or 0.0
    return [
        f"idle {format_seconds(c['seconds'])} ({c['seconds'] / idle if idle else 0.0:.0%} of "
        f"it) {cause_text(c)}"
        for c in gpu.get("idle", [])[:most]
    ]


def straggler_line(late: dict[str, Any], ranks: list[dict[str, Any]]) -> str:
    """The rank the others waited for, how long, and why it came late: its GPU's largest
    idle."""
    waited = max(r["waited_s"] for r in ranks)
    said = (
        f"GPU {late['device']} (pid {late['pid']}) made the others wait: they spent up to "
        f"{format_seconds(waited)} more in NCCL's kernels"
    )
    cause = late.get("cause")
    if not cause:
        return said
    return f"{said}; its GPU sat idle {format_seconds(cause['seconds'])} {cause_text(cause)}"


ROUNDS_TO_1 = 0.005  # a share shown as a whole percent reads 1% or more from this


def startup_text(s: dict[str, Any]) -> str:
    """A process's start-up in one line: how long before its first step, the GPU's idle in it
    and where the main thread was, its uploads and what one pinned copy of them would save, and
    its pinning (those two where they are WORTH of the start-up)."""
    said = f"{format_seconds(s['seconds'])} to the first step (once a run)"
    if s["cuda_s"] >= 0.05:
        said += f"; CUDA initialized at {format_seconds(s['cuda_s'])}"
    if s.get("first_work_s") is not None and s["idle_s"] > 0:
        said += f"; the GPU idle {format_seconds(s['idle_s'])} after its first work"
    looks = s.get("looks") or 0
    if looks:
        seen = []  # what the looks found, each where it rounds to 1% or more
        if s.get("importing", 0) / looks >= ROUNDS_TO_1:
            seen.append(f"importing modules ({s['importing'] / looks:.0%})")
        seen += [f"at {shown(w)} ({n / looks:.0%})" for w, n in s.get("seen_at") or ()
                 if w and n / looks >= ROUNDS_TO_1]  # fmt: skip
        if seen:
            said += "; the main thread meanwhile " + ", ".join(seen)
    if s.get("uploads"):
        said += (
            f"; {s['uploads']} upload{'' if s['uploads'] == 1 else 's'} "
            f"({format_bytes(s['upload_bytes'])}) cost {format_seconds(s['upload_s'])}"
        )
        if s.get("pageable_uploads"):
            said += f", {s['pageable_uploads']} from pageable memory"
        # what one copy would save, where it is WORTH of the start-up (a few microseconds of
        # a 7 s start-up is nothing to act on)
        if (s.get("saving_s") or 0.0) >= WORTH * s["seconds"]:
            said += (
                f": one copy from pinned memory would save {format_seconds(s['saving_s'])} "
                "(xferscope.to_device, or one pinned buffer)"
            )
    if (s.get("pin_s") or 0.0) >= WORTH * s["seconds"]:
        said += f"; pinning {format_bytes(s['pinned_bytes'])} took {format_seconds(s['pin_s'])}"
    return said


def loop_text(loop: dict[str, Any]) -> str:
    """A process's steps: how many, marked by which line, how long, and what their time went
    to."""
    return (
        f"{loop['count']} marked by {shown(loop['where'])}, "
        f"{format_seconds(loop['step_s'])} each on average{steady_text(loop)}, {steps_text(loop)}"
    )


def headline_text(s: dict[str, Any]) -> str:
    """The first thing to change in the steady state, or that nothing is worth it; beside
    either, where the GPU's idle was mostly between launches, that launching bounds the steps."""
    first = s.get("headline")
    if first is None:
        return ""
    idlest, launch = launch_bound(s)
    if first["code"] == "none":
        said = (
            f": the GPU busy {1 - idlest['idle_share']:.0%} or more of the steps" if idlest else ""
        )
        if launch:
            said += (
                f", {launch:.0%} of its idle between launches: the host launching work bounds the"
                " steps, not copies or waits"
            )
        elif idlest and (host := host_bound(idlest)):
            said += host
        return f"nothing to fix in the steady state{said}; no finding saves {WORTH:.0%} of it"
    where = f" at {shown(first['where'])}" if first.get("where") else ""
    share = f" ({first['share']:.1%} of the steady state)" if first.get("share") else ""
    saving = format_seconds(first["saving_s"])
    said = f"first to change: {first['title']}{where}, saving {saving}{share}"
    if idlest and launch:
        said += (
            f"; beside it the GPU sat idle {idlest['idle_share'] * launch:.0%} of the steps between"
            " launches: the host launching work bounds them more"
        )
    return said


def launch_bound(s: dict[str, Any]) -> tuple[dict[str, Any] | None, float]:
    """The idlest GPU of the steps, and the share of its idle between launches where that GPU
    sat idle half the steps or more and most of it so (0.0 otherwise)."""
    busy = [g for g in s.get("gpus", []) if g.get("idle_share") is not None]
    if not busy:
        return None, 0.0
    idlest = max(busy, key=lambda g: g["idle_share"])
    launch = sum(c["seconds"] for c in idlest.get("idle", []) if c["kind"] == "launch")
    idle = idlest.get("idle_s") or 0.0
    bound = idlest["idle_share"] >= 0.5 and idle > 0 and launch >= 0.5 * idle
    return idlest, launch / idle if bound else 0.0


def host_bound(idlest: dict[str, Any]) -> str:
    """Where the idlest GPU sat idle half the steps or more, most of that idle away from CUDA
    with no copy after it (the GPU resumed with a launch), and most looks at the main thread
    then found it at one line: that the host's own work at that line bounds the steps ("" else).
    A framework's call whose host side is slow looks so: the program's line innermost, the
    library's C++ below it (a decoder's attention: 764 of 771 looks at its line)."""
    idle = idlest.get("idle_s") or 0.0
    away = [c for c in idlest.get("idle", []) if c["kind"] == "away" and not c.get("function")]
    seconds = sum(c["seconds"] for c in away)
    looks = sum(c.get("looks", 0) for c in away)
    at: dict[str, int] = defaultdict(int)
    for c in away:
        for line, n in c.get("seen_at") or ():
            at[line] += n
    if idlest["idle_share"] < 0.5 or not idle or seconds < 0.5 * idle or not at:
        return ""
    line, n = max(at.items(), key=lambda item: item[1])
    if n * 2 < looks:
        return ""
    return (
        f", {seconds / idle:.0%} of its idle away from CUDA with the main thread at {shown(line)}"
        f" ({n} of {looks} looks): the host's own work at that line bounds the steps, not copies"
        " or waits (`py-spy dump --native` shows the call below it)"
    )


def looks_said(place: dict[str, Any]) -> str:
    """How many looks at the main thread found a place ("" where none did)."""
    return f"{place['looks']} looks" if place.get("looks") else ""


def phase_lines(s: dict[str, Any]) -> list[str]:
    """The start-up, the steps of each looping process and the headline, a line each."""
    loops = s.get("loops") or ([s["steps"]] if s.get("steps") else [])
    several = len(loops) > 1

    def of(pid: int) -> str:
        return f" (pid {pid})" if several else ""

    out = [f"start-up{of(st['pid'])}: {startup_text(st)}" for st in s.get("startup") or ()]
    out += [f"steps{of(loop.get('pid', 0))}: {loop_text(loop)}" for loop in loops]
    line = headline_text(s)
    return [*out, line] if line else out


def steps_text(loop: dict[str, Any]) -> str:
    """What the steps' time went to: idle, copying alone, the input; long steps, warm-up."""
    if loop["idle_share"] is None:
        return "no step inside a kernel window (`--kernels all` gives the idle)"
    said = f"the GPU idle {loop['idle_share']:.0%} of the steps' time"
    if loop.get("copy_share"):
        said += f" and copying with no kernel {loop['copy_share']:.0%}"
    if loop.get("input_share") is not None:
        said += (
            f"; waiting for its input {loop['input_share']:.0%} (idle at the uploads and the "
            "downloads of data, copies alone)"
        )
    long = loop.get("long_steps") or 0
    if long:
        said += f"; {long} long step{'' if long == 1 else 's'} (over {LONG_GAP:g} times the usual)"
    warm = loop.get("warm_up") or 0
    if warm:
        said += f"; {warm} warm-up step{'' if warm == 1 else 's'} before them, the start-up's"
    return said


def steady_text(loop: dict[str, Any]) -> str:
    """The steady steps' mean beside the mean of all, where long steps make them differ."""
    steady = loop.get("steady_step_s")
    if not loop.get("long_steps") or not steady:
        return ""
    return f" ({format_seconds(steady)} the steady ones)"


def gpu_line(gpu: dict[str, Any]) -> str:
    """A GPU's steady state (its process's steps, else its first work to its last), and its busy
    and idle time in the time judged (where every kernel was recorded)."""
    span = gpu["span_s"]
    judged = gpu.get("judged_s", span)
    said = f"{format_seconds(span)} of steady state"
    if gpu["idle_share"] is None:
        return said + ", idle not judged (no kernel recorded: `--kernels none`)"
    if judged < span:
        said += f"; in the {format_seconds(judged)} whose kernels were all recorded"
    return (
        f"{said}, busy {format_seconds(gpu['busy_s'])}, idle {format_seconds(gpu['idle_s'])} "
        f"({gpu['idle_share']:.0%})"
    )


def print_trace(result: TraceResult, console: Console) -> None:
    s = result.summary
    command = " ".join(result.options.get("command", []))
    ended = f"signal {result.signal}" if result.signal else f"exit status {result.returncode}"
    console.print(
        f"traced `{command}`: {result.wall_s:.3g} s, {ended}, "
        f"{len(result.processes)} process(es) used CUDA"
    )
    phases = phase_lines(s)
    for line in phases[:-1] if s.get("headline") else phases:
        console.print(escape(line))
    for g in s.get("gpus", []):
        console.print(f"GPU {g['device']}: {escape(gpu_line(g))}")
        for line in idle_lines(g):
            console.print(f"  {escape(line)}")
    if "headline" not in s:  # a document of version 4 or older
        late = s.get("straggler")
        if late:
            console.print(escape(straggler_line(late, s.get("ranks", []))))
    if s.get("headline"):
        console.print(f"[bold]{escape(phases[-1])}[/bold]")
    if not s.get("table"):
        console.print("no CUDA copies were seen")
        return
    nvprof = ("Time(%)", "Time", "Calls", "Avg", "Min", "Max", "Name")
    table = titled_table("GPU activities (nvprof's table)", nvprof, ("Name",))
    for r in s["table"]:
        table.add_row(
            f"{r['time_share']:.2%}",
            format_seconds(r["total_s"]),
            str(r["calls"]),
            format_seconds(r["avg_s"]),
            format_seconds(r["min_s"]),
            format_seconds(r["max_s"]),
            r["kind"],
        )
    console.print(table)
    groups = titled_table("copies by direction and host memory",
                          ("copies", "calls", "bytes", "GPU time", "rate", "of this machine",
                           "host blocked", "beside kernels"), ("copies",))  # fmt: skip
    for g in s["groups"]:
        # this machine's reach is its copies' API time: a small copy's is its fixed cost, which
        # its GPU time leaves out, so none is given for a group of small copies
        small = g["calls"] and g["bytes"] / g["calls"] <= SMALL_BYTES
        reach = None if small else g.get("of_reach")
        groups.add_row(
            f"{g['direction']} {g['memory']}",
            str(g["calls"]),
            format_bytes(g["bytes"]),
            format_seconds(g["gpu_s"]),
            format_rate(g["rate_bps"]),
            "" if reach is None else f"{reach:.0%}",
            format_seconds(g["blocked_s"]) if g["blocked_s"] else "",
            f"{g['overlapped_s'] / g['gpu_s']:.0%}"
            if g["gpu_s"] and g["overlapped_s"] is not None
            else "",
        )
    console.print(groups)
    ref = s.get("reference") or {}
    if ref:
        console.print(f"this machine's rates: {ref.get('source')}")
    steady = steady_s(result)  # what the shares are of
    # a priced fix saving under WORTH of the steady state is named in one line after the others
    minor = [
        f
        for f in s.get("fixes") or []
        if f.get("saving_s") is not None and steady and f["saving_s"] < WORTH * steady
    ]
    fixes = [f for f in s.get("fixes") or [] if f not in minor]  # fmt: skip
    if fixes:
        console.print("[bold]what to change in the steady state, the largest saving first[/bold]")
    for f in fixes:
        what = counted(f["calls"], f["sizes"])
        said = f"{f['title']}: {what + ', ' if what else ''}cost {format_seconds(f['cost_s'])}"
        if f.get("saving_s") is None:
            console.print(f"  [bold]not priced[/bold] {said}")
        else:
            share = f["saving_s"] / steady if steady else 0.0
            console.print(f"  [bold]{format_seconds(f['saving_s'])}[/bold] ({share:.1%}) {said}")
        for line in place_lines(f):
            console.print(f"      {line}")
        console.print(f"      fix: {escape(f['fix'])}")
        for fix, saving in f.get("each_fix") or ():
            share = saving / steady if steady else 0.0
            console.print(f"        {format_seconds(saving)} ({share:.1%}): {escape(fix)}")
        for note in (f.get("unpriced"), f.get("detail")):
            if note:
                console.print(f"      [dim]{escape(note)}[/dim]")
    if fixes:
        total = s.get("saving_s", 0.0)
        share = total / steady if steady else 0.0
        console.print(
            f"together about {format_seconds(total)}, {share:.1%} of the steady state, for the "
            "fixes priced (fixes can overlap)"
        )
    if minor:
        named = "; ".join(f"{f['title']} ({format_seconds(f['saving_s'])})" for f in minor)
        console.print(
            f"[dim]also found, each saving under {WORTH:.0%} of the steady state (in the JSON): "
            f"{escape(named)}[/dim]"
        )
    for note in (*s.get("notes", []), *s.get("warnings", [])):
        console.print(f"[yellow]note:[/yellow] {note}")


def place_lines(fix: dict[str, Any]) -> list[str]:
    """Where a fix's calls were made, a line each: the program's line, its calls and cost, and
    its source text (the native caller and the Python stack are in the JSON; a version 1
    document lists places as text)."""
    if "places" not in fix:
        return [f"at {escape(shown(w))}" for w in fix.get("where", [])]
    out = []
    # a place costing under WORTH of the costliest's (the synchronize after a loop) is counted
    most = max((p["cost_s"] for p in fix["places"]), default=0.0)
    shown_places = [p for p in fix["places"] if p["cost_s"] >= WORTH * most]
    for p in shown_places:
        code = f" [dim]{escape(p['code'][:60])}[/dim]" if p.get("code") else ""
        cost = format_seconds(p["cost_s"])
        calls = ", ".join(x for x in (counted(p["calls"], ""), looks_said(p)) if x)
        out.append(f"at {escape(shown(p['where']))}: {calls + ', ' if calls else ''}{cost}{code}")
    if rest := len(fix["places"]) - len(shown_places):
        out.append(f"[dim]and {rest} more place{'' if rest == 1 else 's'}, each costing under "
                   f"{WORTH:.0%} of the first (in the JSON)[/dim]")  # fmt: skip
    return out
