"""`python -m xferscope` and the `xferscope` command. Ctrl-C is taken over before the command
line's modules load (a second or so), so a signal during the start is a quiet exit 130."""

from __future__ import annotations

import sys


def main() -> int:
    from . import interrupt

    with interrupt.handling():
        try:
            from .cli import main as run
        except KeyboardInterrupt:
            return interrupt.exit_status()
        return run()


if __name__ == "__main__":
    sys.exit(main())
