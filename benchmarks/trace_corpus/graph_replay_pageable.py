"""Batch inference replayed as a CUDA graph: torchvision's EfficientNet-B0 (random weights, eval
mode, bf16, channels_last) captured once with `torch.cuda.graph` around a static input, its
top class per image written into a history kept on the GPU and read once at the end. Each step
the host's preprocessed batch (32 float32 images of 3 x 224 x 224 made by NumPy, 19 MB) is
copied into the static input with `static_x.copy_(batch, non_blocking=True)`, then the graph is
replayed. The batches are NumPy arrays, pageable memory, so `non_blocking` does nothing: the
driver stages each copy through its own buffer while the host waits, after the replay before it
is done, and the GPU idles while the copy is staged and the next replay is launched.
The fix: the batches made in pinned memory (`torch.from_numpy(a).pin_memory()`, allocated
once), so the copy is queued behind the replay and the host goes on."""

# cause: pageable_copies
# fix: each batch in pinned memory, so copy_(..., non_blocking=True) is queued and returns
# step: STEP
# resident: no
# gpus: 1
# needs: torchvision

import numpy as np
import torch
import torchvision
from corpus import Loop, options

args = options(300)
BATCH, SIDE, POOL, HISTORY = 32, 224, 6, 1024
device = torch.device("cuda")
torch.manual_seed(0)
rng = np.random.default_rng(0)

model = torchvision.models.efficientnet_b0(weights=None).eval()
model = model.to(device, torch.bfloat16, memory_format=torch.channels_last)
frames = [rng.standard_normal((BATCH, 3, SIDE, SIDE), dtype=np.float32) for _ in range(POOL)]
batches = [torch.from_numpy(f) for f in frames]  # pageable: NumPy's memory
if args.fixed:
    batches = [b.pin_memory() for b in batches]
static_x = torch.empty(BATCH, 3, SIDE, SIDE, device=device)
history = torch.zeros(HISTORY, BATCH, dtype=torch.int64, device=device)


def predict(x: torch.Tensor) -> torch.Tensor:
    x = x.to(torch.bfloat16, memory_format=torch.channels_last)
    return model(x).argmax(1)


with torch.inference_mode():
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up before capture, as torch.cuda.graph asks
        for _ in range(3):
            predict(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_top = predict(static_x)

    def serve(i: int) -> None:
        static_x.copy_(batches[i % POOL], non_blocking=True)  # STEP
        graph.replay()
        history[i % HISTORY].copy_(static_top)  # STEP

    for i in range(POOL):
        serve(i)
    loop = Loop(args, sync=torch.cuda.synchronize).timed(serve)
    counts = np.bincount(history.cpu().numpy().ravel(), minlength=1000)  # read once, at the end
    loop.report(classes_seen=int((counts > 0).sum()))
