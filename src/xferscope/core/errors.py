"""The errors xferscope reports to a person: each carries a one-line message."""

from __future__ import annotations


class XferscopeError(Exception):
    """Base class: the CLI prints the message on one line and exits non-zero."""

    exit_code = 1


class OptionError(XferscopeError):
    """An option's value is not acceptable. The message names the option and what is accepted."""

    exit_code = 2

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"{option}: {message}")
        self.option = option


class InputFileError(XferscopeError):
    """A file given is not one the command takes; the message names the file and what is
    wrong with it (not the option's metavar: the file is what the user typed)."""

    exit_code = 2


class NoDeviceError(XferscopeError):
    """No CUDA device can be used (no driver, no GPU, or an index that does not exist)."""


class AllocationError(XferscopeError):
    """A buffer could not be allocated; names the memory kind and the size."""


class EngineError(XferscopeError):
    """The engine failed (a CUDA error) while measuring."""


class CudaError(EngineError):
    """A CUDA call failed: `name` is the CUDA error's name (cudaErrorLaunchFailure) and `code`
    its number. A GPU that raises one mid-run is in trouble, unlike one that is out of memory."""

    def __init__(self, message: str, name: str, code: int) -> None:
        if name.startswith("cudaErrorStreamCapture") or name == "cudaErrorCapturedEvent":
            message += f" ({CAPTURED})"
        super().__init__(f"CUDA error: {message}")
        self.name = name
        self.code = code


# said with a CUDA error of stream capture (cudaErrorStreamCapture*): a call of ours ran while a
# CUDA graph was being captured, where a copy that waits for itself cannot be
CAPTURED = (
    "a CUDA graph was being captured: xferscope's copies return once they have landed, which a "
    "capture cannot hold; call them before or after the capture, and inside torch.cuda.graph "
    "use dst.copy_(src, non_blocking=True)"
)


class GlUnavailableError(XferscopeError):
    """No OpenGL here: a loader library is missing (the message names it and its package), or
    no EGL device context can be made on the GPU asked for (the message says why)."""


class GlError(EngineError):
    """A GL call failed in one scenario: names the call, the states and the GL error. The other
    scenarios still run."""


class NcclError(EngineError):
    """NCCL is missing (the message says where to get it) or one of its calls failed."""


class BlasError(EngineError):
    """cuBLASLt is missing (the message says where to get it) or refused a GEMM (the message
    names the call and cuBLAS's status)."""
