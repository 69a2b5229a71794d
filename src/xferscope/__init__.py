"""xferscope: how fast data really moves between host memory and NVIDIA GPUs, and why."""

__version__ = "0.1.0"
