"""A convnet (bf16 autocast) trained by a hand-written trainer in the shape of PyTorch Lightning:
a LitModel with training_step, configure_optimizers and an on_train_batch_end hook, a Trainer
whose fit moves each batch with transfer_batch_to_device (pinned, non_blocking) and whose log
keeps running means; after each step its own Python (a progress line, a throughput monitor's
callback: about --host-ms). The batches are contiguous slices of pinned tensors, so the input
costs the host nothing. The hook logs the loss and the accuracy with `.item()` every step: two
waits for the GPU, after which the GPU sits idle while the host logs and queues the next step.
The fix: the hook sums them on the GPU and reads them every 100 steps and at the end."""

# cause: synchronizations
# fix: the hook sums loss and accuracy on the GPU and reads them every 100 steps and at the end
# step: STEP
# resident: no
# gpus: 1
# needs:

import statistics
import time

import corpus
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

args = corpus.options(300, host_ms=(float, 0.5))
BATCH, LOG_EVERY = 256, 100
device = torch.device("cuda")
torch.manual_seed(0)
torch.backends.cudnn.benchmark = True


def conv_bn(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)
    )


class LitModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            conv_bn(3, 64), conv_bn(64, 128, 2), conv_bn(128, 128), conv_bn(128, 256, 2),
            conv_bn(256, 256), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 10),
        )  # fmt: skip
        self.trainer: Trainer | None = None
        self.loss_sum = torch.zeros(())
        self.acc_sum = torch.zeros(())
        self.summed = 0

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> dict[str, torch.Tensor]:
        x, y = batch
        with torch.autocast("cuda", torch.bfloat16):
            logits = self.net(x.contiguous(memory_format=torch.channels_last))
        return {"loss": F.cross_entropy(logits.float(), y), "preds": logits.detach().argmax(1)}

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)

    def on_train_batch_end(self, outputs: dict, batch: list[torch.Tensor], batch_idx: int) -> None:
        loss, accuracy = outputs["loss"].detach(), (outputs["preds"] == batch[1]).float().mean()
        if not args.fixed:
            self.log("train_loss", loss.item())  # STEP: waits for the GPU
            self.log("train_acc", accuracy.item())  # STEP: and again
            return
        self.loss_sum += loss  # fixed: kept on the GPU, read every LOG_EVERY steps
        self.acc_sum += accuracy
        self.summed += 1
        if (batch_idx + 1) % LOG_EVERY == 0:
            self.flush()

    def on_train_end(self) -> None:
        if self.summed:
            self.flush()

    def flush(self) -> None:
        self.log("train_loss", self.loss_sum.item() / self.summed)
        self.log("train_acc", self.acc_sum.item() / self.summed)
        self.loss_sum.zero_()
        self.acc_sum.zero_()
        self.summed = 0

    def log(self, name: str, value: float) -> None:
        assert self.trainer is not None
        self.trainer.log(name, value)


class ThroughputMonitor:
    """A callback: the mean, spread and worst of the last steps' durations, every step; its
    window sized so that this takes about `ms` on this host."""

    def __init__(self, ms: float) -> None:
        self.window, self.last = [0.01] * 2000, time.perf_counter()
        self.summary: tuple[float, float, float] = (0.0, 0.0, 0.0)
        times = []
        for _ in range(5):
            t = time.perf_counter()
            for i in range(5):
                self.on_train_batch_end(i)
            times.append((time.perf_counter() - t) / 5)
        self.window = [0.01] * max(int(len(self.window) * ms * 1e-3 / statistics.median(times)), 1)

    def on_train_batch_end(self, batch_idx: int) -> None:
        now = time.perf_counter()
        self.window[batch_idx % len(self.window)], self.last = now - self.last, now
        total = square = worst = 0.0
        for v in self.window:
            total, square, worst = total + v, square + v * v, max(worst, v)
        mean = total / len(self.window)
        self.summary = (mean, max(square / len(self.window) - mean * mean, 0.0) ** 0.5, worst)


class Trainer:
    def __init__(self) -> None:
        self.metrics: dict[str, float] = {}
        self.means: dict[str, tuple[int, float]] = {}
        self.callbacks = [ThroughputMonitor(args.host_ms)]
        self.progress = ""

    def log(self, name: str, value: float) -> None:
        self.metrics[name] = value
        n, mean = self.means.get(name, (0, 0.0))
        self.means[name] = (n + 1, mean + (value - mean) / (n + 1))

    def transfer_batch_to_device(self, batch, device: torch.device) -> list[torch.Tensor]:
        return [t.to(device, non_blocking=True) for t in batch]  # STEP

    def fit(self, model: LitModel, loader) -> None:
        model.trainer, model.summed = self, 0
        model.loss_sum, model.acc_sum = (torch.zeros((), device=device) for _ in range(2))
        optimizer = model.configure_optimizers()
        model.train()
        for batch_idx, batch in enumerate(loader):
            batch = self.transfer_batch_to_device(batch, device)
            outputs = model.training_step(batch, batch_idx)
            outputs["loss"].backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            model.on_train_batch_end(outputs, batch, batch_idx)
            for callback in self.callbacks:
                callback.on_train_batch_end(batch_idx)
            shown = " ".join(f"{k}={v:.4f} (mean {self.means[k][1]:.4f})"
                             for k, v in self.metrics.items())  # fmt: skip
            mean, spread, worst = self.callbacks[0].summary
            self.progress = (f"step {batch_idx + 1} {shown} {1 / mean:.1f} it/s "
                             f"(+-{spread * 1e3:.2f} ms, worst {worst * 1e3:.2f} ms)")  # fmt: skip
        model.on_train_end()


data = TensorDataset(torch.rand(8 * BATCH, 3, 64, 64).pin_memory(),
                     torch.randint(0, 10, (8 * BATCH,)).pin_memory())  # fmt: skip


def loader(steps: int):
    """Contiguous slices of the pinned tensors, in turn: no host work to speak of."""
    for i in range(steps):
        k = i % (len(data) // BATCH) * BATCH
        yield [t[k : k + BATCH] for t in data.tensors]


model = LitModel().to(device, memory_format=torch.channels_last)
trainer = Trainer()
trainer.fit(model, loader(5))  # warm-up: cuDNN's choice of kernels
torch.cuda.synchronize()
loop = corpus.Loop(args)
loop.start()
trainer.fit(model, loader(args.steps))
torch.cuda.synchronize()
loop.stop()
loop.report()
