"""The HTML report of a run: self-contained, findings first, banners when they apply, escaped."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from xferscope.core.findings import ERROR, INFO, OK, WARNING, Finding
from xferscope.report.run_html import render_html, write_html
from xferscope.report.style import SIMULATED as SIMULATED_BANNER
from xferscope.run.records import Concurrent, RunResult

from .run_samples import sample_run

PLOT_DIV = 'class="plotly-graph-div"'


def _body(page: str) -> str:
    """The page after <head>: plotly.js, inlined there, holds strings of its own."""
    return page[page.index("<body>") :]


def _unescaped(text: str) -> str:
    """The figures' JSON as plotly writes it, with \\u003c for < and \\u002f for /, made
    readable."""
    return re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), text)


def _without_scripts(page: str) -> str:
    return re.sub(r"<script>.*?</script>", "", page, flags=re.DOTALL)


@pytest.fixture(scope="module")
def two_gpus() -> RunResult:
    return sample_run(gpus=2)


@pytest.fixture(scope="module")
def page(two_gpus: RunResult) -> str:
    return render_html(two_gpus, files=["run.json", "run.csv", "run-bandwidth.png"])


def test_page_fetches_nothing(page: str) -> None:
    assert page.startswith("<!DOCTYPE html>")
    lowered = page.lower()
    assert "<script src" not in lowered
    assert not re.search(r"<script[^>]*\bsrc\s*=", lowered)
    assert "<link" not in lowered
    assert "<img" not in lowered
    markup = _without_scripts(lowered)
    assert "@import" not in markup
    assert not re.search(r"\b(src|href)\s*=\s*[\"']?(https?:)?//", markup)
    assert "url(" not in markup


def test_plotly_js_is_inlined_once(page: str) -> None:
    head = page[: page.index("</head>")]
    assert head.count("<script>") == 2  # the PlotlyConfig line and plotly.js itself
    assert len(head) > 1_000_000
    assert _body(page).count("Plotly.newPlot") == _body(page).count(PLOT_DIV)


def test_findings_come_first_worst_first(page: str, two_gpus: RunResult) -> None:
    body = _body(page)
    first_plot = body.index(PLOT_DIV)
    by_severity = {f.severity: f for f in two_gpus.findings}
    positions = [body.index(by_severity[s].message) for s in (ERROR, WARNING, OK)]
    assert positions == sorted(positions)
    assert positions[-1] < first_plot
    for finding in two_gpus.findings:
        assert f'class="finding {finding.severity}"' in body
        for text in (finding.cause, finding.fix):
            assert text in body


def test_unknown_and_info_severities_sort_after_the_known_worse_ones(two_gpus: RunResult) -> None:
    extra = (
        Finding("odd", "weird", None, "x", None, None, "message of an odd severity"),
        Finding("note", INFO, None, "x", None, None, "message of an info"),
    )
    body = _body(render_html(dataclasses.replace(two_gpus, findings=extra + two_gpus.findings)))
    order = [
        body.index(m)
        for m in (
            "3 bytes arrived wrong",
            "pageable H2D reaches",
            "message of an info",
            "H2D pinned reaches",
            "message of an odd severity",
        )
    ]
    assert order == sorted(order)


def test_header_names_the_run(page: str, two_gpus: RunResult) -> None:
    body = _body(page)
    assert "<h1>xferscope run</h1>" in body
    # The CPU is the fictional one of tests/conftest.py, whatever machine runs the tests.
    cpu = "Intel(R) Xeon(R) Test CPU @ 2.10GHz, 12 cores, 2 NUMA nodes"
    for text in (two_gpus.created, two_gpus.mode, "12.5 s", cpu, "CUDA runtime"):
        assert text in body


def test_simulated_banner_iff_simulated(page: str) -> None:
    assert SIMULATED_BANNER in _body(page)
    measured = render_html(sample_run(gpus=1, simulated=False))
    assert SIMULATED_BANNER not in measured
    assert "SIMULATED" not in _body(measured)


@pytest.mark.parametrize(
    ("kwargs", "incomplete"),
    [
        ({}, False),
        ({"interrupted": True}, True),
        ({"failed_gpu": 1}, True),
    ],
)
def test_incomplete_banner_iff_interrupted_or_a_gpu_failed(
    kwargs: dict[str, object], incomplete: bool
) -> None:
    body = _body(render_html(sample_run(gpus=2, **kwargs)))  # type: ignore[arg-type]
    assert ("INCOMPLETE:" in body) is incomplete


def test_failed_gpu_shows_its_error_and_no_plots() -> None:
    result = sample_run(gpus=2, failed_gpu=1)
    body = _body(render_html(result))
    section = body[body.index('id="gpu1"') :]
    section = section[: section.index("</section>")]
    assert "CUDA error: cudaErrorLaunchFailure" in section
    assert 'class="gpu-error"' in section
    assert PLOT_DIV not in section
    # GPU 0's curves: a bandwidth and a latency plot for each direction panel.
    panels = {c.config.direction for c in result.gpus[0].curves}
    assert body.count('id="plot-gpu0-') == 2 * len(panels)


def test_gpu_sections_have_plots_and_tables(page: str) -> None:
    body = _unescaped(_body(page))
    for gpu in (0, 1):
        assert f'id="plot-gpu{gpu}-h2d-bandwidth"' in body
        assert f'id="plot-gpu{gpu}-d2h-latency"' in body
    assert "PCIe limit 63 GB/s" in body  # the dashed line's legend entry
    assert "PCIe Gen5 x16 (max Gen5 x16)" in body
    assert "NUMA node 0" in body
    assert "Headline figures per curve" in body
    assert "88% of PCIe" in body
    assert "Concurrent copies" in body
    assert "cudaMallocHost + cudaFreeHost" in body
    assert "4.8 transfers of 1 GiB" in body  # (0.339 + 0.067) / (0.104 - 0.0194)
    # The size axis is labelled in binary units.
    for tick in ('"1 B"', '"1 KiB"', '"1 MiB"'):
        assert tick in body


def test_p2p_matrix_for_two_gpus_not_for_one(page: str) -> None:
    body = _body(page)
    assert 'id="plot-p2p-0"' in body
    assert "Peer to peer, copy engines, peer access on, one way" in body
    assert "All GPUs to and from the host at once" in body
    assert "50% of total" in body

    one = _body(render_html(sample_run(gpus=1)))
    assert "plot-p2p" not in one
    assert 'id="multi"' not in one


def test_one_matrix_per_mechanism_access_and_direction(two_gpus: RunResult) -> None:
    p2p = next(c for c in two_gpus.multi if c.kind == "p2p")
    extra = (
        dataclasses.replace(p2p, label="1-0/async/peer/one_way"),
        dataclasses.replace(p2p, label="0-1/kernel/peer/one_way", mechanism="kernel"),
        dataclasses.replace(p2p, label="0-1/async/nopeer/both", peer_access=False),
        Concurrent(
            "p2p", "1-0/async/peer/one_way/x", "async", True, "failed", "no <P2P>", streams=()
        ),
    )
    body = _body(render_html(dataclasses.replace(two_gpus, multi=two_gpus.multi + extra)))
    assert body.count('id="plot-p2p-') == 3
    assert "copy engines, peer access off, both directions at once" in body
    assert "SM copy kernel" in body
    assert "no &lt;P2P&gt;" in body


def test_strings_from_the_result_are_escaped(two_gpus: RunResult) -> None:
    hostile = "<script>alert('x')</script>"
    finding = Finding("evil", ERROR, 0, "gpu0/x", None, None, hostile, f"cause {hostile}", "fix")
    result = dataclasses.replace(
        two_gpus, findings=(finding,), notes=(hostile,), tool_version=hostile
    )
    page = render_html(result)
    assert hostile not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in _body(page)


def test_footer_links_the_other_files_relatively(page: str) -> None:
    body = _body(page)
    footer = body[body.index("<footer>") :]
    for name in ("run.json", "run.csv", "run-bandwidth.png"):
        assert f'<a href="{name}">{name}</a>' in footer
    odd = _body(render_html(sample_run(gpus=1), files=['a "b".json']))
    assert '<a href="a%20%22b%22.json">a &quot;b&quot;.json</a>' in odd


def test_write_html_writes_the_page(tmp_path: Path, two_gpus: RunResult) -> None:
    path = write_html(two_gpus, tmp_path / "report.html", files=["run.json"])
    assert path == tmp_path / "report.html"
    text = path.read_text(encoding="utf-8")
    assert text == render_html(two_gpus, files=["run.json"])
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]  # no temporary left behind
