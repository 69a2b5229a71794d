"""Native callers named: each return address a traced program's calls came from, as
"object+offset (function)". The exported symbol the injection library saw where there is one,
else the function addr2line finds in the object's symbol table, with file:line where it has
debug information. One addr2line per object, side by side, and what each found kept between
runs (core/cache.py, NAMES_FILE, per object, its size and time of change): a PyTorch program's
callers lie in five or more libraries (libtorch_cpu.so alone is 0.5 GB), and reading them one
after another took 0.3 s of a Ctrl-C'd trace's end on an H200 host."""

from __future__ import annotations

import concurrent.futures
import shutil
import subprocess
from pathlib import Path
from typing import Any

from ..core import cache
from .records import ENGINE_OBJECT

ADDR2LINE_AT_ONCE = 8  # objects read at a time
NAMES_FILE = "native-names.json"
# what the file holds at most: beyond, it starts afresh (a machine's libraries change seldom; a
# file that only grew would cost every trace its reading)
NAMES_KEPT = 100_000

# a frame in these is a library's code inlined into the program (a standard header), not its own
SYSTEM_HEADERS = ("/usr/include/", "/include/c++/", "/usr/lib/gcc/", "/cuda/include/",
                  "/targets/x86_64-linux/include/")  # fmt: skip


def symbolize(raw: dict[int, tuple[str, int, str]]) -> dict[int, str]:
    """Each return address (object, offset in it, the symbol the library saw) named. Objects no
    longer there keep their offsets."""
    by_object: dict[str, list[tuple[int, int]]] = {}
    names: dict[int, str] = {}
    for a, (obj, off, sym) in raw.items():
        sym = "" if Path(obj).name.startswith(ENGINE_OBJECT) else sym
        names[a] = _name(obj, off, sym)
        if not sym and Path(obj).is_file():
            by_object.setdefault(obj, []).append((a, off))
    tool = shutil.which("addr2line")
    if tool is None or not by_object:
        return names
    kept = cache.load(NAMES_FILE)
    keys = {obj: _object_key(obj) for obj in by_object}
    known: dict[str, dict[str, Any]] = {}  # each object's names kept, by offset ("0x...")
    for obj, key in keys.items():
        entry = kept.get(key) if key else None
        known[obj] = entry if isinstance(entry, dict) else {}
    unknown = {obj: [off for _, off in items if not isinstance(known[obj].get(f"{off:#x}"), str)]
               for obj, items in by_object.items()}  # fmt: skip
    unknown = {obj: offsets for obj, offsets in unknown.items() if offsets}
    if unknown:
        with concurrent.futures.ThreadPoolExecutor(min(len(unknown), ADDR2LINE_AT_ONCE)) as pool:
            named = pool.map(lambda o: _addr2line(tool, o, unknown[o]), unknown)
            read = dict(zip(unknown, named, strict=True))
        for obj, found in read.items():
            known[obj] |= {f"{off:#x}": name for off, name in found.items()}
        _keep(kept, {key: known[obj] for obj in read if (key := keys[obj])})
    for obj, items in by_object.items():
        for a, off in items:
            function = known[obj].get(f"{off:#x}")
            if isinstance(function, str) and function:
                names[a] = _name(obj, off, function)
    return names


def _name(obj: str, off: int, function: str) -> str:
    """A return address as said: "object+offset (function)", or without a function known."""
    return f"{Path(obj).name}+{off:#x}" + (f" ({function})" if function else "")


def _object_key(obj: str) -> str | None:
    """What an object's names are kept under: its path, size and time of change (a library
    built again is read again); None where it cannot be read."""
    try:
        st = Path(obj).stat()
    except OSError:
        return None
    return f"{obj}|{st.st_size}|{st.st_mtime_ns}"


def _addr2line(tool: str, obj: str, offsets: list[int]) -> dict[int, str]:
    """The function (and file:line) addr2line names for each offset of `obj`: "" where it
    names none (kept so, not asked again), none at all where it could not run."""
    try:
        out = subprocess.run(
            [tool, "-a", "-i", "-f", "-C", "-e", obj, *(f"{off - 1:#x}" for off in offsets)],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    chains = inlined(out)
    if len(chains) != len(offsets):  # cut short: nothing read is trusted or kept
        return {}
    found: dict[int, str] = {}
    for off, chain in zip(offsets, chains, strict=True):
        own = own_frame(chain)
        if own is None:
            found[off] = ""
            continue
        function, place = own
        line = "" if place.startswith("??") else f" {Path(place.split(' ')[0]).name}"
        found[off] = f"{function}{line}"
    return found


def _keep(kept: dict[str, Any], objects: dict[str, dict[str, Any]]) -> None:
    """The names kept with these objects' (by their keys) in place of theirs, the file written
    once; afresh when it would pass NAMES_KEPT names."""
    if not objects:
        return
    kept |= objects
    if sum(len(v) for v in kept.values() if isinstance(v, dict)) > NAMES_KEPT:
        kept = objects
    cache.store(NAMES_FILE, kept)


def inlined(text: str) -> list[list[tuple[str, str]]]:
    """addr2line -a -i -f's output per address: its (function, file:line) frames, the
    innermost inlined one first."""
    chains: list[list[tuple[str, str]]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("0x"):
            chains.append([])
            i += 1
            continue
        if chains and i + 1 < len(lines):
            chains[-1].append((lines[i], lines[i + 1]))
        i += 2
    return chains


def own_frame(chain: list[tuple[str, str]]) -> tuple[str, str] | None:
    """The innermost frame of an address's inline chain that is the program's own code (not a
    standard header inlined into it), else its innermost; None where nothing is known."""
    known = [(f, p) for f, p in chain if f and f != "??"]
    own = next((fp for fp in known if not any(h in fp[1] for h in SYSTEM_HEADERS)), None)
    return own or (known[0] if known else None)
