"""Behaviour cloning from a vectorized NumPy environment: 4096 planar six-link arms, each
reaching for its own target, stepped together on the host (torques, damping, Euler steps) and
driven by a scripted expert (a Jacobian-transpose controller with exploration noise), so that
their motion does not depend on the network. Each agent observes its last 16 frames of 32
features (joint angles' cosines and sines, velocities, last torques, target, fingertip, its
offset and distance, the target's age), stacked as a frame-stacking wrapper does, with
`np.concatenate` into a fresh float32 array: 4096 x 512, 8 MiB a step. A Gaussian policy (an MLP
512-2048-2048-2048-12, ELU: a mean and a log-deviation per joint; float32, Adam) takes a step of
maximum likelihood on the expert's torques at each environment step, its observations moved
with `torch.from_numpy(obs).to("cuda")`; it samples its own torques on the GPU and sums their
distance from the expert's and its losses there, read once at the end.

Cause: the observations are pageable NumPy memory, so `.to("cuda")` copies them through the
driver's staging buffer and waits for the copy, and so for the step before on the GPU, before the
host goes on: the GPU idles while 8 MiB are copied at pageable speed and the step's kernels are
launched. --fixed: two pinned staging tensors made once and used in turn: each step's
observations and the expert's torques copied into one on the host (an event waited for first:
its copy of two steps before, long done), then moved with `.to("cuda", non_blocking=True)`; the
same values. No --resident form: every step's observations are new (8 MiB a step, 6.3 GiB for
the default 800 steps), and an environment stepped on the GPU would be another program."""

# cause: pageable_copies
# fix: observations copied on the host into pinned staging tensors made once, .to(non_blocking=True)
# step: STEP
# resident: no
# gpus: 1
# needs:

from collections import deque

import numpy as np
import torch
from corpus import Loop, options
from torch import nn

args = options(800)

AGENTS, LINKS, STACK, FEATURES = 4096, 6, 16, 32  # an observation: STACK x FEATURES an agent
HIDDEN, WARMUP = 2048, 4
DT, SUBSTEPS, DAMPING, INERTIA, MOST = 0.01, 4, 0.5, 0.2, 2.0  # the arms' physics
KP, KD, NOISE, PATIENCE, REACHED = 4.0, 0.3, 0.2, 200, 0.03  # the expert's and targets'
LENGTHS = np.array([0.3, 0.25, 0.2, 0.15, 0.1, 0.05], dtype=np.float32)  # a reach of 1.05
device = torch.device("cuda")
torch.manual_seed(0)


class ReacherArms:
    """AGENTS planar arms of LINKS links, stepped together with NumPy."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.q = self.rng.uniform(-0.5, 0.5, (AGENTS, LINKS)).astype(np.float32)  # joint angles
        self.dq = np.zeros((AGENTS, LINKS), dtype=np.float32)
        self.torque = np.zeros((AGENTS, LINKS), dtype=np.float32)
        self.target = self._targets(AGENTS)
        self.age = np.zeros(AGENTS, dtype=np.float32)
        self._kinematics()
        self.frames: deque[np.ndarray] = deque([self._frame()] * STACK, maxlen=STACK)
        self.obs = np.concatenate(self.frames, axis=1)  # what the agents see now

    def _targets(self, count: int) -> np.ndarray:
        r = LENGTHS.sum() * np.sqrt(self.rng.uniform(0.05, 0.8, count))
        angle = self.rng.uniform(-np.pi, np.pi, count)
        return np.stack([r * np.cos(angle), r * np.sin(angle)], axis=1).astype(np.float32)

    def _kinematics(self) -> None:
        """The fingertip and its Jacobian's rows (d tip_x / d q, d tip_y / d q)."""
        phi = np.cumsum(self.q, axis=1)
        px, py = LENGTHS * np.cos(phi), LENGTHS * np.sin(phi)
        self.tip = np.stack([px.sum(1), py.sum(1)], axis=1)
        self.jx = -np.cumsum(py[:, ::-1], axis=1)[:, ::-1]
        self.jy = np.cumsum(px[:, ::-1], axis=1)[:, ::-1]
        self.offset = self.target - self.tip

    def _frame(self) -> np.ndarray:
        return np.concatenate(
            [np.cos(self.q), np.sin(self.q), self.dq, self.torque, self.target, self.tip,
             self.offset, np.linalg.norm(self.offset, axis=1, keepdims=True),
             (self.age / PATIENCE)[:, None]],
            axis=1,
        )  # fmt: skip

    def expert(self) -> np.ndarray:
        """The scripted controller's torques: the fingertip pulled to the target, damped."""
        torque = KP * (self.jx * self.offset[:, :1] + self.jy * self.offset[:, 1:]) - KD * self.dq
        torque += NOISE * self.rng.standard_normal((AGENTS, LINKS), dtype=np.float32)
        return np.clip(torque, -MOST, MOST)

    def step(self, torque: np.ndarray) -> None:
        """The arms moved under `torque`; reached or stale targets drawn anew; the new stacked
        observation a fresh (AGENTS, STACK * FEATURES) float32 array."""
        self.torque = torque
        for _ in range(SUBSTEPS):
            self.dq += DT / INERTIA * (torque - DAMPING * self.dq)
            self.q += DT * self.dq
        self.age += 1
        self._kinematics()
        new = (np.linalg.norm(self.offset, axis=1) < REACHED) | (self.age >= PATIENCE)
        if new.any():
            self.target[new] = self._targets(int(new.sum()))
            self.age[new] = 0
            self.offset = self.target - self.tip
        self.frames.append(self._frame())
        self.obs = np.concatenate(self.frames, axis=1)


