"""`xferscope run --resume RUN`: an interrupted run (Ctrl-C, a job's time limit) continued on the
same GPUs. The GPUs it completed and the several-GPU measurements it completed are kept; the
rest is measured now, and the new run says which part is from when."""

from __future__ import annotations

from pathlib import Path

from ..core.engine import Engine
from ..core.errors import OptionError, XferscopeError
from ..documents.reader import DocumentError, SchemaError, read_document
from .investigate import RunOptions
from .records import RunResult, run_from_dict

OPTION = "--resume"


def load_interrupted(ref: str, history_path: Path | None = None) -> RunResult:
    """The run to continue: its id in the history at `history_path` (a whole number; an
    interrupted run is kept there too), its run.json, or the directory that holds it."""
    if ref.strip().isdigit() and history_path is not None:
        from .history import History, HistoryError

        try:
            with History(history_path, readonly=True) as history:
                earlier = history.get(int(ref))
        except HistoryError as exc:
            raise OptionError(OPTION, str(exc)) from None
        if not earlier.interrupted:
            raise OptionError(OPTION, f"run {ref.strip()} is complete: there is nothing to resume")
        return earlier
    path = Path(ref).expanduser()
    if path.is_dir():
        path = path / "run.json"
    try:
        document = read_document(path)
    except DocumentError as exc:
        raise OptionError(OPTION, str(exc)) from None
    if document.get("schema") != "xferscope-run":
        raise OptionError(OPTION, f"{path} is not the result of `xferscope run`")
    try:
        earlier = run_from_dict(document)
    except SchemaError as exc:
        raise OptionError(OPTION, f"{path} is not a valid run document: {exc}") from None
    if not earlier.interrupted:
        raise OptionError(OPTION, f"the run in {path} is complete: there is nothing to resume")
    return earlier


def options_of(earlier: RunResult) -> RunOptions:
    """The devices, mode and seed of the run being continued."""
    options = earlier.options
    devices = tuple(int(d) for d in options.get("devices", ()))
    if "seed" in options:
        return RunOptions(devices, bool(options.get("quick", False)), int(options["seed"]))
    return RunOptions(devices, bool(options.get("quick", False)))


def check_same_gpus(engine: Engine, earlier: RunResult, devices: tuple[int, ...]) -> None:
    """The run continues only on the GPUs it began on: the same UUIDs at the same indices (a
    simulated run only with the simulated engine)."""
    if earlier.simulated != engine.simulated:
        began = "the simulated engine" if earlier.simulated else "real GPUs"
        raise OptionError(OPTION, f"that run began on {began}; it continues only there")
    then = {g.get("index"): g.get("uuid") for g in earlier.machine.get("gpus", [])}
    count = engine.device_count()
    for device in devices:
        try:
            now = engine.device_info(device).get("uuid") if device < count else None
        except XferscopeError:  # the GPU is gone: say so as the option's error
            now = None
        if now is None or then.get(device) != now:
            raise OptionError(
                OPTION,
                f"GPU {device} is not the GPU that run began on ({then.get(device)}); a run "
                "continues only on its own GPUs",
            )
