"""`xferscope fleet`: the statistics, outliers, thresholds and documents on made-up reports, and
the command itself under `mpirun` with simulated ranks (one slow, one failing, one hung, one
without a GPU, one of another version), where Open MPI and mpi4py are installed."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from xferscope.core.errors import OptionError
from xferscope.fleet import thresholds as limits
from xferscope.fleet.records import (
    COMPLETE,
    FAILED,
    RankReport,
    dumps_csv,
    from_dict,
    prometheus_text,
    to_dict,
)
from xferscope.fleet.run import FleetOptions, assemble
from xferscope.fleet.stats import OUTLIER_Z, fleet_stats, likely_cause, outliers

from .test_cli import assert_one_line_error

H2D = "h2d/pinned/async/device/bandwidth"
LAT = "h2d/pinned/async/device/latency"
GPU = {"pcie_generation": 5, "pcie_generation_max": 5, "pcie_width": 16, "pcie_width_max": 16,
       "pcie_peak_max_bps": 63e9, "pci_bus_id": "0000:41:00.0", "uuid": "GPU-x"}  # fmt: skip


def report(rank: int, h2d: float, latency: float = 2e-6, **gpu: object) -> RankReport:
    return RankReport(
        rank, f"node{rank // 4}", rank % 4, rank % 4, COMPLETE, "1.0",
        gpu={**GPU, **gpu}, metrics={H2D: h2d, LAT: latency},
    )  # fmt: skip


def test_the_slow_gpu_is_the_outlier_with_its_cause():
    reports = [report(r, 55e9 * (1 + 0.002 * r)) for r in range(8)]
    reports[5] = report(5, 28e9, pcie_width=8)
    reports[6] = report(6, 55.1e9, latency=9e-6, pcie_replay_count=40)
    stats = {s.name: s for s in fleet_stats(reports)}
    assert stats[H2D].median == pytest.approx(55.3e9, rel=0.01)
    found = {(o.rank, o.metric): o for o in outliers(reports, list(stats.values()))}
    assert set(found) == {(5, H2D), (6, LAT)}
    assert found[(5, H2D)].z < -OUTLIER_Z and "trained down to x8 of x16" in found[(5, H2D)].cause
    assert "40 PCIe replays" in found[(6, LAT)].cause
    # a tight fleet: 0.4% apart is never an outlier, however small the MAD
    tight = [report(r, 55e9 + r * 1e6) for r in range(6)] + [report(6, 54.8e9)]
    assert outliers(tight, fleet_stats(tight)) == []


def test_too_few_gpus_have_no_outliers_and_failed_ranks_no_statistics():
    few = [report(0, 55e9), report(1, 20e9)]
    assert outliers(few, fleet_stats(few)) == []
    broken = RankReport(2, "n", 0, 0, FAILED, "1.0", error="CUDA error", metrics={H2D: 1.0})
    assert fleet_stats([*few, broken])[0].minimum == 20e9
    assert likely_cause(report(0, 1.0)).startswith("no cause in its facts")


def test_thresholds_default_to_the_link_and_name_each_miss(tmp_path):
    ok = limits.judge(report(0, 55e9), {})
    assert ok.passed and ok.failures == ()
    bad = limits.judge(report(1, 40e9, latency=50e-6, pcie_width=8, ecc_uncorrected_volatile=2), {})
    text = " ".join(bad.failures)
    assert not bad.passed and "min_h2d_gbps" in text and "x8 < x16" in text
    assert "max_latency_us" in text and "2 uncorrected ECC errors" in text
    assert limits.for_gpu({}, GPU)["min_h2d_gbps"] == pytest.approx(44.1)
    file = tmp_path / "t.toml"
    file.write_text("min_h2d_gbps = 30\nmax_replay_count = 5\n")
    given = limits.load(str(file))
    assert limits.judge(report(2, 40e9), given).passed
    assert not limits.judge(report(3, 55e9, pcie_replay_count=9), given).passed
    for text, word in (("speed = 3\n", "unknown key 'speed'"), ("min_h2d_gbps = 'x'\n", "not a "
                       "number"), ("min_h2d_gbps = = 3", "not TOML")):  # fmt: skip
        file.write_text(text)
        with pytest.raises(OptionError, match=word):
            limits.load(str(file))
    with pytest.raises(OptionError, match="cannot read"):
        limits.load(str(tmp_path / "missing.toml"))


def test_documents_round_trip_and_every_format_names_the_gpu():
    reports = [report(r, 55e9) for r in range(4)] + [report(4, 20e9, pcie_width=4)]
    old = RankReport(5, "node1", 1, 1, COMPLETE, "0.9", gpu=GPU, metrics={H2D: 55e9})
    result = assemble([*reports, old], FleetOptions(), True, "2026-11-23T00:00:00+00:00", 0.1, 2.0)
    assert result.report(5).status == FAILED and "0.9" in (result.report(5).error or "")
    assert not result.passed
    doc = json.loads(json.dumps(to_dict(result)))
    assert doc["schema"] == "xferscope-fleet" and doc["passed"] is False
    assert from_dict(doc).ranks == result.ranks
    rows = list(csv.DictReader(io.StringIO(dumps_csv(result))))
    assert {r["outlier"] for r in rows if r["rank"] == "4" and r["metric"] == H2D} == {"1"}
    prom = prometheus_text(result, "node1")
    assert 'xferscope_fleet_gpu_ok{host="node1",gpu="0"' in prom
    assert "node0" not in prom.split("xferscope_fleet_median")[0]


# ---- under mpirun ------------------------------------------------------------------------------

MPIRUN = shutil.which("mpirun")


def _mpi4py() -> bool:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return True


needs_mpi = pytest.mark.skipif(
    MPIRUN is None or not _mpi4py(), reason="needs Open MPI's mpirun and mpi4py"
)


def fleet(tmp_path: Path, ranks: int, plan: dict, *args: str, timeout: float = 120):
    env = dict(os.environ, XFERSCOPE_FLEET_TEST=json.dumps(plan), COLUMNS="200",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1",
               XFERSCOPE_HISTORY=str(tmp_path / "h.db"))  # fmt: skip
    command = [MPIRUN, "-np", str(ranks), sys.executable, "-m", "xferscope", "fleet",
               "--simulate", "-o", str(tmp_path / "out"), "--json", str(tmp_path / "f.json"),
               *args]  # fmt: skip
    start = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    return done, time.monotonic() - start


@needs_mpi
def test_four_ranks_one_slow_one_failing(tmp_path):
    done, _ = fleet(tmp_path, 4, {"slow": [2], "fail": [3]})
    assert done.returncode != 0, done.stdout + done.stderr
    doc = json.loads((tmp_path / "f.json").read_text())
    status = {r["rank"]: r["status"] for r in doc["ranks"]}
    assert status == {0: "complete", 1: "complete", 2: "complete", 3: "failed"}
    slow = [o for o in doc["outliers"] if o["rank"] == 2 and o["metric"] == H2D]
    assert slow and "trained down to x8" in slow[0]["cause"]
    assert not any(o["rank"] in (0, 1) for o in doc["outliers"])
    verdicts = {v["rank"]: v["passed"] for v in doc["verdicts"]}
    assert verdicts == {0: True, 1: True, 2: False, 3: False}
    assert list((tmp_path / "out").rglob("prometheus-*.prom"))
    assert "Outliers" in done.stdout and "PCIe link trained down" in done.stdout
    # every GPU that completed has its own run report beside the fleet's page, linked from it
    (page,) = (tmp_path / "out").rglob("fleet.html")
    for r in doc["ranks"]:
        if r["status"] == "complete":
            assert (page.parent / r["report_path"]).is_file(), r["report_path"]
            assert (page.parent / r["report_path"]).with_name("run.json").is_file()
            assert f'href="{r["report_path"]}"' in page.read_text()


@needs_mpi
def test_a_hung_rank_is_marked_and_the_rest_report(tmp_path):
    done, took = fleet(tmp_path, 3, {"hang": [1]}, "--timeout", "4")
    assert took < 60, took
    doc = json.loads((tmp_path / "f.json").read_text())
    status = {r["rank"]: r["status"] for r in doc["ranks"]}
    assert status == {0: "complete", 1: "timed_out", 2: "complete"}
    assert done.returncode != 0 and "sent nothing" in done.stderr


@needs_mpi
def test_no_gpu_and_another_version_are_failures_of_their_rank(tmp_path):
    done, _ = fleet(tmp_path, 3, {"no_gpu": [1], "version": {"2": "0.0.1"}})
    doc = json.loads((tmp_path / "f.json").read_text())
    ranks = {r["rank"]: r for r in doc["ranks"]}
    assert ranks[1]["status"] == "no_gpu" and "no GPU" in ranks[1]["error"]
    assert ranks[2]["status"] == "failed" and "0.0.1" in ranks[2]["error"]
    assert done.returncode == 1


@needs_mpi
@pytest.mark.parametrize(
    "make,option",
    [
        (lambda p: ["--thresholds", str(p / "t.toml")], "unknown key 'speed'"),
        (lambda p: ["--json", str(p / "t.toml" / "f.json")], "--json"),  # under a file
        (lambda p: ["--cases", "h2d_nothing"], "--cases"),
    ],
)
def test_bad_input_is_one_line_on_rank_0(tmp_path, make, option):
    (tmp_path / "t.toml").write_text("speed = 3\n")
    args = make(tmp_path)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")  # fmt: skip
    done = subprocess.run(
        [MPIRUN, "-np", "2", sys.executable, "-m", "xferscope", "fleet", "--simulate",
         "--no-history", "-o", str(tmp_path / "out"), *args],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert done.returncode != 0 and len(errors) == 1 and option in errors[0], done.stderr


def test_without_mpi4py_it_says_how_to_launch(monkeypatch, capsys):
    import builtins

    from xferscope import cli

    real = builtins.__import__

    def no_mpi(name, *a, **k):
        if name.startswith("mpi4py"):
            raise ImportError("no mpi4py")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_mpi)
    code = cli.main(["fleet", "--simulate"])
    err = capsys.readouterr().err
    assert code != 0 and "mpirun -np" in err and len(err.strip().splitlines()) == 1


def _without_mpi(monkeypatch):
    from xferscope.cli import fleet as fleet_cli
    from xferscope.fleet.run import NO_MPI_LIBRARY, FleetError

    def missing():
        raise FleetError(NO_MPI_LIBRARY.format(why="cannot load MPI library"))

    monkeypatch.setattr(fleet_cli, "open_comm", missing)


@pytest.mark.parametrize(
    "make,option",
    [
        (lambda p: ["--prometheus", "/proc/x/p"], "--prometheus"),
        (lambda p: ["--html", "/proc/x/f.html"], "--html"),
        (lambda p: ["--json", str(p)], "--json"),  # a directory
        (lambda p: ["--history", str(p / "garbage.db")], "--history"),
    ],
)
def test_without_mpi_a_bad_output_still_names_its_option(
    monkeypatch, capsys, tmp_path, make, option
):
    """Where MPI is missing, the line names the option at fault, not the missing MPI, and the
    results directory made for the other files is gone again."""
    from xferscope import cli

    (tmp_path / "garbage.db").write_text("not a database\n")
    _without_mpi(monkeypatch)
    out = tmp_path / "out"
    code = cli.main(["fleet", "--simulate", "-o", str(out), *make(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert_one_line_error(code, err, option)
    assert not out.exists() or not any(out.iterdir())


def test_without_mpi_good_options_say_mpi_is_missing(monkeypatch, capsys, tmp_path):
    from xferscope import cli

    _without_mpi(monkeypatch)
    out = tmp_path / "out"
    code = cli.main(["fleet", "--simulate", "--no-history", "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("Error: mpi4py is installed but found no MPI library")
    assert not out.exists() or not any(out.iterdir())


@needs_mpi
def test_every_pair_through_nccl_both_ways(tmp_path):
    done, _ = fleet(tmp_path, 3, {})
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads((tmp_path / "f.json").read_text())
    pairs = {(p["source"], p["destination"]): p for p in doc["pairs"]}
    assert set(pairs) == {(a, b) for a in range(3) for b in range(3) if a != b}
    for p in pairs.values():
        assert p["kind"] == "intra-node" and p["verified"] is True
        assert p["bandwidth_bps"] == pytest.approx(370e9 * (64 << 20) / ((64 << 20) + 9e-6 * 370e9),
                                                   rel=0.05)  # fmt: skip
        assert p["latency_s"] == pytest.approx(9e-6 + 8 / 370e9, rel=0.05)
    assert "GPU to GPU through NCCL" in done.stdout
    done, _ = fleet(tmp_path, 2, {}, "--pairs", "none", "--force")
    doc = json.loads((tmp_path / "f.json").read_text())
    assert doc["pairs"] == [] and "--pairs none" in doc["pairs_note"]


def test_pair_plans():
    from xferscope.fleet.pairs import PairResult, plan, slow_pairs

    assert plan(1, "auto") == [] and plan(4, "none") == []
    assert plan(3, "auto") == [(0, 1), (0, 2), (1, 2)]
    ring = plan(20, "auto")
    assert len(ring) == 20 and (0, 19) in ring and (0, 1) in ring
    results = [PairResult(a, b, "intra-node", 370e9, 9e-6, True) for a, b in plan(4, "all")]
    results.append(PairResult(3, 0, "intra-node", 100e9, 9e-6, True))
    assert [(p.source, p.destination) for p, _ in slow_pairs(results)] == [(3, 0)]


def test_the_html_page_puts_outliers_first_and_links_every_gpu():
    from xferscope.fleet.pairs import PairResult
    from xferscope.report.fleet_html import render_fleet_html

    reports = [report(r, 55e9) for r in range(4)] + [report(4, 20e9, pcie_width=4)]
    result = assemble(reports, FleetOptions(), True, "2026-11-23T00:00:00+00:00", 0.1, 2.0)
    pairs = tuple(PairResult(a, b, "intra-node", 340e9, 7e-6, True) for a in range(2)
                  for b in range(2) if a != b)  # fmt: skip
    from dataclasses import replace

    page = render_fleet_html(replace(result, pairs=pairs))
    assert page.index("Outliers") < page.index("Every GPU against the fleet")
    assert 'href="#rank-4-gpu-0"' in page and 'id="rank-4-gpu-0"' in page
    assert "trained down to x4 of x16" in page and "SIMULATED" in page
    assert "340.0" in page


def test_html_links_each_gpu_report_or_its_undrawn_run_json():
    from dataclasses import replace

    from xferscope.report.fleet_html import render_fleet_html

    drawn = replace(report(0, 55e9), report_path="gpus/vm-gpu0/report.html")
    undrawn = replace(report(1, 55e9), report_path="gpus/vm-gpu1/run.json")
    page = render_fleet_html(
        assemble([drawn, undrawn], FleetOptions(), True, "2026-11-23T00:00:00+00:00", 0.1, 2.0)
    )
    assert '<a href="gpus/vm-gpu0/report.html">its own report</a>' in page
    assert '<a href="gpus/vm-gpu1/run.json">its own run.json</a> (not drawn: interrupted)' in page


@needs_mpi
def test_ctrl_c_keeps_what_was_measured_marked_interrupted(tmp_path):
    import signal

    env = dict(os.environ, XFERSCOPE_SIMULATE_PACE="5", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")  # fmt: skip
    job = subprocess.Popen(
        [MPIRUN, "-np", "2", sys.executable, "-m", "xferscope", "fleet", "--simulate",
         "--no-history", "-o", str(tmp_path / "out"), "--json", str(tmp_path / "f.json")],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(12)  # well after start-up; the paced quick checks take about a minute
    # Open MPI passes the Ctrl-C on as SIGTERM and kills every rank 1 s later: the files must be
    # written by then (the old keeper drew each GPU's report first, 0.8 s, and lost the race).
    job.send_signal(signal.SIGINT)
    try:
        _, err = job.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        job.kill()
        pytest.fail("mpirun did not end 120 s after Ctrl-C: " + job.communicate()[1][-3000:])
    assert job.returncode != 0
    assert (tmp_path / "f.json").exists(), err
    doc = json.loads((tmp_path / "f.json").read_text())
    assert doc["interrupted"] is True and doc["passed"] is False
    assert {r["error"] for r in doc["ranks"]} == {"interrupted"}
    assert doc["pairs_note"] == "not measured: interrupted" and "marked incomplete" in err
    gpus = list((tmp_path / "out").glob("fleet-*/gpus/*"))
    assert len(gpus) == 2 and all((g / "run.json").exists() for g in gpus)
    assert {r["report_path"].rsplit("/", 1)[-1] for r in doc["ranks"]} == {"run.json"}
