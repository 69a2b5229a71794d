"""The command line: `main` runs it; each command lives in its own module and registers itself
on the `cli` group when imported here."""

from . import batch, cases, gemm, gl, history, info, overlap, pageable, pitch, run, sweep, trace  # noqa: F401  (registers the commands)
from .app import EXIT_INTERRUPTED, EXIT_VERIFICATION_FAILED, cli, main

__all__ = ["EXIT_INTERRUPTED", "EXIT_VERIFICATION_FAILED", "cli", "main"]
