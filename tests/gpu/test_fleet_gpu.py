"""`xferscope fleet` on real GPUs: one rank per GPU under mpirun, every rank on its own GPU, each
complete with its link's figures, and the fleet document's statistics over them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu


def test_one_rank_per_gpu(native_engine, tmp_path):
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("no mpirun")
    pytest.importorskip("mpi4py")
    gpus = native_engine.device_count()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
               NVSHMEM_DISABLE_NVLS="1")  # fmt: skip
    done = subprocess.run(
        [mpirun, "-np", str(gpus), sys.executable, "-m", "xferscope", "fleet", "--no-history",
         "-o", str(tmp_path / "out"), "--json", str(tmp_path / "f.json")],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    doc = json.loads((tmp_path / "f.json").read_text())
    print(done.stdout[-3000:])
    assert [r["status"] for r in doc["ranks"]] == ["complete"] * gpus, done.stderr
    assert sorted(r["device"] for r in doc["ranks"]) == list(range(gpus))
    assert len({r["gpu"]["uuid"] for r in doc["ranks"]}) == gpus
    for r in doc["ranks"]:  # a real transfer: at least a fifth of the GPU's own link
        limit = r["gpu"].get("pcie_peak_bps") or r["gpu"].get("pcie_peak_max_bps") or 5e10
        assert r["metrics"]["h2d/pinned/async/device/bandwidth"] > limit / 5, (r["gpu"], limit)
    assert doc["passed"] == (done.returncode == 0)
    if gpus > 1:  # every pair of GPUs through NCCL, both ways, data checked
        pairs = {(p["source"], p["destination"]): p for p in doc["pairs"]}
        assert len(pairs) == gpus * (gpus - 1), doc["pairs_note"]
        # verified, and a real transfer (any peer path, through the host too, moves 1 GB/s)
        assert all(p["verified"] and p["bandwidth_bps"] > 1e9 for p in pairs.values())
