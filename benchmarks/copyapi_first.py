"""One first call in a fresh process, for copyapi_dense.py's part `first` (issue 49): PyTorch makes
the CUDA context, then one pageable host tensor of SIZE bytes (random) goes up to the GPU, by
`xferscope.copy_to_device` or by PyTorch's `dst.copy_(src)`, timed to the synchronize after it,
verified; then the same call again (xferscope_warm: `xferscope.warmup()` first, untimed).
Prints one JSON line. With --profile, the first call runs
under cProfile and its costliest functions are printed too (where its time went), its timing
then not comparable.

    python3 benchmarks/copyapi_first.py SIZE xferscope|xferscope_warm|torch [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import time

import torch

import xferscope


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("size", type=int)
    parser.add_argument("who", choices=("xferscope", "xferscope_warm", "torch"))
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    if not 0 < args.size <= 1 << 34:
        parser.error(f"size: {args.size} is not a number of bytes from 1 to 16 GiB")
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()  # the context, made by PyTorch as in a PyTorch program
    g = torch.Generator().manual_seed(args.size)
    src = torch.randint(0, 256, (args.size,), dtype=torch.uint8, generator=g)
    dst = torch.empty(args.size, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    if args.who == "xferscope_warm":
        xferscope.warmup()

    def call() -> float:
        start = time.perf_counter()
        if args.who != "torch":
            xferscope.copy_to_device(dst, src)
        else:
            dst.copy_(src)
        torch.cuda.synchronize()
        return time.perf_counter() - start

    profile = cProfile.Profile() if args.profile else None
    if profile is not None:
        profile.enable()
    first = call()
    if profile is not None:
        profile.disable()
    if not torch.equal(dst.cpu(), src):
        raise SystemExit(f"copyapi_first: {args.who}'s first copy of {args.size} B differs")
    second = call()
    out: dict = {"size": args.size, "who": args.who, "first_s": first, "second_s": second}
    if profile is not None:
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(15)
        out["profile"] = text.getvalue().splitlines()[-25:]
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
