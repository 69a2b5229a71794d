"""A text classifier over sentences of varied length: an embedding, a two-layer bidirectional
nn.LSTM (hidden 512, cuDNN's, float32) run over packed sequences, mean pooling over the real
tokens and a small head, AdamW, gradients clipped. Batches of 64 sentences of 16-192 tokens,
padded to the longest, come from a pool of pinned token-id tensors, uploaded with
non_blocking=True. The collate sorts each batch longest first. Each step computes the lengths
from the padding on the GPU, `(ids != PAD).sum(1)`, and reads them back with `.cpu()`, as
`pack_padded_sequence` wants them on the host, and packs with `enforce_sorted=False`, so
PyTorch sorts them again and uploads the order from pageable memory, a second wait: two waits
for the GPU every step, though the program never looks at a value. The fix: the lengths the
collate made the batch with, kept on the host beside it, and `enforce_sorted=True`, as the
batch is sorted."""

# cause: synchronizations
# fix: the batch's lengths kept on the host by the collate, packed with enforce_sorted=True
# step: STEP
# resident: no
# gpus: 1
# needs:

import torch
import torch.nn.functional as F
from corpus import Loop, options
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

args = options(300)
VOCAB, EMBED, HIDDEN, CLASSES = 32000, 256, 512, 20
BATCH, SHORTEST, LONGEST, PAD = 64, 16, 192, 0
POOL = 8
device = torch.device("cuda")
torch.manual_seed(0)


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, EMBED, padding_idx=PAD)
        self.lstm = nn.LSTM(EMBED, HIDDEN, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Sequential(
            nn.Linear(2 * HIDDEN, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, CLASSES)
        )

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        packed = pack_padded_sequence(  # STEP: it sorts and uploads the order
            self.embed(ids), lengths, batch_first=True, enforce_sorted=args.fixed
        )
        out, _ = self.lstm(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=ids.shape[1])
        real = (ids != PAD).unsqueeze(-1)
        return self.head((out * real).sum(1) / real.sum(1))


def made(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A batch as a collate makes it: token ids padded to the longest (pinned), longest first,
    the lengths, and its labels (on the GPU already: they are not what this program is about)."""
    lengths = torch.randint(SHORTEST, LONGEST + 1, (BATCH,), generator=g).sort(descending=True)[0]
    ids = torch.randint(1, VOCAB, (BATCH, int(lengths.max())), generator=g)
    ids[torch.arange(ids.shape[1]) >= lengths[:, None]] = PAD
    labels = torch.randint(0, CLASSES, (BATCH,), generator=g).to(device)
    return ids.pin_memory(), lengths, labels


model = Classifier().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
pool = [made(torch.Generator().manual_seed(i)) for i in range(POOL)]


def train_step(i: int) -> None:
    ids_host, lengths_host, labels = pool[i % POOL]
    ids = ids_host.to(device, non_blocking=True)  # STEP
    lengths = lengths_host if args.fixed else (ids != PAD).sum(1).cpu()  # STEP
    loss = F.cross_entropy(model(ids, lengths), labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


for i in range(POOL):  # warm-up: cuDNN's LSTM plans for the pool's lengths
    train_step(i)
Loop(args, sync=torch.cuda.synchronize).timed(train_step).report()
