"""The command line: `main` runs it; each command lives in its own module, which registers it
on the `cli` group when the command is asked for (app.COMMANDS)."""

from .app import EXIT_INTERRUPTED, EXIT_VERIFICATION_FAILED, cli, load_commands, main

__all__ = ["EXIT_INTERRUPTED", "EXIT_VERIFICATION_FAILED", "cli", "load_commands", "main"]
