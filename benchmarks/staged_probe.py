"""Issue 49, the staged copy of 1 GiB against pinned memory (goal 0.95), with xferscope's own
StagedCopier: its default plan and 20 thread/chunk plans, both ways, beside PyTorch's pinned copy
and (the host's floors by PyTorch's CPU copy) host memcpy between pageable and pinned memory at 1-16
threads, alone and while a pinned DMA runs. Prints and writes (argv[1]) one JSON object.

    python3 benchmarks/staged_probe.py out.json
"""

import json
import statistics
import sys
import time
from pathlib import Path

import torch

import xferscope
from xferscope import StagedCopier

N = 1 << 30
R = 5
out = {}
g = torch.Generator().manual_seed(1)
page = torch.randint(0, 255, (N,), dtype=torch.uint8, generator=g)
page2 = torch.randint(0, 255, (N,), dtype=torch.uint8, generator=g)
pin = torch.empty(N, dtype=torch.uint8, pin_memory=True)
pin.copy_(page)
pin2 = torch.empty(N, dtype=torch.uint8, pin_memory=True)
pin2.copy_(page2)
dev = torch.empty(N, dtype=torch.uint8, device="cuda")
dev2 = torch.empty(N, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()


def rate(fn, r=R):
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(r):
        a = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - a)
    return round(N / statistics.median(ts) / 1e9, 2)


out["pinned_up"] = rate(lambda: dev.copy_(pin))
out["pinned_down"] = rate(lambda: pin.copy_(dev))
out["torch_pageable_up"] = rate(lambda: dev.copy_(page), 2)
hp = page.numpy()
hp2 = page2.numpy()
for t in (1, 2, 4, 8, 12, 16):
    torch.set_num_threads(t)
    out[f"host_pageable_to_pinned_t{t}"] = rate(lambda: pin2.copy_(page))
    out[f"host_pinned_to_pageable_t{t}"] = rate(lambda: page2.copy_(pin))
# host memcpy while a pinned DMA of 1 GiB runs (contention)
s = torch.cuda.Stream()
for t in (4, 8, 12, 16):
    torch.set_num_threads(t)
    for d in ("up", "down"):
        ts = []
        for _ in range(3):
            torch.cuda.synchronize()
            with torch.cuda.stream(s):
                e0 = torch.cuda.Event(enable_timing=True)
                e1 = torch.cuda.Event(enable_timing=True)
                e0.record(s)
                if d == "up":
                    dev2.copy_(pin, non_blocking=True)
                else:
                    pin.copy_(dev2, non_blocking=True)
                e1.record(s)
            a = time.perf_counter()
            if d == "up":
                pin2.copy_(page)
            else:
                page2.copy_(pin2)
            host_s = time.perf_counter() - a
            torch.cuda.synchronize()
            ts.append((N / host_s / 1e9, N / (e0.elapsed_time(e1) / 1e3) / 1e9))
        out[f"contended_{d}_t{t}_host_dma"] = [
            round(statistics.median(x), 2) for x in zip(*ts, strict=True)
        ]
torch.set_num_threads(16)
c = StagedCopier(0)
out["default_plan"] = c.plan.to_dict() if hasattr(c.plan, "to_dict") else str(c.plan)
dp = dev.data_ptr()
out["staged_default_up"] = rate(lambda: c.to_device(dp, hp))
out["staged_default_down"] = rate(lambda: c.to_host(hp2, dp))
c.close()
out["api_copy_to_device"] = rate(lambda: xferscope.copy_to_device(dev, page))
out["api_copy_to_host"] = rate(lambda: xferscope.copy_to_host(page2, dev))
for th in (4, 6, 8, 12, 16):
    for ch in (2, 4, 8, 16):
        planned = StagedCopier(0, threads=th, chunk_bytes=ch << 20)
        out[f"staged_t{th}_c{ch}"] = (
            rate(lambda cp=planned: cp.to_device(dp, hp)),
            rate(lambda cp=planned: cp.to_host(hp2, dp)),
        )
        planned.close()
Path(sys.argv[1]).write_text(json.dumps(out, indent=1))
print(json.dumps(out))
