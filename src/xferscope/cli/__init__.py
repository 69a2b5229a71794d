"""The command line: `main` runs it; each command lives in its own module and registers itself
on the `cli` group when imported here."""

import importlib

from .app import EXIT_INTERRUPTED, EXIT_VERIFICATION_FAILED, cli, main

COMMANDS = ("batch", "cases", "fleet", "gemm", "gl", "history", "info", "overlap", "pageable",
            "pitch", "run", "sweep", "trace")  # fmt: skip
for _command in COMMANDS:
    importlib.import_module(f".{_command}", __name__)

__all__ = ["EXIT_INTERRUPTED", "EXIT_VERIFICATION_FAILED", "cli", "main"]
