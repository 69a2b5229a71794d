"""A CuPy front end for a microphone array: 64 channels at 48 kHz, captured in blocks of 2^18
samples a channel (64 MiB of float32 a block) that the capture card has already written into a
ring of four on the GPU. Each step frames its block (8192-sample frames, hop 1024: 249 a
channel), windows them, takes their spectra (`cupy.fft.rfft`), equalizes each channel by the
regularized inverse of its microphone's measured response, projects their power onto 256 mel
bands and keeps the log-mel spectrogram in a ring of 8 on the GPU for the detector downstream
(left out), read once at the end. The step was ported from NumPy code and builds its constants
as that code did, with NumPy, every step: the Kaiser window (8192 float32), the 64 channels'
equalizers (64 x 4097 complex64, 2 MiB: each microphone's roll-off and resonance evaluated at
every bin, from its calibration) and the mel filterbank (4097 x 256 float32, 4 MiB: librosa's
Slaney-normalized triangles), then moves each to the GPU with `cupy.asarray`.

Cause: the same 6 MiB of constants rebuilt and uploaded every step: the host spends
milliseconds in NumPy and in `cupy.asarray`'s copies before it can launch the step's kernels,
while the GPU, done with the step before, waits. --fixed: the three built and uploaded once,
before the loop, and reused every step; the same values, the same kernels. No --resident form:
the audio is on the GPU already, and the only data that move are the constants, which --fixed
keeps there (a resident form would be --fixed again)."""

# cause: repeated_uploads
# fix: build the window, the equalizers and the mel filterbank and upload them once, before the loop
# step: STEP
# resident: no
# gpus: 1
# needs: cupy

import cupy as cp
import numpy as np
from corpus import Loop, options
from cupy.lib.stride_tricks import as_strided

args = options(400)

RATE, CHANNELS, SAMPLES = 48000, 64, 2**18  # a block: 2^18 samples a channel
NFFT, HOP, MELS = 8192, 1024, 256
BINS = NFFT // 2 + 1  # 4097
FRAMES = (SAMPLES - NFFT) // HOP + 1  # 249 a channel
BETA = 14.0  # the Kaiser window's shape: side lobes below -100 dB
FMIN, FMAX = 20.0, 20000.0
RING, HISTORY, WARMUP = 4, 8, 3

# each microphone's calibration, measured once: its roll-off and resonance (Hz), the resonance's
# Q, its gain
rng = np.random.default_rng(0)
rolloff = rng.uniform(20.0, 80.0, CHANNELS)
resonance = rng.uniform(9000.0, 15000.0, CHANNELS)
quality = rng.uniform(1.5, 4.0, CHANNELS)
gain = rng.uniform(0.8, 1.25, CHANNELS)


def kaiser_window() -> np.ndarray:
    return np.kaiser(NFFT, BETA).astype(np.float32)


def equalizers() -> np.ndarray:
    """Each channel's equalizer at every bin: the regularized inverse of its microphone's
    response (a first-order high-pass at its roll-off, a second-order resonance)."""
    s = 2j * np.pi * np.fft.rfftfreq(NFFT, 1.0 / RATE)[None, :]
    low = 2 * np.pi * rolloff[:, None]
    w0 = 2 * np.pi * resonance[:, None]
    response = (
        gain[:, None] * (s / (s + low)) * (w0**2 / (s**2 + s * w0 / quality[:, None] + w0**2))
    )
    return (np.conj(response) / (np.abs(response) ** 2 + 1e-3)).astype(np.complex64)


def hz_to_mel(f: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear to 1 kHz, logarithmic above."""
    f = np.asarray(f, dtype=np.float64)
    log = 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) / (np.log(6.4) / 27.0)
    return np.where(f >= 1000.0, log, f * 3.0 / 200.0)


def mel_to_hz(m: np.ndarray) -> np.ndarray:
    return np.where(m >= 15.0, 1000.0 * np.exp(np.log(6.4) / 27.0 * (m - 15.0)), m * 200.0 / 3.0)


def mel_filterbank() -> np.ndarray:
    """librosa.filters.mel's triangles, Slaney-normalized, as (bins, mels) for the projection."""
    freqs = np.fft.rfftfreq(NFFT, 1.0 / RATE)
    edges = mel_to_hz(np.linspace(hz_to_mel(FMIN), hz_to_mel(FMAX), MELS + 2))
    widths = np.diff(edges)
    ramps = np.subtract.outer(edges, freqs)  # (mels + 2, bins)
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    weights *= (2.0 / (edges[2:] - edges[:-2]))[:, None]
    return np.ascontiguousarray(weights.T, dtype=np.float32)


# the capture card's ring of blocks, on the GPU: noise, a hum and each channel's own tone
gpu_rng = cp.random.default_rng(1)
t = cp.arange(SAMPLES, dtype=cp.float32) / RATE
tones = cp.asarray(rng.uniform(200.0, 8000.0, (RING, CHANNELS, 1)), dtype=cp.float32)
ring = 0.05 * gpu_rng.standard_normal((RING, CHANNELS, SAMPLES), dtype=cp.float32)
ring += 0.1 * cp.sin(2 * np.pi * 50.0 * t) + 0.3 * cp.sin(2 * np.pi * tones * t)
del t, tones
history = cp.zeros((HISTORY, CHANNELS, FRAMES, MELS), dtype=cp.float32)

constants: tuple[cp.ndarray, cp.ndarray, cp.ndarray] | None = None
if args.fixed:  # built and uploaded once
    constants = (
        cp.asarray(kaiser_window()),
        cp.asarray(equalizers()),
        cp.asarray(mel_filterbank()),
    )


def log_mel(block: cp.ndarray, window: cp.ndarray, equalizer: cp.ndarray,
            filterbank: cp.ndarray) -> cp.ndarray:  # fmt: skip
    """The block's log-mel spectrogram: (channels, frames, mels)."""
    frames = as_strided(
        block, shape=(CHANNELS, FRAMES, NFFT), strides=(block.strides[0], HOP * 4, 4)
    )
    spectra = cp.fft.rfft(frames * window, axis=-1)  # (channels, frames, bins)
    spectra *= equalizer[:, None, :]
    power = cp.abs(spectra) ** 2
    mel = (power.reshape(-1, BINS) @ filterbank).reshape(CHANNELS, FRAMES, MELS)
    return cp.log10(cp.maximum(mel, 1e-10))


def frame_step(i: int) -> None:
    if constants is None:
        window = cp.asarray(kaiser_window())  # STEP
        equalizer = cp.asarray(equalizers())  # STEP
        filterbank = cp.asarray(mel_filterbank())  # STEP
    else:
        window, equalizer, filterbank = constants
    history[i % HISTORY] = log_mel(ring[i % RING], window, equalizer, filterbank)  # STEP


for i in range(WARMUP):  # cuFFT's plan and cuBLAS made, CuPy's pools filled
    frame_step(i)
loop = Loop(args, sync=cp.cuda.Device().synchronize).timed(frame_step, first=WARMUP)
loop.report(checksum=round(float(history.sum(dtype=cp.float64)), 3))  # read once, at the end
