"""The peer of fleet_bench.py's pair figures, run under `mpirun -np N`: torch.distributed's NCCL
send/recv of 64 MiB messages between every ordered pair of ranks, one pair at a time, timed as
`xferscope fleet` times its own (3 messages to warm up, a barrier, then 20 messages between CUDA
events on the receiver). Each receiver prints `PAIR <source> <destination> <bytes per second>`."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

BYTES = 64 << 20
ITERATIONS = 20


def main() -> None:
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
    local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", rank))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29571")
    device = torch.device("cuda", local)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", rank=rank, world_size=size, device_id=device)
    buf = torch.randint(0, 255, (BYTES,), dtype=torch.uint8, device=device)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    pairs = [(a, b) for a in range(size) for b in range(size) if a != b]
    for source, destination in pairs:
        for n, timed in ((3, False), (ITERATIONS, True)):
            dist.barrier()
            start.record()
            for _ in range(n):
                if rank == source:
                    dist.send(buf, destination)
                elif rank == destination:
                    dist.recv(buf, source)
            stop.record()
            stop.synchronize()
            if timed and rank == destination:
                seconds = start.elapsed_time(stop) * 1e-3
                print(f"PAIR {source} {destination} {BYTES * n / seconds:.6g}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
