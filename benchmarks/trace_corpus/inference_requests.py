"""A serving loop: torchvision's ResNet-18 (random weights, eval mode, channels_last, bf16, under
torch.inference_mode) answers requests of --batch uint8 images at 224 x 224 each, taken in turn from
a pool of 8 pinned ones; each is uploaded, converted and normalized on the GPU, classified, and its
probabilities post-processed on the host (the top 5 classes of each image and a JSON response each).
Each request's result is read with `.cpu()`, a wait for the GPU, before the next request is queued,
so the GPU sits idle while the host post-processes. The fix: one request in flight, its
probabilities copied into a pinned buffer with non_blocking=True and an event recorded; the host
post-processes the previous request (its event synchronized: long done) while the GPU runs this one.
The same responses either way."""

# cause: synchronizations
# fix: each result copied to pinned memory without waiting; the previous one post-processed
# step: STEP
# resident: no
# gpus: 1
# needs: torchvision

import json

import corpus
import torch
import torchvision

args = corpus.options(250, batch=(int, 256))
BATCH, POOL = args.batch, 8
device = torch.device("cuda")
torch.manual_seed(0)
torch.backends.cudnn.benchmark = True
model = torchvision.models.resnet18(weights=None).eval()
model = model.to(device, torch.bfloat16, memory_format=torch.channels_last)
labels = [f"class_{c:04d}" for c in range(1000)]
mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1) * 255
std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1) * 255
pool = [torch.randint(0, 256, (BATCH, 3, 224, 224), dtype=torch.uint8).pin_memory()
        for _ in range(POOL)]  # fmt: skip
host = [torch.empty(BATCH, 1000).pin_memory() for _ in range(2)]  # fixed: results, in turn
done = [torch.cuda.Event() for _ in range(2)]
responses: list[str] = []


@torch.inference_mode()
def infer(images: torch.Tensor) -> torch.Tensor:
    """A request's uint8 images, already on the GPU, to its classes' probabilities."""
    x = ((images.float() - mean) / std).to(torch.bfloat16, memory_format=torch.channels_last)
    return model(x).float().softmax(1)


def respond(i: int, probs: torch.Tensor) -> None:
    """The host's post-processing of request i: the top 5 of each image, a JSON response each."""
    scores, classes = probs.topk(5)
    for k, (row, top) in enumerate(zip(scores.tolist(), classes.tolist(), strict=True)):
        answer = [{"label": labels[c], "score": round(p, 6)} for p, c in zip(row, top, strict=True)]
        responses.append(json.dumps({"request": i, "image": k, "top5": answer}))


def finish(i: int) -> None:
    """The fixed form: request i's result, copied to pinned memory earlier, post-processed."""
    done[i % 2].synchronize()  # STEP: its copy long done
    respond(i, host[i % 2])


def serve(requests: range) -> None:
    for i in requests:
        probs = infer(pool[i % POOL].to(device, non_blocking=True))  # STEP
        if not args.fixed:
            result = probs.cpu()  # STEP: waits for the GPU
            respond(i, result)
            continue
        host[i % 2].copy_(probs, non_blocking=True)  # STEP
        done[i % 2].record()
        if i > requests.start:
            finish(i - 1)  # the previous request's, while the GPU runs this one
    if args.fixed and len(requests):
        finish(requests[-1])


serve(range(5))  # warm-up: cuDNN's choice of kernels
torch.cuda.synchronize()
loop = corpus.Loop(args)
loop.start()
serve(range(args.steps))
torch.cuda.synchronize()
loop.stop()
loop.report()
