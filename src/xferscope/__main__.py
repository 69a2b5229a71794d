"""`python -m xferscope` and the `xferscope` command.

Ctrl-C is taken over before the command line's modules load (a second or so), so a signal at
any moment, from the start to the very end, is a quiet exit with status 130 (143 for SIGTERM).
The process ends with os._exit once the command has returned, its output flushed and every
native buffer and thread released: nothing is left for the interpreter's teardown, which a late
signal could otherwise interrupt.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import NoReturn


def main() -> NoReturn:
    from .core import interrupt

    interrupt.install()
    try:
        from .cli.app import main as run

        code = run()
    except KeyboardInterrupt:  # during the import, before a command ran
        code = interrupt.exit_status()
    interrupt.record_only()  # the command is done: from here a signal is only recorded
    if interrupt.requested() and code == 0:
        code = interrupt.exit_status()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more to say
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
