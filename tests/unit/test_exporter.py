"""`xferscope exporter` with the simulated engine: what it serves after a measurement, a busy
GPU deferred and measured once free, a failure that keeps the last figures (stale), the HTTP
endpoints, and the command's bad input and stop."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from xferscope.core.errors import OptionError
from xferscope.core.units import parse_seconds
from xferscope.exporter import service
from xferscope.exporter.metrics import ExporterCollector
from xferscope.exporter.server import serve
from xferscope.exporter.service import ChildFailed, Exporter, ExporterOptions

from .test_cli import assert_one_line_error, run

ENV = {"XFERSCOPE_SIMULATE_GPUS": "2", "XFERSCOPE_SIMULATE_LINKS": "1:8"}


@pytest.fixture
def two_gpus(monkeypatch):
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)


def samples(exporter: Exporter) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """What a scrape returns, by sample name and labels (uuid left out)."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(ExporterCollector(exporter))
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "uuid"))
            out[(s.name, labels)] = s.value
    return out


def value(scraped, name, **labels):
    return scraped[(name, tuple(sorted(labels.items())))]


def test_a_measurement_serves_figures_verdicts_and_link_facts(two_gpus):
    exporter = Exporter(ExporterOptions(simulate=True, every_s=3600))
    exporter.discover()
    assert sorted(exporter.gpus) == [0, 1]
    before = samples(exporter)
    assert value(before, "xferscope_measurement_stale", gpu="0") == 1  # nothing measured yet
    assert not [k for k in before if k[0] == "xferscope_bandwidth_bytes_per_second"]
    for gpu in exporter.gpus.values():
        exporter.attempt(gpu)
    scraped = samples(exporter)
    pinned = {"direction": "h2d", "memory": "pinned", "mechanism": "async", "timing": "device"}
    fast = value(scraped, "xferscope_bandwidth_bytes_per_second", gpu="0", **pinned)
    slow = value(scraped, "xferscope_bandwidth_bytes_per_second", gpu="1", **pinned)
    assert 40e9 < fast < 63e9 and 0.4 < slow / fast < 0.6  # GPU 1's link trained to x8
    assert value(scraped, "xferscope_pcie_link_width", gpu="1") == 8
    assert value(scraped, "xferscope_pcie_link_width_max", gpu="1") == 16
    assert value(scraped, "xferscope_threshold_pass", gpu="0") == 1
    assert value(scraped, "xferscope_threshold_pass", gpu="1") == 0
    assert value(scraped, "xferscope_threshold_failed", gpu="1", check="pcie_width") == 1
    assert value(scraped, "xferscope_measurement_stale", gpu="1") == 0
    assert value(scraped, "xferscope_measurements_total", gpu="0", outcome="complete") == 1
    assert 0 <= value(scraped, "xferscope_measurement_age_seconds", gpu="0") < 60
    assert value(scraped, "xferscope_latency_seconds", gpu="0", **pinned) < 10e-6


def test_a_busy_gpu_is_deferred_then_measured_once_free(two_gpus):
    busy = {"now": True}

    def nvml(gpu):
        return ("busy", 97.0) if busy["now"] else (None, 3.0)

    exporter = Exporter(ExporterOptions(devices=(0,), simulate=True, every_s=3600), busy=nvml)
    exporter.discover()
    gpu = exporter.gpus[0]
    exporter.attempt(gpu)
    scraped = samples(exporter)
    assert value(scraped, "xferscope_deferred", gpu="0", reason="busy") == 1
    assert value(scraped, "xferscope_gpu_utilization_percent", gpu="0") == 97
    assert value(scraped, "xferscope_measurements_total", gpu="0", outcome="deferred") == 1
    assert value(scraped, "xferscope_measurements_total", gpu="0", outcome="complete") == 0
    assert gpu.next_s > time.monotonic() + 0.9 * service.RETRY_S  # retried, not at once
    busy["now"] = False
    exporter.attempt(gpu)
    scraped = samples(exporter)
    assert value(scraped, "xferscope_deferred", gpu="0", reason="busy") == 0
    assert value(scraped, "xferscope_measurements_total", gpu="0", outcome="complete") == 1


def test_the_simulated_busy_variable_defers_that_gpu(two_gpus, monkeypatch):
    monkeypatch.setenv("XFERSCOPE_SIMULATE_BUSY", "1")
    exporter = Exporter(ExporterOptions(simulate=True, every_s=3600))
    exporter.discover()
    for gpu in exporter.gpus.values():
        exporter.attempt(gpu)
    scraped = samples(exporter)
    assert value(scraped, "xferscope_measurements_total", gpu="0", outcome="complete") == 1
    assert value(scraped, "xferscope_measurements_total", gpu="1", outcome="deferred") == 1


