"""A keyword-spotting model (35 spoken words; a VGG-style 2D convnet over log-mel features, bf16
autocast, AdamW) trained on 1 s, 16 kHz int16 clips held in memory, through a DataLoader whose
Dataset makes each clip's features on the CPU with NumPy as it is read: a random gain and time
shift, pre-emphasis, 25 ms Hann-windowed frames every 10 ms, np.fft.rfft, the power spectrum
through a 64-band mel filterbank (a matmul), log and per-utterance normalization: [1, 64, 98]
float32 a clip, 128 clips a batch. The loader has 2 persistent workers with pinned batches,
moved with `.to(device, non_blocking=True)`; the two cannot make batches as fast as the GPU
trains on them, so the GPU waits for each batch. The fix: 8 workers, prefetch_factor=4. Either
way each worker keeps to one thread (the OpenMP, MKL and OpenBLAS variables set before NumPy
is imported, torch.set_num_threads(1) in worker_init_fn, and the filterbank's matmul done with
PyTorch, as NumPy's BLAS may have read its threads before), so that 8 workers do not crowd a
16-core host. --resident: the features of 8 batches made before the loop, kept on
the GPU, used in turn."""

# cause: input_starved
# fix: DataLoader(num_workers=8, prefetch_factor=4) instead of 2 workers (persistent, pinned)
# step: STEP
# resident: yes
# gpus: 1
# needs:

import os

os.environ["OMP_NUM_THREADS"] = "1"  # before NumPy and PyTorch are imported: one thread each
os.environ["MKL_NUM_THREADS"] = "1"
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import itertools

import corpus
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, RandomSampler, get_worker_info

args = corpus.options(300, resident=True)
RATE, CLIPS, CLASSES, BATCH, WARMUP, POOL = 16000, 4096, 35, 128, 5, 8
WINDOW, HOP, N_FFT, MELS = 400, 160, 400, 64  # 25 ms windows, 10 ms hop, 201 bins, 64 mels
FRAMES = 1 + (RATE - WINDOW) // HOP  # 98 frames a 1 s clip
SHIFT, PRE_EMPHASIS = RATE // 10, 0.97  # time shift of up to 100 ms either way
device = torch.device("cuda")
torch.manual_seed(0)
torch.backends.cudnn.benchmark = True


