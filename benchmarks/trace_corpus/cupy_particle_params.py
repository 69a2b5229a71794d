"""A CuPy simulation of charged dust grains held in a plasma trap: 2M grains (positions and
velocities, float32, on the GPU), each of one of 16 species, kept sorted by species. A RawKernel
launched once a species pushes its grains through 48 substeps a step. Each species feels the
trap through three tables of 1024 bins (4 KiB of float32 each): its radial and its axial
restoring acceleration (its charge-to-mass ratio times the trap's field) and its drag rate. The
host's controller rewrites all 48 tables every step as its schedule drives the trap, and the
step moves them to the GPU with `cupy.asarray`, table by table, before it launches the kernels.

Cause: 48 small host-to-device copies a step (192 KiB in all), each paying `cupy.asarray`'s
fixed cost on the host (a device buffer, a pinned staging buffer and a host copy into it, the
copy's call, an event) while the GPU, done with the step before, waits. --fixed: the
controller's tables packed on the host into one array (`np.concatenate`), one `cupy.asarray`,
and the 48 tables cut from it as views on the GPU; the same values, the same kernels.
--resident: every step of the schedule's period (256 steps) packed and put on the GPU before the
loop, no copies. The grains' final checksum and energy are the same in every form."""

# cause: small_copies
# fix: the 48 tables packed on the host with np.concatenate: one cupy.asarray a step, not 48
# step: STEP
# resident: yes
# gpus: 1
# needs: cupy

import cupy as cp
import numpy as np
from corpus import Loop, options

args = options(3000, resident=True)

N, SPECIES, BINS = 2**21, 16, 1024  # grains, species, bins a table
PER = N // SPECIES  # a species' grains, together
KINDS = ("radial", "axial", "drag")
NAMES = [f"{kind}_{s}" for s in range(SPECIES) for kind in KINDS]  # the controller's 48 tables
SUBSTEPS, DT = 48, np.float32(2e-3)
REACH = 1.0  # the tables' radius and height; past it, their last bin
SCALE = np.float32((BINS - 1) / REACH)
PERIOD, DEPTH = 256, 0.1  # the controller's schedule: its period in steps, its depth
THREADS, WARMUP = 256, 3

push = cp.RawKernel(
    r"""
extern "C" __global__ void push(float* state, const float* radial, const float* axial,
                                const float* drag, int first, int count, int n, int substeps,
                                float dt, float scale, int bins) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  i += first;
  float px = state[i], py = state[n + i], pz = state[2 * n + i];
  float vx = state[3 * n + i], vy = state[4 * n + i], vz = state[5 * n + i];
  const float last = bins - 2.0f;
  for (int k = 0; k < substeps; ++k) {
    float r = sqrtf(px * px + py * py);
    float u = fminf(r * scale, last), w = fminf(fabsf(pz) * scale, last);
    int b = (int)u, c = (int)w;
    u -= b;
    w -= c;
    float inward = (radial[b] + u * (radial[b + 1] - radial[b])) / fmaxf(r, 1e-6f);
    float g = drag[b] + u * (drag[b + 1] - drag[b]);
    float down = copysignf(axial[c] + w * (axial[c + 1] - axial[c]), pz);
    vx -= dt * (inward * px + g * vx);
    vy -= dt * (inward * py + g * vy);
    vz -= dt * (down + g * vz);
    px += dt * vx;
    py += dt * vy;
    pz += dt * vz;
  }
  state[i] = px;
  state[n + i] = py;
  state[2 * n + i] = pz;
  state[3 * n + i] = vx;
  state[4 * n + i] = vy;
  state[5 * n + i] = vz;
}
""",
    "push",
)

rng = np.random.default_rng(0)
radius = np.linspace(0.0, REACH, BINS)
omega2 = (2 * np.pi) ** 2 * np.linspace(0.6, 1.4, SPECIES)  # each species' charge-to-mass
shapes = {"radial": radius, "axial": 1.5 * radius, "drag": 0.01 * (1 + radius**2)}
base = {  # the tables as the trap was calibrated, measured with noise
    f"{kind}_{s}": (
        shapes[kind] * (1.0 if kind == "drag" else omega2[s]) * (1 + 0.05 * rng.random(BINS))
    ).astype(np.float32)
    for s in range(SPECIES)
    for kind in KINDS
}
offsets = rng.uniform(0, 2 * np.pi, len(NAMES))  # each table's phase in the schedule
tables = {name: np.empty(BINS, dtype=np.float32) for name in NAMES}  # the controller's own


def control(i: int) -> dict[str, np.ndarray]:
    """The host's controller at step `i`: each table rescaled as the schedule drives the trap."""
    gains = (1 + DEPTH * np.sin(2 * np.pi * (i % PERIOD) / PERIOD + offsets)).astype(np.float32)
    for name, gain in zip(NAMES, gains, strict=True):
        np.multiply(base[name], gain, out=tables[name])
    return tables


def cut(packed: cp.ndarray) -> dict[str, cp.ndarray]:
    """The 48 tables as views of one packed array on the GPU."""
    return {name: packed[k * BINS : (k + 1) * BINS] for k, name in enumerate(NAMES)}


# the grains: x, y, z, vx, vy, vz rows, species s in columns [s * PER, (s + 1) * PER)
r0, angle = 0.8 * np.sqrt(rng.random(N)), rng.uniform(0, 2 * np.pi, N)
start = [r0 * np.cos(angle), r0 * np.sin(angle), rng.uniform(-0.8, 0.8, N)]
state = cp.asarray(np.stack([*start, *(0.5 * rng.standard_normal((3, N)))]).astype(np.float32))
del r0, angle, start
schedule = None
if args.resident:  # the schedule's every step, packed, on the GPU
    period = [np.concatenate(list(control(j).values())) for j in range(PERIOD)]
    schedule = cp.asarray(np.stack(period))
    del period


def upload(i: int) -> dict[str, cp.ndarray]:
    if schedule is not None:
        return cut(schedule[i % PERIOD])
    params = control(i)
    if args.fixed:
        return cut(cp.asarray(np.concatenate(list(params.values()))))  # STEP
    return {name: cp.asarray(table) for name, table in params.items()}  # STEP


def sim_step(i: int) -> None:
    params = upload(i)
    for s in range(SPECIES):
        push(
            (PER // THREADS,),
            (THREADS,),
            (state, params[f"radial_{s}"], params[f"axial_{s}"], params[f"drag_{s}"],
             np.int32(s * PER), np.int32(PER), np.int32(N), np.int32(SUBSTEPS), DT, SCALE,
             np.int32(BINS)),
        )  # fmt: skip


for i in range(WARMUP):  # the kernel compiled, CuPy's pools filled
    sim_step(i)
loop = Loop(args, sync=cp.cuda.Device().synchronize).timed(sim_step, first=WARMUP)
loop.report(
    checksum=float(state.sum(dtype=cp.float64)),
    energy=float((state[3:] ** 2).sum(dtype=cp.float64)) / (2 * N),
)