def test_a_failed_measurement_keeps_the_last_figures_marked_stale(two_gpus, monkeypatch):
    said: list[str] = []
    exporter = Exporter(ExporterOptions(devices=(0,), simulate=True), say=said.append)
    exporter.discover()
    gpu = exporter.gpus[0]
    exporter.attempt(gpu)
    good = samples(exporter)

    def gone(*_args, **_kw):
        raise ChildFailed("the measuring process ended (exit status -9)")

    monkeypatch.setattr(exporter.children, "call", gone)
    exporter.attempt(gpu)
    scraped = samples(exporter)
    assert value(scraped, "xferscope_measurement_stale", gpu="0") == 1
    assert value(scraped, "xferscope_measurements_total", gpu="0", outcome="failed") == 1
    figures = [k for k in good if k[0] == "xferscope_bandwidth_bytes_per_second"]
    assert figures and all(scraped[k] == good[k] for k in figures)  # the last ones, still
    assert said == [
        "GPU 0: measurement failed (the measuring process ended (exit status -9)); its last "
        "figures are served, marked stale"
    ]


def test_a_gpu_that_fails_its_checks_is_a_failed_measurement(two_gpus, monkeypatch):
    exporter = Exporter(ExporterOptions(devices=(1,), simulate=True))
    exporter.discover()
    report = {"rank": 0, "host": "h", "local_rank": 0, "device": 1, "status": "failed",
              "version": "x", "error": "cudaErrorDevicesUnavailable"}  # fmt: skip
    monkeypatch.setattr(exporter.children, "call", lambda *_a, **_k: report)
    exporter.attempt(exporter.gpus[1])
    assert exporter.gpus[1].last_error == "cudaErrorDevicesUnavailable"
    assert value(samples(exporter), "xferscope_measurement_stale", gpu="1") == 1


def test_gpus_asked_for_that_do_not_exist_are_refused(two_gpus):
    exporter = Exporter(ExporterOptions(devices=(0, 5), simulate=True))
    refusal = r"^--device: no GPU with index 5; this machine has 0..1$"
    with pytest.raises(OptionError, match=refusal):
        exporter.discover()
    assert exporter.gpus == {}


def _get(url: str, method: str = "GET") -> tuple[int, str]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_endpoints(two_gpus):
    exporter = Exporter(ExporterOptions(simulate=True))
    exporter.discover()
    server = serve(exporter, "127.0.0.1", 0)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert _get(f"{base}/healthz") == (200, "ok\n")
        code, text = _get(f"{base}/metrics")
        assert code == 200 and "xferscope_exporter_gpus 2.0" in text
        assert _get(f"{base}/measure")[0] == 405
        assert _get(f"{base}/nothing")[0] == 404
        assert _get(f"{base}/measure?gpu=one", "POST")[0] == 400
        assert _get(f"{base}/measure?gpu=7", "POST")[0] == 404
        exporter.gpus[0].next_s = exporter.gpus[1].next_s = 1e12
        code, text = _get(f"{base}/measure?gpu=1", "POST")
        assert code == 202 and "GPU 1" in text
        assert exporter.gpus[1].next_s == 0 and exporter.gpus[0].next_s == 1e12
        assert _get(f"{base}/measure", "POST")[0] == 202 and exporter.gpus[0].next_s == 0
        exporter.stop()
        assert _get(f"{base}/healthz")[0] == 503
    finally:
        server.shutdown()
        server.server_close()


def test_every_takes_a_schedule_s_periods():
    assert parse_seconds("--every", "6h") == 21600
    assert parse_seconds("--every", "30m") == parse_seconds("--every", "1800") == 1800
    assert parse_seconds("--every", "1d") == 86400


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--every", "0"], "--every"),
        (["--every", "6 hours"], "--every"),
        (["--every", "31d"], "--every"),
        (["--retry", "-1"], "--retry"),
        (["--listen", "localhost:http"], "--listen"),
        (["--listen", "70000"], "--listen"),
        (["--busy", "101"], "--busy"),
        (["--cases", "h2d_nothing"], "--cases"),
        (["-g", "x"], "--device"),
    ],
)
def test_bad_input_is_one_line(capsys, args, option):
    code, _, err = run(capsys, "exporter", "--simulate", *args)
    assert code == 2
    assert_one_line_error(code, err, option)


@pytest.mark.parametrize("kind", ["fifo", "directory", "empty name", "missing"])
def test_a_thresholds_path_that_is_no_file_is_one_line(capsys, tmp_path, kind):
    path = {"fifo": tmp_path / "fifo", "directory": tmp_path, "empty name": "",
            "missing": tmp_path / "none.toml"}[kind]  # fmt: skip
    if kind == "fifo":
        os.mkfifo(path)
    code, _, err = run(capsys, "exporter", "--simulate", "--thresholds", str(path))
    assert code == 2
    assert_one_line_error(code, err, "--thresholds")
    if kind == "empty name":
        assert "not an empty string" in err


def test_a_thresholds_file_that_does_not_parse_is_one_line(capsys, tmp_path):
    bad = tmp_path / "health.toml"
    bad.write_text("min_h2d_gbps = \n")
    code, _, err = run(capsys, "exporter", "--simulate", "--thresholds", str(bad))
    assert code == 2
    assert_one_line_error(code, err, "--thresholds")