def synthesize(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """n clips of 1 s, each a made-up word (its class's glide and tone, at a random onset,
    length, pitch and loudness) in background noise, as int16, and their labels."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES, n)
    t = np.arange(RATE, dtype=np.float32) / RATE
    clips = np.empty((n, RATE), np.int16)
    for start in range(0, n, 256):
        y = labels[start : start + 256, None].astype(np.float32)
        m = len(y)
        onset, length, pitch, loudness, noisiness = (
            rng.uniform((0.05, 0.35, 0.85, 0.05, 0.003), (0.45, 0.5, 1.15, 0.3, 0.03), (m, 5))
            .astype(np.float32).T[..., None]
        )  # fmt: skip
        u = np.clip((t - onset) / length, 0, 1)  # 0 to 1 across the word
        tau = u * length
        f0 = (110 + 9 * y) * pitch  # a speaker's pitch
        f1 = f0 * (0.6 + 0.05 * (y % 17))  # the word's glide
        phase = 2 * np.pi * (f0 * tau + (f1 - f0) * tau**2 / (2 * length))
        voice = np.sin(phase) + 0.5 * np.sin(2 * phase) + 0.25 * np.sin(3 * phase)
        tone = 0.3 * np.sin(2 * np.pi * (700 + 40 * y) * t)  # the word's formant
        word = loudness * np.sin(np.pi * u) ** 2 * (voice + tone)
        noise = noisiness * rng.standard_normal((m, RATE), np.float32)
        clips[start : start + m] = np.clip((word + noise) * 32767, -32768, 32767)
    return clips, labels


class KeywordClips(Dataset):
    """int16 clips in memory; each clip's log-mel features made with NumPy as it is read."""

    def __init__(self, clips: np.ndarray, labels: np.ndarray) -> None:
        self.clips, self.labels = clips, labels
        self.rng = np.random.default_rng(0)  # each worker's own, from worker_init_fn
        self.window = np.hanning(WINDOW).astype(np.float32)
        # the mel filterbank, built once: 64 triangles from 20 Hz to 8 kHz over the 201 bins
        low, high = 2595 * np.log10(1 + np.array([20.0, RATE / 2]) / 700)  # Hz to mel
        edges = 700 * (10 ** (np.linspace(low, high, MELS + 2) / 2595) - 1)  # mel to Hz
        bins = np.fft.rfftfreq(N_FFT, 1 / RATE)
        lower, center, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]
        rising, falling = (bins - lower) / (center - lower), (upper - bins) / (upper - center)
        self.mel_basis = np.maximum(0, np.minimum(rising, falling)).astype(np.float32)
        self.mel_t = torch.from_numpy(self.mel_basis)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        audio = self.clips[i].astype(np.float32) / 32768
        # augmentation: a gain of -6 to +6 dB, a shift of up to 100 ms (zeros shifted in)
        audio *= np.float32(10 ** (self.rng.uniform(-6, 6) / 20))
        shift = int(self.rng.integers(-SHIFT, SHIFT + 1))
        shifted = np.zeros_like(audio)
        if shift >= 0:
            shifted[shift:] = audio[: RATE - shift]
        else:
            shifted[:shift] = audio[-shift:]
        audio = np.append(shifted[:1], shifted[1:] - PRE_EMPHASIS * shifted[:-1])
        frames = np.lib.stride_tricks.sliding_window_view(audio, WINDOW)[::HOP] * self.window
        spectrum = np.fft.rfft(frames, n=N_FFT)  # [98, 201]
        power = (np.abs(spectrum) ** 2 / N_FFT).astype(np.float32)
        # the filterbank's matmul in PyTorch, kept to the worker's one thread (worker_init)
        mel = (self.mel_t @ torch.from_numpy(power).T).numpy()  # [64, 98]
        logmel = np.log(mel + 1e-6)
        logmel = (logmel - logmel.mean()) / (logmel.std() + 1e-5)
        return torch.from_numpy(logmel[None].astype(np.float32)), int(self.labels[i])


def worker_init(worker_id: int) -> None:
    torch.set_num_threads(1)  # one thread a worker
    info = get_worker_info()
    info.dataset.rng = np.random.default_rng(info.seed)  # else each worker's augmentation alike


def convnet(config: list[int | str], classes: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    cin = 1
    for c in config:
        if c == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(cin, c, 3, padding=1, bias=False), nn.BatchNorm2d(c),
                       nn.ReLU(inplace=True)]  # fmt: skip
            cin = c
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2),
                         nn.Linear(cin, classes))  # fmt: skip


CONFIG = [64, 64, 64, "M", 128, 128, 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512]
model = convnet(CONFIG, CLASSES).to(device, memory_format=torch.channels_last)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
dataset = KeywordClips(*synthesize(CLIPS))
resident = []
if args.resident:
    features = DataLoader(dataset, BATCH, shuffle=True, drop_last=True)  # made here, once
    resident = [(x.to(device), y.to(device)) for x, y in itertools.islice(features, POOL)]
else:
    # as many clips as the steps take, drawn in turn from shuffled passes over the clips
    sampler = RandomSampler(dataset, num_samples=(WARMUP + args.steps) * BATCH)
    if args.fixed:
        loader = DataLoader(dataset, BATCH, sampler=sampler, drop_last=True, num_workers=8,
                            pin_memory=True, persistent_workers=True, prefetch_factor=4,
                            worker_init_fn=worker_init)  # fmt: skip
    else:
        loader = DataLoader(dataset, BATCH, sampler=sampler, drop_last=True, num_workers=2,
                            pin_memory=True, persistent_workers=True,
                            worker_init_fn=worker_init)  # fmt: skip
    batches = iter(loader)


def step(i: int) -> None:
    if args.resident:
        x, y = resident[i % len(resident)]
    else:
        x, y = next(batches)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)  # STEP
    with torch.autocast("cuda", torch.bfloat16):
        logits = model(x.contiguous(memory_format=torch.channels_last))
    loss = F.cross_entropy(logits.float(), y, label_smoothing=0.1)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


for i in range(WARMUP):  # warm-up: the workers started, the first batches made, cuDNN's choices
    step(i)
corpus.Loop(args, sync=torch.cuda.synchronize).timed(step).report()
