"""What holds a resource until closed, as a context manager: `with X(...) as x:` closes it on
the way out, whatever happened (KeyboardInterrupt included). Written once for the history, the
staged copier and DeviceLoader."""

from __future__ import annotations

from typing import TypeVar

Self = TypeVar("Self", bound="Closing")


class Closing:
    """A base whose `with` block ends in close(); close() itself is the subclass's, safe to call
    more than once."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: Self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
