"""Does a shorter trial change the small-copy latency `run` reports? (issue 32)

`run` times trials of 5 ms (1 ms with --quick) where it once stretched them to fill a budget
(about 0.25 s, NetPIPE's TARGET). This measures the 1-byte latency of the run's headline curves
(pinned H2D and D2H by copy engines, device time; device to device; pageable H2D and D2H by
cudaMemcpy, API time) with `xferscope sweep` at each trial length, 7 trials a size, in rounds
that interleave the lengths, and compares each length's median over the rounds with 0.25 s
trials'. The rounds' own spread is recorded beside it: a difference inside it is noise.

    python3 benchmarks/latency_trials.py --commit $(git rev-parse HEAD) [--rounds 3]

Writes benchmarks/results/latency-trials-<gpu>-<date>.json as ../shared/BENCHMARKS.md says.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from foundation import bench_parser, comparison, rounds_count, write_record

LENGTHS_S = (0.001, 0.005, 0.25)  # --quick's, the default run's, and the budget-filled trial
REFERENCE_S = 0.25
CURVES = (  # (sweep options, labels of the curves they measure)
    (["-d", "h2d,d2h", "-m", "pinned", "--mechanism", "async", "--timing", "device"],),
    (["-d", "d2d", "--mechanism", "async", "--timing", "device"],),
    (["-d", "h2d,d2h", "-m", "pageable", "--mechanism", "memcpy", "--timing", "api"],),
)


def one_byte_latencies(options: list[str], trial_s: float) -> tuple[dict[str, float], dict]:
    """Each curve's median 1 B latency (µs) of 7 trials of `trial_s`, and the sweep's machine."""
    with tempfile.TemporaryDirectory() as out:
        sweep = [sys.executable, "-m", "xferscope", "sweep", "--no-history", "--sizes", "1"]
        timing = ["--trials", "7", "--max-trials", "7", "--target-time", str(trial_s)]
        subprocess.run(
            [*sweep, *timing, "--budget", "60", "-o", out, *options],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        (document,) = Path(out).glob("*/sweep.json")
        doc = json.loads(document.read_text())
    latencies = {
        c["label"]: statistics.median(c["points"][0]["samples_s"]) * 1e6 for c in doc["curves"]
    }
    return latencies, doc["machine"]


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument(
        "--rounds", type=rounds_count, default=3, help="rounds of every trial length"
    )
    args = parser.parse_args()
    seen: dict[tuple[str, float], list[float]] = {}
    machine: dict = {}
    for _ in range(args.rounds):
        for trial_s in LENGTHS_S:
            for (options,) in CURVES:
                latencies, machine = one_byte_latencies(options, trial_s)
                for label, us in latencies.items():
                    seen.setdefault((label, trial_s), []).append(us)
    comparisons = []
    figures: dict = {"rounds": args.rounds, "trials_per_size": 7, "latency_us": {}}
    for label in sorted({label for label, _ in seen}):
        reference = statistics.median(seen[(label, REFERENCE_S)])
        rounds = {f"{t * 1e3:g}ms": [round(v, 3) for v in seen[(label, t)]] for t in LENGTHS_S}
        figures["latency_us"][label] = rounds
        for trial_s in LENGTHS_S:
            if trial_s == REFERENCE_S:
                continue
            name = f"{label.replace(' ', '_')}_1B_{trial_s * 1e3:g}ms_vs_250ms_trials"
            ours = statistics.median(seen[(label, trial_s)])
            # lower is better; the goal is the issue's 1%, which the rounds' spread may exceed
            comparisons.append(
                comparison(name, ours, reference, "0.25 s trials", "us", False, 0.99)
            )
        values = [v for t in LENGTHS_S for v in seen[(label, t)]]
        figures["latency_us"][label]["spread_of_all_rounds"] = round(
            (max(values) - min(values)) / statistics.median(values), 4
        )
    write_record("latency-trials", args.commit, machine, 1, comparisons, figures, Path(args.out))


if __name__ == "__main__":
    main()
