"""The host memory kinds beyond pageable and pinned (issue 34) on the simulated engine: huge
pages (transparent and hugetlb), read-only registration, portable pinned memory, system memory
the GPU reads in place and managed memory. What the fictional machine lacks (tests/conftest.py:
no reserved huge pages; the model's GPU: x86 without HMM or read-only registration) is waived
once per kind with the reason, the rest measured and verified."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xferscope import cli
from xferscope.core import cases, host
from xferscope.core.engine import memory_refusal
from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.core.engine.simulated_link import _model

SWEEP = ["sweep", "--simulate", "--quick", "--sizes", "4KiB,1MiB", "--no-history"]


def test_a_sweep_measures_what_the_machine_has_and_waives_the_rest_once(capsys, tmp_path):
    code = cli.main(
        [*SWEEP, "-o", str(tmp_path), "-m", "thp,hugetlb,system,portable,managed", "-d", "h2d,d2h"]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    (document,) = Path(tmp_path).glob("*/sweep.json")
    doc = json.loads(document.read_text())
    measured = {c["config"]["memory"] for c in doc["curves"]}
    assert measured == {"thp", "portable", "managed"}
    for c in doc["curves"]:
        assert all(p["verification"]["ok"] for p in c["points"]), c["config"]
    notes = [f["message"] for f in doc["findings"] if f["code"] == "skipped"]
    waived = [n for n in notes if "waived on this machine" in n]
    assert len(waived) == 2, waived  # one per kind, whatever the directions and mechanisms
    assert any("-m hugetlb" in n and "sysctl vm.nr_hugepages" in n for n in waived)
    assert any("-m system" in n and "pageableMemoryAccess 0" in n for n in waived)


def test_a_sweep_of_only_what_the_machine_lacks_is_one_line(capsys, tmp_path):
    code = cli.main([*SWEEP, "-o", str(tmp_path), "-m", "readonly", "-d", "h2d"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert "-m/--memory" in lines[0] and "cudaHostRegisterReadOnly" in lines[0]
    assert not list(Path(tmp_path).glob("*"))  # refused before any output directory


def test_readonly_memory_moves_host_to_device_only():
    for direction in ("d2h", "roundtrip"):
        assert "h2d copies only" in (cases.refusal(direction, "readonly", "async") or "")
    assert cases.refusal("h2d", "readonly", "kernel") is None


def test_huge_pages_are_read_from_the_kernels_files(monkeypatch):
    files = {
        "/sys/kernel/mm/transparent_hugepage/enabled": "always [madvise] never",
        "/proc/meminfo": "MemTotal: 100 kB\nHugePages_Total: 8\nHugePages_Free: 3\n"
        "Hugepagesize:       2048 kB\n",
    }
    monkeypatch.setattr(host, "_read", lambda path: files.get(str(path)))
    assert host.huge_pages() == {
        "thp": "madvise",
        "hugetlb_page_bytes": 2 << 20,
        "hugetlb_free_bytes": 3 * (2 << 20),
    }
    files.clear()  # a kernel without either: no mode, nothing reserved
    assert host.huge_pages() == {"thp": None, "hugetlb_page_bytes": None, "hugetlb_free_bytes": 0}


@pytest.mark.parametrize(
    ("memory", "facts", "words"),
    [
        ("thp", {"thp": "never"}, "transparent huge pages are off"),
        ("thp", {"thp": None}, "transparent huge pages are off"),
        ("hugetlb", {"hugetlb_free_bytes": 0}, "no huge pages are reserved"),
    ],
)
def test_a_host_without_huge_pages_waives_them(monkeypatch, memory, facts, words):
    monkeypatch.setattr(host, "host_facts", lambda: {"huge_pages": facts})
    assert words in (memory_refusal(SimulatedEngine(), 0, memory) or "")


def test_a_host_with_reserved_huge_pages_measures_hugetlb(monkeypatch):
    pages = {"thp": "always", "hugetlb_free_bytes": 1 << 30, "hugetlb_page_bytes": 2 << 20}
    monkeypatch.setattr(host, "host_facts", lambda: {"huge_pages": pages})
    engine = SimulatedEngine()
    t = engine.open_transfer(0, "h2d", "hugetlb", "memcpy", 1 << 20, 0)
    try:
        t.fill(7)
        assert t.time("api", 1 << 20, 2).seconds > 0 and t.verify(1 << 20).ok
    finally:
        t.close()


def test_a_gpu_with_hmm_reads_system_memory_in_place(monkeypatch):
    engine = SimulatedEngine()
    facts = dict(engine.device_info(0), pageable_memory_access=True)
    monkeypatch.setattr(engine, "device_info", lambda index: facts)
    t = engine.open_transfer(0, "h2d", "system", "kernel", 1 << 20, 0)
    t.close()


def test_the_model_stages_malloc_like_kinds_and_pins_the_others():
    pageable = _model("h2d", "pageable", "memcpy", "api").bandwidth
    pinned = _model("h2d", "pinned", "memcpy", "api").bandwidth
    for memory in cases.DRIVER_STAGED:
        assert _model("h2d", memory, "memcpy", "api").bandwidth == pageable
    for memory in ("portable", "readonly", "managed"):
        assert _model("h2d", memory, "memcpy", "api").bandwidth == pinned
    assert set(cases.DRIVER_STAGED) == {"pageable", "thp", "hugetlb", "system"}


def test_info_says_what_the_host_and_gpus_offer(capsys):
    code = cli.main(["info", "--simulate"])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0
    # the fixed host: THP on madvise, nothing reserved; the model's GPU: managed memory only
    assert (
        "host memory: transparent huge pages madvise; no huge pages reserved; "
        "GPU 0 reads managed memory in place" in out
    )