def _exporter(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "xferscope", "exporter", "--simulate", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, **(env or {})),
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(url: str, seconds: float = 30) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            return _get(url)[1]
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"{url} did not answer in {seconds} s")


def test_a_port_in_use_is_one_line():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = _exporter("--listen", f"127.0.0.1:{port}")
        _, err = process.communicate(timeout=60)
    assert process.returncode == 2
    assert err.strip() == (
        f"Error: --listen: cannot listen on 127.0.0.1:{port}: Address already in use"
    )


def test_a_gpu_that_is_not_there_is_refused_before_serving():
    port = _free_port()
    process = _exporter(
        "-g", "1,9", "--listen", f"127.0.0.1:{port}", env={"XFERSCOPE_SIMULATE_GPUS": "2"}
    )
    try:
        _, err = process.communicate(timeout=20)
    finally:
        process.kill()
    assert process.returncode == 2
    assert err.strip() == "Error: --device: no GPU with index 9; this machine has 0..1"


def test_no_gpu_at_all_is_the_no_gpu_line_not_an_empty_endpoint():
    """CUDA_VISIBLE_DEVICES="" hides every GPU a driver has, so on any host the native engine
    lists none: the exporter refuses as every command does, and serves nothing."""
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "xferscope", "exporter", "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, CUDA_VISIBLE_DEVICES=""),
    )
    try:
        _, err = process.communicate(timeout=20)
    finally:
        process.kill()
    assert process.returncode == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: no CUDA device"), err
    assert "serving" not in err


def test_sigterm_during_a_measurement_stops_within_two_seconds_publishing_nothing():
    port = _free_port()
    # the simulated measurement in real time: `run --quick` takes about ten seconds
    process = _exporter("--listen", f"127.0.0.1:{port}", env={"XFERSCOPE_SIMULATE_PACE": "1"})
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_for(f"{base}/healthz")
        deadline = time.monotonic() + 30
        measuring = (
            'xferscope_measuring{gpu="0",uuid="GPU-00000000-0000-0000-0000-000000000000"} 1.0'
        )
        while measuring not in (text := _get(f"{base}/metrics")[1]):
            assert time.monotonic() < deadline, "no measurement began"
            time.sleep(0.1)
        assert "xferscope_bandwidth_bytes_per_second{" not in text
        children = _children(process.pid)
        commands = [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in children]
        assert any(b"spawn_main" in c for c in commands), "the measurement runs in a child"
        start = time.monotonic()
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=10)
        took = time.monotonic() - start
    finally:
        if process.poll() is None:
            process.kill()
    assert took < 2.0, took
    assert process.returncode == 143
    assert "Traceback" not in err
    # the measuring child is killed with it (the resource tracker leaves by itself once its
    # pipe closes)
    deadline = time.monotonic() + 2
    while [pid for pid in children if _alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in children if _alive(pid)]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def test_nvml_busy_counts_other_processes_and_utilisation(monkeypatch):
    from xferscope.core import nvml

    answers: dict[str, object] = {}
    monkeypatch.setattr(nvml, "activity", lambda uuid: answers.get(uuid))
    answers["idle"] = {"utilization_percent": 3, "pids": [os.getpid()]}  # itself only
    answers["other"] = {"utilization_percent": 3, "pids": [os.getpid(), 4242]}
    answers["hot"] = {"utilization_percent": 50, "pids": []}
    assert service.nvml_busy("idle", 10) == (None, 3.0)
    assert service.nvml_busy("other", 10) == (service.OTHER_PROCESS, 3.0)
    assert service.nvml_busy("other", 10, busy_processes=1) == (None, 3.0)
    assert service.nvml_busy("hot", 10, busy_processes=5) == (service.BUSY, 50.0)
    assert service.nvml_busy("no nvml", 10) == (None, None)


def test_a_gpu_fallen_off_the_bus_fails_alone_and_the_rest_is_served(monkeypatch):
    """The simulated GPU 1 fails every transfer with a CUDA error, in the measuring child as a
    GPU gone from the bus does: GPU 1 is stale with nothing to serve, GPU 0 measured."""
    monkeypatch.setenv("XFERSCOPE_SIMULATE_GPUS", "2")
    monkeypatch.setenv("XFERSCOPE_SIMULATE_FAIL", "1")
    said: list[str] = []
    exporter = Exporter(ExporterOptions(simulate=True), say=said.append)
    exporter.discover()
    for gpu in exporter.gpus.values():
        exporter.attempt(gpu)
    scraped = samples(exporter)
    assert value(scraped, "xferscope_measurements_total", gpu="1", outcome="failed") == 1
    assert value(scraped, "xferscope_measurement_stale", gpu="1") == 1
    assert value(scraped, "xferscope_measurement_stale", gpu="0") == 0
    served = {dict(labels)["gpu"] for name, labels in scraped
              if name == "xferscope_bandwidth_bytes_per_second"}  # fmt: skip
    assert served == {"0"}
    assert len(said) == 1 and said[0].startswith("GPU 1: measurement failed (CUDA error: ")
    assert said[0].endswith("; nothing to serve for it yet")
