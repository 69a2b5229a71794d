"""The second audit's defects about files, each reproduced as the audit wrote it: what is written
never replaces a special file, nor is lost to a signal, a failed output or a Ctrl-C; a
calibration is stored whole or never; a hostile input file is one clear line. Each test failed
before its fix."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from xferscope.documents import files

# own_history: test_audit's autouse fixture (each test a history of its own), which holds here
# too; imported, pytest finds it.
from .test_audit import RUN, SWEEP, own_history  # noqa: F401
from .test_cli import assert_one_line_error, run

# ---- 1. writing a file never replaces what is not a regular file --------------------------------


def test_a_fifo_is_refused_before_measuring_and_stays_a_fifo(capsys, tmp_path):
    fifo = tmp_path / "metrics.prom"
    os.mkfifo(fifo)
    code, _, err = run(capsys, *RUN, "-o", str(tmp_path / "r"), "--prometheus", str(fifo))
    assert code == 2
    assert_one_line_error(code, err, "--prometheus", "is a FIFO", "not a regular file")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


@pytest.mark.parametrize("option", ["--json", "--csv"])
def test_a_device_node_is_refused_even_with_force(capsys, tmp_path, option):
    code, _, err = run(capsys, *SWEEP, "-o", str(tmp_path), option, os.devnull, "--force")
    assert_one_line_error(code, err, option, "is a character device")
    assert code == 2
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_a_symlink_is_written_through_to_its_target_and_stays_a_link(capsys, tmp_path):
    real = tmp_path / "exporter" / "xferscope.prom"
    real.parent.mkdir()
    real.write_text("old\n")
    link = tmp_path / "link.prom"
    link.symlink_to(real)
    code, _, err = run(capsys, *RUN, "-o", str(tmp_path / "r"), "--prometheus", str(link))
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert "xferscope_" in real.read_text()
    # the temporary file was made beside the target, and none is left
    assert sorted(p.name for p in real.parent.iterdir()) == ["xferscope.prom"]


def test_a_dangling_symlink_gets_its_target_made(tmp_path):
    link = tmp_path / "out.json"
    link.symlink_to(tmp_path / "made.json")
    files.atomic_write(link, "{}")
    assert link.is_symlink() and (tmp_path / "made.json").read_text() == "{}"


def test_a_symlink_loop_is_refused(capsys, tmp_path):
    (tmp_path / "a.json").symlink_to(tmp_path / "b.json")
    (tmp_path / "b.json").symlink_to(tmp_path / "a.json")
    code, _, err = run(capsys, *SWEEP, "--json", str(tmp_path / "a.json"), "--force")
    assert_one_line_error(code, err, "--json", "loop")


def test_a_path_made_special_while_measuring_is_not_replaced(tmp_path):
    fifo = tmp_path / "late.json"
    os.mkfifo(fifo)
    with pytest.raises(files.NotRegularFile, match="FIFO"):
        files.atomic_write(fifo, "{}")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["late.json"]


def test_a_history_that_is_a_fifo_is_refused_not_waited_on(capsys, tmp_path):
    fifo = tmp_path / "history.fifo"
    os.mkfifo(fifo)
    code, _, err = run(capsys, *RUN[:-1], "-o", str(tmp_path), "--history", str(fifo))
    assert_one_line_error(code, err, "--history", "is a FIFO")
    assert code == 2


# ---- 4. a document with NaN in it is still written -----------------------------------------------


def test_a_document_with_non_finite_numbers_is_written_with_nulls():
    from xferscope.documents.envelope import dumps_document

    text = dumps_document({"a": float("nan"), "b": [1.0, float("inf"), {"c": -float("inf")}]})
    assert json.loads(text) == {"a": None, "b": [1.0, None, {"c": None}]}


def test_a_data_file_that_cannot_be_made_costs_no_other_file(tmp_path):
    from xferscope.cli.outputs import Delivery, Output, text

    def broken() -> str:
        raise ValueError("Out of range float values are not JSON compliant")

    outputs = [
        Output(tmp_path / "a.json", text(broken), "--json", False),
        Output(tmp_path / "a.csv", text(lambda: "x\n"), "--csv", False),
    ]
    delivery = Delivery(outputs)
    delivery.write_data()
    assert (tmp_path / "a.csv").read_text() == "x\n"
    assert delivery.failures == [
        f"cannot write {tmp_path / 'a.json'}: ValueError: Out of range float values are not "
        "JSON compliant"
    ]


# ---- 5. signals work while writing ---------------------------------------------------------------


def test_a_signal_while_writing_after_an_earlier_one_stops_the_writing(tmp_path):
    from xferscope.cli.outputs import Delivery, Output, text
    from xferscope.core import interrupt

    def second_signal() -> str:
        interrupt._handler(2, None)  # what a second Ctrl-C does while the CSV is written
        return "never written"

    (tmp_path / "a.csv").write_text("earlier\n")
    with interrupt.handling():
        interrupt.record_only()
        interrupt.request()  # the first Ctrl-C, while measuring
        delivery = Delivery(
            [
                Output(tmp_path / "a.json", text(lambda: "{}"), "--json", False),
                Output(tmp_path / "a.csv", text(second_signal), "--csv", True),
                Output(tmp_path / "b.csv", text(lambda: "x"), "--csv", False),
            ]
        )
        delivery.write_data()
    assert (tmp_path / "a.json").read_text() == "{}"
    assert (tmp_path / "a.csv").read_text() == "earlier\n"  # the cut file is not replaced
    assert delivery.unwritten == [tmp_path / "a.csv", tmp_path / "b.csv"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv", "a.json"]
    assert not delivery.ok


def test_signals_before_writing_never_cut_it(tmp_path):
    from xferscope.cli.outputs import Delivery, Output, text
    from xferscope.core import interrupt

    with interrupt.handling():
        interrupt.record_only()
        interrupt.request()
        interrupt.request()  # two Ctrl-C while measuring
        delivery = Delivery([Output(tmp_path / "a.json", text(lambda: "{}"), "--json", False)])
        delivery.write_data()
    assert (tmp_path / "a.json").read_text() == "{}" and delivery.ok


# ---- 6. batch --calibrate: the store is checked first; a part of the grid is never stored --------


@pytest.mark.parametrize("variable", [True, False])
def test_calibrate_checks_where_it_stores_before_measuring(capsys, tmp_path, monkeypatch, variable):
    """A store $XFERSCOPE_CALIBRATION names is that variable's fault, not --calibrate's."""
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    if variable:
        monkeypatch.setenv("XFERSCOPE_CALIBRATION", str(blocker / "calibration"))
    else:
        monkeypatch.delenv("XFERSCOPE_CALIBRATION")
        monkeypatch.setenv("XDG_DATA_HOME", str(blocker))
    code, _, err = run(capsys, "batch", "--simulate", "--calibrate", "-o", str(tmp_path / "o"))
    assert_one_line_error(code, err, "$XFERSCOPE_CALIBRATION:" if variable else "--calibrate:")
    assert code == 2 and not (tmp_path / "o").exists()


def test_a_partial_calibration_is_never_stored(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("XFERSCOPE_CALIBRATION", str(tmp_path / "cal"))
    code, _, err = run(capsys, "batch", "--simulate", "--calibrate", "--counts", "4",
                       "-o", str(tmp_path / "o"))  # fmt: skip
    assert code == 0, err
    assert "--counts given" in err and "calibration not stored" in err
    assert not list((tmp_path / "cal").glob("*.json"))


def test_a_calibration_from_another_gpu_or_partial_decides_nothing(tmp_path, monkeypatch):
    from xferscope.batch.measure import BatchOptions, dumps_json, measure
    from xferscope.core.engine.simulated import SimulatedEngine
    from xferscope.transfer import calibration as choose
    from xferscope.transfer.batch_document import CALIBRATION_COUNTS, CALIBRATION_SIZES

    monkeypatch.setenv("XFERSCOPE_CALIBRATION", str(tmp_path))
    engine = SimulatedEngine()
    whole = measure(engine, BatchOptions(counts=CALIBRATION_COUNTS,
                                         sizes=CALIBRATION_SIZES, target_s=0.002,
                                         trials=1, as_copy_many=True))  # fmt: skip
    real_gpu = "GPU-12345678-aaaa-bbbb-cccc-0123456789ab"
    # the simulated GPU's whole calibration, copied to where a real GPU's would be
    choose.calibration_path(real_gpu).parent.mkdir(parents=True, exist_ok=True)
    choose.calibration_path(real_gpu).write_text(dumps_json(whole))
    assert choose._read(choose.calibration_path(real_gpu), real_gpu) is None
    simulated = choose.gpu_key(engine.device_info(0))
    path = choose.save(whole, simulated)
    assert choose._read(path, simulated) is not None
    part = measure(engine, BatchOptions(counts=(4,), sizes=(4096,), target_s=0.002, trials=1,
                                        as_copy_many=True))  # fmt: skip
    with pytest.raises(ValueError, match="unmeasured"):
        choose.save(part, simulated)


# ---- 9. hostile input files ---------------------------------------------------------------------


@pytest.mark.parametrize("command", [["report"], ["compare", "{path}"]])
def test_deeply_nested_json_is_one_line(capsys, tmp_path, command):
    path = tmp_path / "deep.json"
    path.write_text('{"schema": "xferscope-run", "x": ' + "[" * 200_000 + "]" * 200_000 + "}")
    args = [a.format(path=path) for a in command]
    code, _, err = run(capsys, *args, str(path))
    assert_one_line_error(code, err, "nested too deeply")


@pytest.mark.parametrize(
    "args",
    [
        ["report", "{fifo}"],
        ["gemm", "--simulate", "--shapes-file", "{fifo}"],
        ["fleet", "--simulate", "--thresholds", "{fifo}"],
        ["batch", "--simulate", "--size-mix", "file:{fifo}"],
    ],
)
def test_an_input_file_that_is_a_fifo_is_refused_not_waited_on(capsys, tmp_path, args):
    fifo = tmp_path / "input"
    os.mkfifo(fifo)
    code, _, err = run(capsys, *[a.format(fifo=fifo) for a in args])
    assert_one_line_error(code, err, "FIFO")


def test_report_of_a_nan_says_nan(capsys, tmp_path):
    path = tmp_path / "nan.json"
    code, _, _ = run(capsys, *SWEEP, "--json", str(path))
    assert code == 0
    path.write_text(path.read_text().replace('"wall_s": ', '"wall_s": NaN, "old": ', 1))
    code, _, err = run(capsys, "report", str(path), "-o", str(tmp_path))
    assert_one_line_error(code, err, "expected a finite number, found NaN")


def _json(path: Path) -> dict[str, object]:
    return json.loads(path.read_text())  # type: ignore[no-any-return]


# ---- 13. a Ctrl-C in the middle of a size keeps that size's trials ------------------------------


def test_pageable_interrupted_mid_size_keeps_what_was_measured(capsys, tmp_path, monkeypatch):
    from xferscope.core.engine.simulated import SimulatedEngine

    monkeypatch.setattr(
        "xferscope.cli.common.open_engine", lambda s, **k: SimulatedEngine(interrupt_after=7)
    )
    code, _, err = run(capsys, "pageable", "--simulate", "--sizes", "1MiB,1GiB", "--sends",
                       "1,10", "-o", str(tmp_path))  # fmt: skip
    assert code == 130, err
    (doc,) = tmp_path.glob("pageable-*/pageable.json")
    data = _json(doc)
    assert data["interrupted"] is True
    (size,) = data["sizes"]  # type: ignore[misc]
    assert size["bytes"] == 1 << 30 and size["samples"]["staged_copy_s"]


def test_a_size_cut_before_its_staged_copies_is_tabled_without_them(capsys, tmp_path, monkeypatch):
    from xferscope.core.engine.simulated import SimulatedEngine

    monkeypatch.setattr(
        "xferscope.cli.common.open_engine", lambda s, **k: SimulatedEngine(interrupt_after=3)
    )
    code, out, _ = run(capsys, "pageable", "--simulate", "--sizes", "1GiB", "--sends", "1,10",
                       "-o", str(tmp_path))  # fmt: skip
    assert code == 130
    header = next(line for line in out.splitlines() if "fastest" in line)
    assert "staged" not in header and "registered" in header
    row = next(line for line in out.splitlines() if line.strip("│ ").startswith("10 "))
    assert row.rstrip(" │").split("│")[-1].strip() in ("pageable", "pinned", "registered")
