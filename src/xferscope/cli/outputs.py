"""Where a command's files go and how they are written: one way for every command.

Before measuring, `Destination.prepare` gives every file its path, in a new directory of the
command's own under --out (sweep-<time>, run-<time>, ...; -2, -3 when that name is taken) or
where an option names it, and probes every location: a path that cannot be written fails with
a one-line error before anything is measured. A file an option names that already exists is
refused unless --force: nothing is replaced without being asked.

After measuring, a `Delivery` writes, in this order:
  1. the data files (JSON first, then CSV and the like), whole, whatever signal arrives;
  2. (the command prints its report and adds the run to the history);
  3. the renderings (PNG, HTML), which Ctrl-C may cut short (interrupt.rendering): they can be
     drawn again from the JSON with `xferscope report`.
A write that fails names the path the user gave and costs no other file; a data file that
cannot be written where asked is saved in the temporary directory instead, and the summary says
where each file went.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from ..core import interrupt
from ..core.errors import OptionError
from ..documents import files
from ..report import drawing
from ..report.drawing import Page

# Writes a file's content at the temporary path it is given; `written` holds the files written
# before it (a page that links to them lists those).
Maker = Callable[[Path, Sequence[Path]], None]


@dataclass(frozen=True, slots=True)
class Named:
    """A file (or, with suffixes, a family of files) an option may name: `option` and its value
    (None: the default name `default` in the command's directory). `suffixes` complete a
    prefix (--plot PREFIX writes PREFIX-bandwidth.png ...); ("",) for a plain file.
    `replace`: the file is meant to be replaced each run (a Prometheus textfile)."""

    option: str
    value: str | None
    default: str | None = None
    suffixes: tuple[str, ...] = ("",)
    replace: bool = False


@dataclass(frozen=True, slots=True)
class Place:
    """Where one file or family of files goes, and who decided it."""

    path: Path
    option: str
    named: bool  # the user gave the path
    replace: bool  # an existing file there may be replaced


@dataclass(frozen=True, slots=True)
class Output:
    """One file to write. Data files are written first and never cut short; renderings are
    drawn after, and `urgent` ones (the HTML report) first among them after a Ctrl-C."""

    path: Path
    make: Maker
    option: str
    replace: bool
    render: bool = False
    urgent: bool = False
    mode: int | None = None


def _stamp() -> str:
    return dt.datetime.now().strftime("%Y%m%d-%H%M%S")


class Destination:
    """The places of one command's files, decided and checked before measuring."""

    def __init__(self, directory: Path | None, places: dict[str, Place], force: bool) -> None:
        self.directory = directory
        self.places = places
        self.force = force

    @classmethod
    def prepare(
        cls,
        out: str,
        name: str,
        named: Mapping[str, Named],
        force: bool = False,
        stamp: bool = True,
    ) -> Destination:
        """Makes the command's own directory out/name-<time> when any file goes there (stamp
        False: out/name), checks every named file, and probes every location."""
        for spec in named.values():
            if spec.value is not None and not spec.value.strip():
                raise OptionError(spec.option, "give a file name, not an empty string")
        if not out.strip():
            raise OptionError("--out", "give a directory, not an empty string")
        directory = None
        if any(spec.value is None for spec in named.values()):
            parent = Path(out).expanduser()
            directory = files.new_directory(
                "--out", parent, f"{name}-{_stamp()}" if stamp else name
            )
        places: dict[str, Place] = {}
        try:
            claimed: dict[Path, str] = {}
            for role, spec in named.items():
                places[role] = place = cls._place(spec, directory, force)
                for suffix in spec.suffixes:
                    path = files.target(Path(f"{place.path}{suffix}")).absolute()
                    if path in claimed:
                        raise OptionError(
                            spec.option,
                            f"'{path}' is also where {claimed[path]} writes; give each file "
                            "a name of its own",
                        )
                    claimed[path] = spec.option
        except BaseException:
            if directory is not None:
                files.remove_if_empty(directory)
            raise
        return cls(directory, places, force)

    @staticmethod
    def _place(spec: Named, directory: Path | None, force: bool) -> Place:
        if spec.value is None:
            assert directory is not None and spec.default is not None
            return Place(directory / spec.default, "--out", False, True)
        what = "a file name" if spec.suffixes == ("",) else "a prefix for the file names"
        if spec.value.endswith(("/", os.sep)):
            raise OptionError(
                spec.option, f"'{spec.value}' names a directory; give {what} in it instead"
            )
        path = Path(spec.value).expanduser()
        for suffix in spec.suffixes:
            target = Path(f"{path}{suffix}")
            kind = files.special(target)
            if kind is not None:
                raise OptionError(
                    spec.option,
                    f"'{target}' is {kind}, not a regular file; give {what} "
                    "(only regular files are written)",
                )
            if target.exists() and not (force or spec.replace):
                raise OptionError(
                    spec.option,
                    f"'{target}' exists; give another name, or --force to replace it",
                )
            files.probe(spec.option, files.target(target).parent, target)
        return Place(path, spec.option, True, force or spec.replace)

    def output(
        self,
        role: str,
        make: Maker,
        suffix: str = "",
        render: bool = False,
        urgent: bool = False,
        mode: int | None = None,
    ) -> Output:
        place = self.places[role]
        return Output(
            Path(f"{place.path}{suffix}"), make, place.option, place.replace, render, urgent, mode
        )

    def html(self, render: str, *args: Any) -> Output:
        """The command's HTML report (its place "html"): the page `render(*args, names)` returns
        (`render` named "package.module:function", as drawing.Page says), which links the files
        written before it (`names`), drawn with the renderings (by a worker process where there
        are some: report/drawing.py) and first among them after a Ctrl-C."""
        return self.output("html", Page(render, args), render=True, urgent=True)

    def result(
        self,
        result: Any,
        json: Callable[[Any], str],
        csv: Callable[[Any], str],
        plot: str | None,
    ) -> list[Output]:
        """The files of a command that writes one result: its JSON and CSV (places "json" and
        "csv", `json(result)` and `csv(result)` their texts), and where `plot` names a drawing
        function ("package.module:function", drawn with the result and the path) its PNG
        (place "plot")."""
        outputs = [
            self.output("json", text(lambda: json(result))),
            self.output("csv", text(lambda: csv(result))),
        ]
        if plot is not None:
            outputs.append(
                self.output("plot", drawing.Drawing(plot, (result,)), ".png", render=True)
            )
        return outputs

    def discard(self) -> None:
        """Nothing was measured: removes the command's directory if it is still empty."""
        if self.directory is not None:
            files.remove_if_empty(self.directory)

    def __enter__(self) -> Destination:
        return self

    def __exit__(self, *_exc: object) -> None:
        """However the command ends (an error while measuring, say), no empty directory of
        its own is left behind."""
        self.discard()


def text(content: Callable[[], str]) -> Maker:
    """A Maker for a text file whose content a function returns."""

    def make(path: Path, _written: Sequence[Path]) -> None:
        path.write_text(content(), encoding="utf-8", newline="")

    return make


@dataclass
class Delivery:
    """Writes a command's outputs in the order the module's docstring gives, and says what
    became of each."""

    outputs: Sequence[Output]
    written: list[Path] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # one line each
    notes: list[str] = field(default_factory=list)  # files that went elsewhere than asked
    skipped: list[Path] = field(default_factory=list)  # renderings cut short by a signal
    unwritten: list[Path] = field(default_factory=list)  # data files a second signal cut
    # False: after a signal no rendering is begun (under mpirun, which kills every rank 1 s after
    # it passes Ctrl-C on, the grace would outlast the process and hold up its last words).
    draw_after_signal: bool = True

    def write_data(self) -> None:
        """The data files, in the order given, each whole after a first signal; a second one
        stops writing (interrupt.writing) and the files not yet written are named."""
        interrupt.record_only()
        data = [o for o in self.outputs if not o.render]
        done = 0
        try:
            with interrupt.writing():
                for output in data:
                    self._write(output)
                    done += 1
        except KeyboardInterrupt:
            self.unwritten += [o.path for o in data[done:]]

    def render(self) -> None:
        """The renderings, by the drawing workers side by side where there are some (those
        that can travel: drawing.Drawing and Page), the rest here one after another; after a
        signal the urgent ones first, within interrupt.GRACE_S."""
        renders = [o for o in self.outputs if o.render]
        if interrupt.requested():
            if not self.draw_after_signal:
                self.skipped += [o.path for o in renders]
                return
            renders.sort(key=lambda o: not o.urgent)
        try:
            with interrupt.rendering():
                renders = self._draw_in_workers(renders)
                for i, output in enumerate(renders):
                    try:
                        self._write(output)
                    except KeyboardInterrupt:
                        self.skipped += [o.path for o in renders[i:]]
                        break
                    except Exception as exc:  # a drawing library's own error
                        if interrupt.requested():
                            # Cut mid-drawing, a library may turn the interrupt into an error
                            # of its own (matplotlib's "Invalid bounding box").
                            self.skipped += [o.path for o in renders[i:]]
                            break
                        self.failures.append(
                            f"cannot draw {output.path}: {type(exc).__name__}: {exc}"
                        )
        except KeyboardInterrupt:  # the grace had run out before the first one
            self.skipped += [o.path for o in renders if o.path not in self.written]

    def _draw_in_workers(self, renders: list[Output]) -> list[Output]:
        """Draws what can travel on the drawing workers, each into its temporary file,
        published as it is done; returns the renderings left to draw here. A signal kills the
        workers and removes their temporary files (KeyboardInterrupt goes on up)."""
        drawers = drawing.current()
        parallel = [o for o in renders if isinstance(o.make, (drawing.Drawing, drawing.Page))]
        if drawers is None or not parallel:
            return renders
        left = [o for o in renders if o not in parallel]
        opened: dict[int, tuple[Output, Any]] = {}
        tasks: list[tuple[Maker, Path, tuple[Path, ...]]] = []
        beside = list(self.written)  # what a page links: the files before it, as drawn here
        try:
            for output in parallel:
                place = files.atomic_path(output.path, overwrite=output.replace, mode=output.mode)
                try:
                    temp = place.__enter__()
                except OSError:
                    left.append(output)  # _write says what is wrong with the place
                    continue
                opened[len(tasks)] = (output, place)
                tasks.append((output.make, temp, tuple(beside)))
                beside.append(output.path)
            done: dict[int, Path] = {}
            for index, error in drawers.draw(tasks):
                output, place = opened.pop(index)
                if error is None:
                    try:
                        place.__exit__(None, None, None)
                        done[index] = output.path
                    except OSError:
                        left.append(output)  # drawn again here, where _write handles it
                    continue
                place.__exit__(RuntimeError, RuntimeError(error), None)
                if error.startswith(drawing.NOT_SENT):
                    left.append(output)
                else:
                    self.failures.append(f"cannot draw {output.path}: {error}")
            self.written += [done[i] for i in sorted(done)]
        except BaseException:
            drawers.kill()
            for _output, place in opened.values():
                place.__exit__(KeyboardInterrupt, KeyboardInterrupt(), None)
            raise
        return [o for o in renders if o in left]

    def _write(self, output: Output) -> None:
        path = output.path
        try:
            try:
                self._publish(output, path)
            except FileExistsError:
                # Made by someone else while this command measured: never replaced unasked.
                path = files.free_name(output.path)
                self._publish(output, path)
                self.notes.append(f"{output.path} appeared meanwhile; wrote {path} instead")
            self.written.append(path)
        except OSError as exc:
            message = f"cannot write {output.path}: {files.reason(exc)}"
            if not output.render:
                rescued = self._rescue(output)
                if rescued is not None:
                    message += f"; saved it as {rescued} instead"
            self.failures.append(message)
        except Exception as exc:
            if output.render:
                raise  # render() says what a drawing library's error cost
            # A data file whose content cannot be made: one line, and the others still written.
            self.failures.append(f"cannot write {output.path}: {type(exc).__name__}: {exc}")

    def _publish(self, output: Output, path: Path) -> None:
        with files.atomic_path(path, overwrite=output.replace, mode=output.mode) as temp:
            output.make(temp, tuple(self.written))

    def _rescue(self, output: Output) -> Path | None:
        """A data file that could not be written where asked, in the temporary directory."""
        name = f"xferscope-{_stamp()}-{output.path.name}"
        try:
            path = files.free_name(Path(tempfile.gettempdir()) / name)
            self._publish(output, path)
        except OSError:
            return None
        self.written.append(path)
        return path

    @property
    def ok(self) -> bool:
        return not self.failures and not self.unwritten

    def summary(self, console: Console, directory: Path | None, again: str | None) -> None:
        """What was written where, what could not be, and what Ctrl-C left undrawn (with the
        command that draws it: `again`)."""
        if self.written:
            inside = directory is not None and all(p.parent == directory for p in self.written)
            names = ", ".join(p.name if inside else str(p) for p in self.written)
            console.print(f"wrote {names}" + (f" in {directory}" if inside else ""), soft_wrap=True)
        for note in self.notes:
            console.print(f"note: {note}", soft_wrap=True)
        if self.unwritten:
            console.print(
                "not written (a second signal stopped the writing): "
                + ", ".join(str(p) for p in self.unwritten),
                soft_wrap=True,
            )
        if self.skipped:
            line = "not drawn (interrupted): " + ", ".join(p.name for p in self.skipped)
            if again:
                line += f"; `{again}` draws them"
            console.print(line, soft_wrap=True)
        for failure in self.failures:
            console.print(f"Error: {failure}", soft_wrap=True, markup=False)
