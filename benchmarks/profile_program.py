"""Run a Python program under torch.profiler (CPU and CUDA activities) and write its Chrome
trace, the input HTA reads (benchmarks/trace_peers.py):

    python3 benchmarks/profile_program.py OUT.json PROGRAM.py [ARGS...]
"""

import runpy
import sys
from pathlib import Path

import torch

out, program, *args = sys.argv[1:]
sys.argv = [program, *args]
sys.path.insert(0, str(Path(program).resolve().parent))  # as `python3 PROGRAM.py` would
activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
with torch.profiler.profile(activities=activities) as profile:
    runpy.run_path(program, run_name="__main__")
profile.export_chrome_trace(out)
