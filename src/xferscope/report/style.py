"""The report's shared vocabulary: the one SIMULATED banner, and how every plot (PNG and HTML)
draws a curve: one colour per memory kind, one line style per mechanism and timing, one panel
per direction."""

from __future__ import annotations

from rich.console import Console

# Every output of the simulated engine says this, in these words.
SIMULATED = "SIMULATED: these figures come from a link model, not from a GPU"


def print_simulated(console: Console) -> None:
    console.print(f"[bold red]{SIMULATED}[/bold red]")