class Policy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(STACK * FEATURES, HIDDEN), nn.ELU(),
            nn.Linear(HIDDEN, HIDDEN), nn.ELU(),
            nn.Linear(HIDDEN, HIDDEN), nn.ELU(),
            nn.Linear(HIDDEN, 2 * LINKS),
        )  # fmt: skip

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.body(obs).chunk(2, dim=1)
        return mean, log_std.clamp(-5.0, 2.0)


env = ReacherArms(seed=0)
policy = Policy().to(device)
optimizer = torch.optim.Adam(policy.parameters(), lr=3e-4)
# --fixed: two pinned staging tensors for the observations and two for the torques, made once
staging = [
    (
        torch.empty(AGENTS, STACK * FEATURES, dtype=torch.float32, pin_memory=True),
        torch.empty(AGENTS, LINKS, dtype=torch.float32, pin_memory=True),
    )
    for _ in range(2 if args.fixed else 0)
]
copied = [torch.cuda.Event() for _ in range(2)]  # each staging tensor's last copy


def collect(i: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The agents' observation and the expert's torques for it, on the GPU; the environment
    stepped on by those torques (its next observation made while the GPU trains)."""
    obs, expert = env.obs, env.expert()
    env.step(expert)
    if not args.fixed:
        x = torch.from_numpy(obs).to(device)  # STEP
        y = torch.from_numpy(expert).to(device)  # STEP
        return x, y
    host_x, host_y = staging[i % 2]
    copied[i % 2].synchronize()  # STEP: its copy of two steps before, long done
    host_x.copy_(torch.from_numpy(obs))
    host_y.copy_(torch.from_numpy(expert))
    x = host_x.to(device, non_blocking=True)  # STEP
    y = host_y.to(device, non_blocking=True)  # STEP
    copied[i % 2].record()
    return x, y


def train_step(obs: torch.Tensor, expert: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    mean, log_std = policy(obs)
    # the expert's torques' negative log-likelihood under the policy's Gaussian
    loss = (0.5 * ((expert - mean) * torch.exp(-log_std)).square() + log_std).sum(1).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    with torch.no_grad():  # the policy's own torques, sampled, against the expert's
        sampled = mean + log_std.exp() * torch.randn_like(mean)
        gap = (sampled.clamp(-MOST, MOST) - expert).square().mean()
    return loss.detach(), gap


for i in range(WARMUP):
    train_step(*collect(i))
total = torch.zeros(2, dtype=torch.float64, device=device)  # losses and gaps, read once
torch.cuda.synchronize()
loop = Loop(args, sync=torch.cuda.synchronize)
loop.start()
for i in range(WARMUP, WARMUP + args.steps):
    loss, gap = train_step(*collect(i))
    total[0] += loss
    total[1] += gap
    loop.step()
torch.cuda.synchronize()
loop.stop()
sums = total.tolist()
loop.report(
    checksum=round(sums[0], 6),
    mean_loss=round(sums[0] / args.steps, 6),
    mean_gap=round(sums[1] / args.steps, 6),
)
