"""What the benchmark's fed loops (pageable_loop.py, small_tensors.py, cupy_loop.py) share: their
options (--steps, --fixed: the program with its fix, --resident: its data kept on the GPU) and
the JSON line that reports the loop's time."""

import argparse
import json


def options(steps: int) -> argparse.Namespace:
    """The command line, with `steps` steps by default."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--fixed", action="store_true")
    parser.add_argument("--resident", action="store_true")
    return parser.parse_args()


def report(steps: int, seconds: float) -> None:
    """The line trace_bench.py reads: the steps and the loop's seconds."""
    print(json.dumps({"steps": steps, "seconds": seconds}))
