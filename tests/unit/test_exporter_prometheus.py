"""`xferscope exporter` scraped by a real Prometheus server (Debian's `prometheus`, started here
on loopback ports with the repository's alert rules): PromQL through Prometheus' HTTP API
returns the simulated GPUs' figures, and the link alert fires for the GPU whose link trained
down, not for the other. The deployment files are checked: promtool reads the alert rules and
every Grafana panel's query, and each metric they name is one the exporter serves."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.parse
from pathlib import Path

import pytest

from .test_exporter import _exporter, _free_port, _get, _wait_for

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus" / "alerts.yml"
DASHBOARD = DEPLOY / "grafana" / "xferscope-dashboard.json"
LIMIT_S = 90  # the whole scrape-and-alert exchange, bounded

needs_prometheus = pytest.mark.skipif(
    shutil.which("prometheus") is None, reason="Debian's prometheus package is not installed"
)
needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool (Debian's prometheus) is not installed"
)


def _query(base: str, promql: str) -> list[dict]:
    code, text = _get(f"{base}/api/v1/query?query={urllib.parse.quote(promql)}")
    assert code == 200, text
    answer = json.loads(text)
    assert answer["status"] == "success", answer
    return list(answer["data"]["result"])


@needs_prometheus
def test_prometheus_scrapes_the_exporter_and_the_link_alert_fires(tmp_path):
    exporter_port, prometheus_port = _free_port(), _free_port()
    env = {"XFERSCOPE_SIMULATE_GPUS": "2", "XFERSCOPE_SIMULATE_LINKS": "1:8"}
    exporter = _exporter("--listen", f"127.0.0.1:{exporter_port}", "--every", "1h", env=env)
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files:\n  - {RULES}\n"
        "scrape_configs:\n  - job_name: xferscope\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{exporter_port}']\n"
    )
    server = subprocess.Popen(
        ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{prometheus_port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{prometheus_port}"
    try:
        _wait_for(f"{base}/-/ready", 30)
        deadline = time.monotonic() + LIMIT_S
        pinned = 'direction="h2d",memory="pinned",timing="device"'
        figures: list[dict] = []
        while len(figures) < 2:
            assert time.monotonic() < deadline, "Prometheus never had both GPUs' figures"
            time.sleep(0.5)
            figures = _query(base, f"xferscope_bandwidth_bytes_per_second{{{pinned}}}")
        by_gpu = {r["metric"]["gpu"]: float(r["value"][1]) for r in figures}
        assert 0.4 < by_gpu["1"] / by_gpu["0"] < 0.6  # x8 against x16
        assert {r["metric"]["job"] for r in figures} == {"xferscope"}
        firing: list[dict] = []
        while not firing:
            assert time.monotonic() < deadline, "the link alert never fired"
            time.sleep(0.5)
            _, text = _get(f"{base}/api/v1/alerts")
            alerts = json.loads(text)["data"]["alerts"]
            firing = [a for a in alerts if a["labels"]["alertname"] == "XferscopeLinkTrainedDown"
                      and a["state"] == "firing"]  # fmt: skip
        assert {a["labels"]["gpu"] for a in firing} == {"1"}
        below = _query(base, 'ALERTS{alertname="XferscopeH2DBelowThreshold"}')
        assert {r["metric"]["gpu"] for r in below} == {"1"}
        assert _query(base, "xferscope_threshold_pass == 1")[0]["metric"]["gpu"] == "0"
    finally:
        for process in (server, exporter):
            process.terminate()
        for process in (server, exporter):
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
    assert exporter.returncode == 143


@needs_promtool
def test_promtool_reads_the_alert_rules():
    checked = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True)
    assert checked.returncode == 0, checked.stderr.decode()
    assert b"SUCCESS: 5 rules found" in checked.stdout


def _panel_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


@needs_promtool
def test_every_dashboard_query_is_promql_promtool_reads(tmp_path):
    queries = _panel_queries()
    assert len(queries) >= 8
    rules = tmp_path / "panels.yml"
    # each query as a recording rule, which promtool parses ($instance: Grafana's variable)
    body = "".join(
        f"      - record: panel_{i}\n        expr: '{q.replace('$instance', '.*')}'\n"
        for i, q in enumerate(queries)
    )
    rules.write_text(f"groups:\n  - name: panels\n    rules:\n{body}")
    checked = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True)
    assert checked.returncode == 0, checked.stderr.decode() + rules.read_text()


def test_the_dashboard_and_rules_name_only_metrics_the_exporter_serves(monkeypatch):
    from prometheus_client import CollectorRegistry, generate_latest

    from xferscope.exporter.metrics import ExporterCollector
    from xferscope.exporter.service import Exporter, ExporterOptions

    monkeypatch.setenv("XFERSCOPE_SIMULATE_GPUS", "2")
    monkeypatch.setenv("XFERSCOPE_SIMULATE_LINKS", "1:8")
    exporter = Exporter(ExporterOptions(simulate=True))
    exporter.discover()
    for gpu in exporter.gpus.values():
        exporter.attempt(gpu)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ExporterCollector(exporter))
    text = generate_latest(registry).decode()
    served = set(re.findall(r"^# TYPE (\S+)", text, re.MULTILINE))
    served |= {f"{name}_total" for name in served}  # counters' samples
    queries = " ".join(_panel_queries()) + RULES.read_text()
    named = set(re.findall(r"\bxferscope_[a-z_]*[a-z](?=[{ )\n]|$)", queries))
    assert named and named <= served, named - served


def _parses(words: list[str]) -> None:
    """The exporter's options as given parse (types and ranges), without running it."""
    from xferscope.cli.app import cli, subcommand

    command = subcommand(cli, "exporter")
    assert command is not None and words[0] == "exporter"
    command.make_context("exporter", words[1:])


def test_the_systemd_unit_runs_the_exporter_with_options_it_takes():
    unit = (DEPLOY / "systemd" / "xferscope-exporter.service").read_text()
    (start,) = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    words = start.split("=", 1)[1].split()
    assert words[0].endswith("/xferscope")
    _parses(words[1:])
    assert "SuccessExitStatus=143" in unit  # SIGTERM's exit is a clean stop


def test_the_daemonset_probes_healthz_and_runs_the_exporter():
    yaml = pytest.importorskip("yaml")
    documents = list(
        yaml.safe_load_all((DEPLOY / "kubernetes" / "xferscope-exporter.yaml").read_text())
    )
    (daemonset,) = [d for d in documents if d["kind"] == "DaemonSet"]
    spec = daemonset["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    (container,) = spec["containers"]
    _parses(container["args"])
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    port = container["ports"][0]["containerPort"]
    assert f":{port}" in " ".join(container["args"])
