"""Every host memory kind on one GPU (issue 34): `xferscope sweep` over each kind, both
directions, by cudaMemcpy, copy engines and SM copies, device time, every point verified, with
the host memory placed on each NUMA node of the host; what this machine lacks waived with the
reason. The pinned copies against PyTorch's in the same call.

    python3 benchmarks/memory_kinds_bench.py --commit $(git rev-parse HEAD)

Writes benchmarks/results/memory-kinds-<gpu>-<date>.json as ../shared/BENCHMARKS.md says.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from foundation import bench_parser, comparison, torch_copy_seconds, write_record
from xferscope.core import cases

SIZES = (4096, 64 << 20)


def main() -> None:
    args = bench_parser(__doc__).parse_args()
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(
            [
                sys.executable, "-m", "xferscope", "sweep", "--no-history", "-o", out,
                "-m", ",".join(cases.HOST_MEMORY), "-d", "h2d,d2h",
                "--mechanism", "memcpy,async,kernel", "--timing", "device",
                "--sizes", ",".join(map(str, SIZES)), "--target-time", "0.005", "--budget", "2",
                "--numa-node", "all",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        (document,) = Path(out).glob("*/sweep.json")
        doc = json.loads(document.read_text())
    kinds: dict = {}
    for c in doc["curves"]:
        k = c["config"]
        small, large = c["points"][0], c["points"][-1]
        kinds.setdefault(k["memory"], {})[
            f"{k['direction']}_{k['mechanism']}_node{k.get('numa_node')}"
        ] = {
            "bandwidth_gbps_64MiB": round(large["summary"]["bandwidth_gbps"], 3),
            "latency_us_4KiB": round(small["summary"]["median_s"] * 1e6, 3),
            "verified": all((p.get("verification") or {}).get("ok") for p in c["points"]),
            "pages_on_node": c.get("host_node"),
            "status": c["status"],
        }
    waived = {
        f["message"].split(":")[0].removeprefix("skipped -m ").strip(): f["message"].split(
            "waived on this machine: ", 1
        )[1]
        for f in doc["findings"]
        if f["code"] == "skipped" and "waived on this machine" in f["message"]
    }
    comparisons = []
    for direction in ("h2d", "d2h"):
        ours = kinds["pinned"][f"{direction}_async_node0"]["bandwidth_gbps_64MiB"]
        theirs = SIZES[1] / torch_copy_seconds(direction, SIZES[1]) / 1e9
        comparisons.append(
            comparison(
                f"sweep_{direction}_pinned_async_64MiB_node0_vs_torch",
                ours,
                theirs,
                "torch copy_ from pinned memory (events)",
                "GB/s",
                True,
                0.99,
            )
        )
    figures = {
        "kinds_measured": sorted(kinds),
        "kinds_waived": waived,
        "every_point_verified": all(v["verified"] for k in kinds.values() for v in k.values()),
        "numa_nodes": sorted({c["config"].get("numa_node") for c in doc["curves"]}),
        "by_kind": kinds,
        "sweep_options": "device time, --target-time 0.005, --budget 2, 4 KiB and 64 MiB",
    }
    write_record(
        "memory-kinds", args.commit, doc["machine"], 1, comparisons, figures, Path(args.out)
    )


if __name__ == "__main__":
    main()
