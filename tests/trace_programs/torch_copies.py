"""A PyTorch program for `xferscope trace`'s tests: uploads from pageable and pinned memory,
many small uploads, a synchronous download, and a matmul; prints the bytes it moved as JSON."""

import json

import torch

x = torch.rand(4096, 4096)  # 64 MiB, pageable
pinned = torch.rand(4096, 4096).pin_memory()
moved = {"h2d": 0, "d2h": 0}
for _ in range(4):
    a = x.cuda()
    moved["h2d"] += x.numel() * 4
    b = pinned.cuda(non_blocking=True)
    moved["h2d"] += pinned.numel() * 4
small = [torch.rand(1024) for _ in range(200)]
for s in small:
    s.cuda()
    moved["h2d"] += s.numel() * 4
c = (a @ b).cpu()
moved["d2h"] += c.numel() * 4
torch.cuda.synchronize()
print(json.dumps(moved))
