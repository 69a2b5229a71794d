"""An HF-style text classifier (embedding, a 4-layer nn.TransformerEncoder, mean pooling, a
linear head; bf16 autocast, AdamW) trained on raw strings that the DataLoader's collate_fn
tokenizes (a `tokenizers` WordLevel tokenizer built in-process, padding and truncation to 512)
into a dict of input_ids, attention_mask and labels (pinned: pin_memory=True either way). With
num_workers=0 the collate runs on the main process each step, between the GPU's steps, and the
GPU waits for it. The fix: 4 persistent workers that tokenize ahead (prefetch_factor=4).
--resident: every batch tokenized before the loop and kept on the GPU."""

# cause: input_starved
# fix: DataLoader(num_workers=4, persistent_workers=True, prefetch_factor=4) instead of 0 workers
# step: STEP
# resident: yes
# gpus: 1
# needs: tokenizers

import os

os.environ["TOKENIZERS_PARALLELISM"] = "false"  # before tokenizers is imported

import random
from types import SimpleNamespace

import corpus
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

try:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
except ImportError:
    Tokenizer = None

args = corpus.options(100, resident=True)
BATCH, MAX_LEN, WARMUP = 32, 512, 5
device = torch.device("cuda")
torch.manual_seed(0)
rng = random.Random(0)
made: set[str] = set()
while len(made) < 5000:  # made-up words of 3 to 9 letters
    made.add("".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(3, 9))))
words = sorted(made)
vocab = {"[PAD]": 0, "[UNK]": 1} | {w: i + 2 for i, w in enumerate(words)}
texts = [  # (a text of 40 to 400 words, its label)
    (" ".join(rng.choices(words, k=rng.randint(40, 400))), rng.randrange(2))
    for _ in range((args.steps + WARMUP) * BATCH)
]


class WhitespaceTokenizer:
    """The fallback where `tokenizers` is missing: split on spaces, pad and truncate."""

    def encode_batch(self, batch: list[str]) -> list[SimpleNamespace]:
        out = []
        for text in batch:
            ids = [vocab.get(w, 1) for w in text.split()][:MAX_LEN]
            pad = MAX_LEN - len(ids)
            out.append(
                SimpleNamespace(ids=ids + [0] * pad, attention_mask=[1] * len(ids) + [0] * pad)
            )
        return out


if Tokenizer is not None:
    tokenizer = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    tokenizer.enable_truncation(max_length=MAX_LEN)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]", length=MAX_LEN)
else:
    tokenizer = WhitespaceTokenizer()


def collate(samples: list[tuple[str, int]]) -> dict[str, torch.Tensor]:
    encodings = tokenizer.encode_batch([text for text, _ in samples])
    return {
        "input_ids": torch.tensor([e.ids for e in encodings]),
        "attention_mask": torch.tensor([e.attention_mask for e in encodings]),
        "labels": torch.tensor([label for _, label in samples]),
    }


class Classifier(nn.Module):
    def __init__(self, d: int = 512) -> None:
        super().__init__()
        self.embed = nn.Embedding(len(vocab), d, padding_idx=0)
        self.position = nn.Parameter(torch.randn(MAX_LEN, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, 8, 4 * d, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
        self.head = nn.Linear(d, 2)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        h = self.embed(input_ids) + self.position[: input_ids.shape[1]]
        h = self.encoder(h, src_key_padding_mask=attention_mask == 0)
        keep = attention_mask.unsqueeze(-1).to(h.dtype)
        return self.head((h * keep).sum(1) / keep.sum(1))


model = Classifier().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if args.fixed:
    loader = DataLoader(texts, BATCH, shuffle=True, collate_fn=collate, pin_memory=True,
                        num_workers=4, persistent_workers=True, prefetch_factor=4)  # fmt: skip
else:
    loader = DataLoader(texts, BATCH, shuffle=True, collate_fn=collate, pin_memory=True)
batches = iter(loader)
if args.resident:
    every = [{k: v.to(device) for k, v in b.items()} for b in loader]
    batches = iter(every)


def step(batch: dict[str, torch.Tensor]) -> None:
    if not args.resident:
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}  # STEP
    with torch.autocast("cuda", torch.bfloat16):
        logits = model(batch["input_ids"], batch["attention_mask"])
    loss = F.cross_entropy(logits.float(), batch["labels"])
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


for _ in range(WARMUP):  # warm-up: the workers started, the kernels chosen
    step(next(batches))
torch.cuda.synchronize()
loop = corpus.Loop(args, sync=torch.cuda.synchronize)
loop.start()
for _ in range(args.steps):
    step(next(batches))
    loop.step()
torch.cuda.synchronize()
loop.stop()
loop.report()
