"""The HTML report drawn by a real browser: headless Chromium through selenium.

Skips cleanly where chromium, chromedriver or selenium is missing. On Debian:
`apt-get install -y chromium chromium-driver` and `pip install selenium`. The driver is the
system one (never downloaded by selenium), and the page must draw with no network.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from xferscope.report.run_html import write_html

from ..unit.run_samples import sample_run

ARTIFACTS = Path(__file__).parent / "artifacts"
RENDER_TIMEOUT_S = 20.0


def _browser_binary() -> str | None:
    return next(
        (
            path
            for name in ("chromium", "chromium-browser", "google-chrome")
            if (path := shutil.which(name))
        ),
        None,
    )


@pytest.fixture
def driver():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    browser, chromedriver = _browser_binary(), shutil.which("chromedriver")
    if browser is None or chromedriver is None:
        pytest.skip(
            "chromium or chromedriver is not installed (apt-get install chromium chromium-driver)"
        )
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,2000"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
    yield driver
    driver.quit()


def _drawn(driver) -> tuple[int, int]:
    """(plot divs, plot divs that plotly has drawn an SVG into)."""
    return driver.execute_script(
        "const plots = document.querySelectorAll('.plotly-graph-div');"
        "const drawn = [...plots].filter("
        "  p => p.classList.contains('js-plotly-plot') && p.querySelector('svg.main-svg'));"
        "return [plots.length, drawn.length];"
    )


def _wait_drawn(driver, expected: int) -> tuple[int, int]:
    deadline = time.monotonic() + RENDER_TIMEOUT_S
    plots, drawn = _drawn(driver)
    while drawn < expected and time.monotonic() < deadline:
        time.sleep(0.2)
        plots, drawn = _drawn(driver)
    return plots, drawn


def test_report_draws_every_plot_without_errors(driver, tmp_path: Path) -> None:
    result = sample_run(gpus=2)
    page = write_html(result, tmp_path / "report.html", files=["run.json", "run.csv"])
    # Per GPU, a bandwidth and a latency plot for each direction it has curves in (one panel
    # per direction), and one p2p matrix.
    expected = 2 * sum(len({c.config.direction for c in g.curves}) for g in result.gpus) + 1

    driver.get(page.as_uri())
    plots, drawn = _wait_drawn(driver, expected)

    ARTIFACTS.mkdir(exist_ok=True)
    height = driver.execute_script("return document.body.scrollHeight")
    driver.set_window_size(1400, min(int(height) + 100, 16000))
    driver.save_screenshot(str(ARTIFACTS / "report.png"))

    severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == []
    assert (plots, drawn) == (expected, expected)
    traces = driver.execute_script(
        "return [...document.querySelectorAll('.js-plotly-plot')].map("
        "  p => p.querySelectorAll('.scatterlayer .trace, .heatmaplayer .hm').length);"
    )
    assert len(traces) == expected
    assert all(n > 0 for n in traces), traces
    # The first panel (GPU 0, host to device) draws one trace per curve and the PCIe limit.
    curves = len([c for c in result.gpus[0].curves if c.config.direction == "h2d"])
    assert traces[0] == curves + 1
    assert driver.find_element("css selector", ".banner.simulated").is_displayed()
    assert driver.title.startswith("SIMULATED xferscope run")


def test_the_trace_page_draws_its_timeline(driver, tmp_path: Path) -> None:
    """The trace recorded on an H100 (tests/data/trace): the timeline draws copies and kernels
    from the first GPU activity, its axis no longer than the span to the last (the whole run,
    start-up and steps: wider than the steps' span the shares are of)."""
    from xferscope.report.trace_html import render_trace_html
    from xferscope.trace.analyze import analyze
    from xferscope.trace.document import TraceResult, copy_dict, findings_of, summary_dict
    from xferscope.trace.reading import read_trace

    trace = read_trace([Path(__file__).parent.parent / "data" / "trace" / "copies-small20.jsonl"])
    analysis = analyze(trace, 0.7, None)
    summary = summary_dict(analysis, trace, None)
    result = TraceResult(
        0,
        None,
        trace.processes,
        summary,
        # and one copy whose times CUPTI left at 0: it must not stretch the axis to the epoch
        (
            *(copy_dict(trace, c) for c in trace.copies),
            copy_dict(trace, trace.copies[0]) | {"start_ns": 0, "end_ns": 0},
        ),
        tool_version="test",
        created="2026-11-23T00:00:00+00:00",
        simulated=False,
        machine={},
        options={"command": ["copies"]},
        interrupted=False,
        wall_s=0.7,
        findings=tuple(findings_of(analysis, summary["span_s"])),
    )
    page = tmp_path / "trace.html"
    page.write_text(render_trace_html(result), encoding="utf-8")
    driver.get(page.as_uri())
    assert _wait_drawn(driver, 1) == (1, 1)
    assert [e for e in driver.get_log("browser") if e["level"] == "SEVERE"] == []
    bars = driver.execute_script("return document.querySelectorAll('.barlayer .point').length")
    assert bars >= len(trace.copies)  # every copy, and the kernels
    low, high = driver.execute_script(
        "return document.getElementById('plot-timeline')._fullLayout.xaxis.range"
    )
    work = [*trace.copies, *trace.intervals]
    whole_ms = (max(x.end_ns for x in work) - min(x.start_ns for x in work)) * 1e-6
    assert low <= 0 and 0 < high <= 1.1 * whole_ms, (low, high)
    assert summary["span_s"] * 1e3 < whole_ms  # the steps' span, within it


def test_the_gemm_page_draws_its_chart(driver, tmp_path: Path) -> None:
    from xferscope.core.engine.simulated import SimulatedEngine
    from xferscope.gemm.measure import measure
    from xferscope.gemm.records import GemmOptions
    from xferscope.gemm.shapes import parse_sizes
    from xferscope.report.gemm_html import render_gemm_html

    result = measure(
        SimulatedEngine(),
        GemmOptions(precisions=("fp32", "bf16"), shapes=parse_sizes("--sizes", "2048,4096")),
    )
    page = tmp_path / "gemm.html"
    page.write_text(render_gemm_html(result), encoding="utf-8")
    driver.get(page.as_uri())
    assert _wait_drawn(driver, 1) == (1, 1)
    assert [e for e in driver.get_log("browser") if e["level"] == "SEVERE"] == []


def test_the_batch_page_draws_its_maps(driver, tmp_path: Path) -> None:
    from xferscope.batch.measure import BatchOptions, measure
    from xferscope.core.engine.simulated import SimulatedEngine
    from xferscope.report.batch_html import render_batch_html

    result = measure(SimulatedEngine(), BatchOptions(counts=(1, 256), sizes=(64, 65536)))
    page = tmp_path / "batch.html"
    page.write_text(render_batch_html(result), encoding="utf-8")
    driver.get(page.as_uri())
    assert _wait_drawn(driver, 5) == (5, 5)  # h2d and d2h, pinned and pageable, and d2d
    assert [e for e in driver.get_log("browser") if e["level"] == "SEVERE"] == []
