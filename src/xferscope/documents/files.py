"""Writing result files: atomically, never over a file nobody asked to replace, and checked
before anything is measured.

- `atomic_write` and `atomic_path` write through a temporary file in the same directory, flushed
  to disk and then renamed into place: a reader never sees half a file, and a failed write
  leaves any earlier file as it was. With `overwrite=False` the file is published with link(2),
  which refuses to replace an existing name even when another process made it a moment ago.
- `probe` creates a directory's missing parents and a file in it, and removes the file: a
  location that cannot be written fails before measuring, with the path the user gave.
- `new_directory` makes a directory of its own for one result (name, name-2, name-3, ...), by
  mkdir(2), which two processes cannot both win.
- Only regular files are ever written or replaced. A path that is a FIFO, a device, a socket or
  a directory is refused (`special`); a symlink is followed and its target written, atomically,
  in the target's directory (`target`), so the link stays a link and node_exporter's directory
  keeps whatever links its owner made.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..core.errors import OptionError
from ..core.units import format_bytes


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# Read once, at import, while nothing else runs: os.umask can only be read by setting it.
_UMASK = _read_umask()
DEFAULT_MODE = 0o666 & ~_UMASK


def reason(exc: OSError) -> str:
    """An OSError's reason without the file name it carries (often a temporary file's)."""
    return exc.strerror or str(exc)


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symbolic link that leads nowhere a file can be (a loop)"),
)


def special(path: Path) -> str | None:
    """What `path` is when it exists and is not a regular file once symlinks are followed ("a
    FIFO", "a directory", ...); None for a regular file or a free name."""
    try:
        mode = os.lstat(target(path)).st_mode
    except OSError:  # nothing there, or a parent that is no directory: `probe` says which
        return None
    for test, kind in _KINDS:
        if test(mode):
            return kind
    return None


def target(path: Path) -> Path:
    """Where writing `path` lands: the file a symlink leads to (the link itself is never
    replaced), else `path` itself."""
    path = Path(path)
    if not path.is_symlink():
        return path
    return Path(os.path.realpath(path))


class NotRegularFile(OSError):
    """A path exists and is not a regular file: it is never replaced by one."""

    def __init__(self, path: Path, kind: str) -> None:
        super().__init__(errno.EINVAL, f"it is {kind}, not a regular file", str(path))


# The largest input file an option names (a list of shapes or sizes, thresholds).
MOST_INPUT_BYTES = 64 << 20


def read_text(path: Path, most_bytes: int = MOST_INPUT_BYTES) -> str:
    """A file named on the command line, as UTF-8 text. Raises OSError (its strerror says why)
    for a path that is not a regular file (a FIFO would wait forever, /dev/zero never end) or
    holds more than `most_bytes`, and UnicodeDecodeError for one that is not text."""
    path = Path(path)
    kind = special(path)
    if kind is not None:
        raise NotRegularFile(path, kind)
    with open(path, "rb") as handle:
        data = handle.read(most_bytes + 1)
    if len(data) > most_bytes:
        raise OSError(errno.EFBIG, f"it holds more than {format_bytes(most_bytes)}", str(path))
    return data.decode("utf-8")


def _check_regular(path: Path) -> None:
    kind = special(path)
    if kind is not None:
        raise NotRegularFile(path, kind)


def _publish(temp: Path, path: Path, overwrite: bool) -> None:
    _check_regular(path)  # again: it may have been made one while the command measured
    if overwrite:
        os.replace(temp, path)
        return
    try:
        os.link(temp, path)  # fails with EEXIST whoever made `path`
    except OSError as exc:
        if exc.errno == errno.EEXIST:
            raise FileExistsError(errno.EEXIST, "the file exists", str(path)) from None
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
            raise
        # A file system without hard links: check, then rename (a narrow race, but no worse).
        if path.exists():
            raise FileExistsError(errno.EEXIST, "the file exists", str(path)) from None
        os.replace(temp, path)
    else:
        temp.unlink()


@contextlib.contextmanager
def atomic_path(path: Path, *, overwrite: bool = True, mode: int | None = None) -> Iterator[Path]:
    """Yields a temporary path beside `path` for a writer that wants a file name (matplotlib's
    savefig); publishes it at `path` when the block ends without an exception. The file gets
    `mode`, by default what the umask allows (mkstemp alone would make it private). A symlink
    at `path` is followed; a path that is not a regular file raises NotRegularFile."""
    path = target(Path(path))
    _check_regular(path)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    temp = Path(name)
    try:
        try:
            os.fchmod(fd, DEFAULT_MODE if mode is None else mode)
        finally:
            os.close(fd)
        yield temp
        with open(temp, "rb+") as handle:
            os.fsync(handle.fileno())
        _publish(temp, path, overwrite)
    finally:
        temp.unlink(missing_ok=True)


def atomic_write(
    path: Path, data: str | bytes, *, overwrite: bool = True, mode: int | None = None
) -> None:
    """Writes `data` (text as UTF-8) to `path` atomically; see atomic_path."""
    with atomic_path(path, overwrite=overwrite, mode=mode) as temp:
        if isinstance(data, str):
            temp.write_text(data, encoding="utf-8", newline="")
        else:
            temp.write_bytes(data)


def probe(option: str, directory: Path, target: Path | None = None) -> Path:
    """Creates `directory` (and its parents) if missing and writes and removes a file in it;
    an OptionError naming `option` and the file the user gave (`target`, else the directory)
    if either fails."""
    where = "" if target is None else f" for '{target}'"
    kind = special(directory)
    if directory.exists() and kind != "a directory":
        what = kind or "a file"
        raise OptionError(option, f"'{directory}' is {what}, not a directory{where}")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OptionError(
            option, f"cannot create directory '{directory}'{where}: {reason(exc)}"
        ) from None
    if not directory.is_dir():
        raise OptionError(option, f"'{directory}' is not a directory{where}")
    try:
        fd, name = tempfile.mkstemp(dir=directory, prefix=".xferscope-probe-")
    except OSError as exc:
        shown = directory if target is None else target
        raise OptionError(option, f"cannot write '{shown}': {reason(exc)}") from None
    os.close(fd)
    os.unlink(name)
    return directory


def new_directory(option: str, parent: Path, name: str) -> Path:
    """parent/name, or parent/name-2, -3, ... when taken: a new, empty directory of its own."""
    probe(option, parent)
    for n in range(1, 10_000):
        directory = parent / (name if n == 1 else f"{name}-{n}")
        try:
            directory.mkdir()
            return directory
        except FileExistsError:
            continue
        except OSError as exc:
            raise OptionError(option, f"cannot create '{directory}': {reason(exc)}") from None
    raise OptionError(option, f"too many results named {name} in '{parent}'")


def remove_if_empty(directory: Path) -> bool:
    """Removes `directory` if nothing is in it; whether it did."""
    try:
        directory.rmdir()
        return True
    except OSError:
        return False


def free_name(path: Path) -> Path:
    """`path` if nothing is there, else the first of stem-2.ext, stem-3.ext, ... that is free."""
    if not path.exists():
        return path
    for n in range(2, 10_000):
        candidate = path.with_name(f"{path.stem}-{n}{path.suffix}")
        if not candidate.exists():
            return candidate
    raise FileExistsError(errno.EEXIST, "no free name", str(path))
