"""The trace's summary as the terminal shows it (report/trace_tables.print_trace): findings that
save under analyze.WORTH of the steady state named in one line after the others, and the
start-up's looks only where they round to 1% or more."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path

from rich.console import Console

from xferscope.report.trace_tables import headline_text, print_trace, startup_text
from xferscope.trace.document import from_dict

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "trace.json"


def _printed(doc: dict) -> str:
    console = Console(record=True, width=400, color_system=None, file=io.StringIO())
    print_trace(from_dict(doc), console)
    return console.export_text()


def test_a_finding_worth_under_a_percent_is_named_in_one_line_after_the_others():
    doc = json.loads(GOLDEN.read_text())
    titles = {f["code"]: f["title"] for f in doc["summary"]["fixes"]}
    said = _printed(doc)
    listed, _, after = said.partition("together about")
    # 5.6% and 1.1% of the steady state: to change; 0.0%: named after; not priced: listed
    for code in ("repeated_uploads", "synchronizations", "pageable_copies"):
        assert titles[code] in listed, code
    assert titles["synchronous_copies"] not in listed
    minor = next(line for line in after.splitlines() if line.startswith("also found"))
    assert "under 1% of the steady state" in minor and titles["synchronous_copies"] in minor


def test_with_every_finding_worth_acting_on_there_is_no_such_line():
    doc = json.loads(GOLDEN.read_text())
    doc["summary"]["fixes"] = [f for f in doc["summary"]["fixes"]
                               if f["code"] != "synchronous_copies"]  # fmt: skip
    assert "also found" not in _printed(doc)


def test_the_start_ups_looks_are_named_where_they_round_to_a_percent():
    startup = copy.deepcopy(json.loads(GOLDEN.read_text())["summary"]["startup"][0])
    startup |= {"looks": 1000, "importing": 2, "seen_at": [["prog.py:10 (main)", 600],
                                                           ["prog.py:20 (load)", 4]]}  # fmt: skip
    said = startup_text(startup)
    assert "prog.py:10 (main) (60%)" in said
    assert "importing modules" not in said and "prog.py:20" not in said
    startup["importing"] = 300
    assert "importing modules (30%)" in startup_text(startup)


def test_a_place_costing_under_a_percent_of_the_first_is_counted_not_listed():
    from xferscope.report.trace_tables import place_lines

    places = [("train.py:63 (step)", 303, 62e-3), ("train.py:64 (step)", 303, 1.6e-3),
              ("train.py:90 (<module>)", 1, 16e-6)]  # fmt: skip
    fix = {"places": [{"where": w, "calls": n, "cost_s": c} for w, n, c in places]}
    lines = place_lines(fix)
    assert len(lines) == 3 and "train.py:64" in lines[1] and "train.py:90" not in "".join(lines)
    assert "and 1 more place, each costing under 1% of the first" in lines[2]
    fix["places"].pop()
    assert len(place_lines(fix)) == 2


def test_a_group_of_small_copies_has_no_share_of_this_machines_reach():
    doc = json.loads(GOLDEN.read_text())
    group = doc["summary"]["groups"][0]
    name = f"{group['direction']} {group['memory']}"

    def row() -> str:
        return next(line for line in _printed(doc).splitlines() if name in line and "│" in line)

    group |= {"calls": 1000, "bytes": 1000 * 16384, "of_reach": 5.38}  # 16 KiB copies
    assert "%" not in row().split("│")[6]
    group |= {"calls": 10, "bytes": 10 * (8 << 20), "of_reach": 0.37}  # 8 MiB copies
    assert row().split("│")[6].strip() == "37%"


def test_the_start_ups_savings_and_pinning_are_said_where_they_are_a_percent_of_it():
    startup = copy.deepcopy(json.loads(GOLDEN.read_text())["summary"]["startup"][0])
    startup |= {"seconds": 7.0, "saving_s": 21.78e-6, "pin_s": 1.41e-3, "pinned_bytes": 8}
    said = startup_text(startup)
    assert "would save" not in said and "pinning" not in said
    startup |= {"saving_s": 0.134, "pin_s": 0.086}
    said = startup_text(startup)
    assert "would save 134.00 ms" in said and "pinning 8 B took 86.00 ms" in said


def _launch_bound(launch_s: float) -> dict:
    """A summary with nothing worth fixing, its GPU idle 64% of the steps, `launch_s` of the
    1.4 s idle in gaps between launches and the rest away from CUDA."""
    idle = [{"kind": "launch", "seconds": launch_s}, {"kind": "away", "seconds": 1.4 - launch_s}]
    gpu = {"device": 0, "idle_share": 0.64, "idle_s": 1.4, "idle": idle}
    return {"headline": {"code": "none"}, "gpus": [gpu]}


def test_nothing_to_fix_says_when_launching_bounds_the_steps():
    said = headline_text(_launch_bound(1.1))
    assert said.startswith("nothing to fix in the steady state: the GPU busy 36% or more")
    assert "79% of its idle between launches" in said and "saves 1% of it" in said
    # idle mostly away from CUDA: no word about launches
    assert "launch" not in headline_text(_launch_bound(0.3))
    # a busy GPU: its few gaps are not what bounds it
    busy = _launch_bound(1.1)
    busy["gpus"][0]["idle_share"] = 0.2
    assert "launch" not in headline_text(busy)
    # a finding worth fixing: said first, the launches beside it
    found = _launch_bound(1.1) | {"headline": {"code": "synchronizations", "title": "waits",
                                               "saving_s": 0.25, "share": 0.017}}  # fmt: skip
    said = headline_text(found)
    assert said.startswith("first to change: waits, saving 250.00 ms (1.7% of the steady state)")
    assert "beside it the GPU sat idle 50% of the steps between launches" in said
    assert "launch" not in headline_text(busy | {"headline": found["headline"]})


def test_nothing_to_fix_names_the_line_whose_host_work_bounds_the_steps():
    """Idle mostly away from CUDA, the GPU resumed with a launch, the main thread at one line in
    most looks (a decoder's attention, its host side slow): that line, said beside nothing to
    fix; fewer than half the looks at one line, or the idle a copy's, says nothing of it."""
    summary = _launch_bound(0.3)
    away = summary["gpus"][0]["idle"][1]
    away |= {"function": "", "looks": 40, "seen_at": [["gen.py:52 (Layer.forward)", 38]]}
    said = headline_text(summary)
    assert (
        "79% of its idle away from CUDA with the main thread at gen.py:52 (Layer.forward)" in said
    )
    assert "(38 of 40 looks): the host's own work at that line bounds the steps" in said
    away["seen_at"] = [["gen.py:52 (Layer.forward)", 19], ["gen.py:60 (stream)", 18]]
    assert "bounds" not in headline_text(summary)
    away |= {"function": "cudaMemcpyAsync", "seen_at": [["gen.py:52 (Layer.forward)", 38]]}
    assert "bounds" not in headline_text(summary)
