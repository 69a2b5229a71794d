"""What users read names no internal seed document (issue 47): every command's --help, the
gemm preset and its messages, the strings the reports and the case listing print, and a gemm
report rendered from a simulated run. The former preset name `seed003` still runs, hidden."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from xferscope import cli
from xferscope.cli.app import load_commands
from xferscope.core.cases import EXPERIMENTS
from xferscope.core.errors import OptionError
from xferscope.gemm.shapes import PRESETS, parse_sizes

SEED = re.compile(r"seed ?0\d\d", re.IGNORECASE)
SRC = Path(__file__).parents[2] / "src" / "xferscope"
# Modules whose strings reach users: the commands' help and messages, what the reports print.
USER_FACING = sorted([*(SRC / "cli").glob("*.py"), *(SRC / "report").glob("*.py")])


@pytest.fixture(autouse=True)
def history(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "history.sqlite3"
    monkeypatch.setenv("XFERSCOPE_HISTORY", str(path))
    return path


def _commands() -> list[list[str]]:
    """Every command and subcommand, as the words that name it (the group itself: [])."""
    load_commands()

    def walk(command: click.Command, words: list[str]) -> Iterator[list[str]]:
        yield words
        if isinstance(command, click.Group):
            for name, sub in sorted(command.commands.items()):
                yield from walk(sub, [*words, name])

    return list(walk(cli.cli, []))


def test_the_former_preset_name_still_gives_the_same_sizes():
    assert PRESETS["near-8k"] == tuple(range(8128, 8181, 8))
    assert parse_sizes("--sizes", "seed003") == parse_sizes("--sizes", "near-8k")
    assert parse_sizes("--sizes", "SEED003, 4096") == parse_sizes("--sizes", "near-8k,4096")
    assert "seed003" not in PRESETS  # hidden: listed nowhere a preset's name is shown


def test_the_sizes_message_names_the_preset_not_the_seed():
    with pytest.raises(OptionError) as caught:
        parse_sizes("--sizes", " , ")
    assert "near-8k" in str(caught.value) and not SEED.search(str(caught.value))


def test_the_command_list_covers_the_subcommands():
    found = _commands()
    assert ["gemm"] in found and ["overlap", "cpu"] in found and ["overlap", "buffers"] in found


@pytest.mark.parametrize("command", _commands(), ids=lambda words: " ".join(words) or "xferscope")
def test_no_help_names_a_seed(command):
    result = CliRunner().invoke(cli.cli, [*command, "--help"], prog_name="xferscope")
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output
    named = [line.strip() for line in result.output.splitlines() if SEED.search(line)]
    assert not named, f"xferscope {' '.join(command)} --help names a seed: {named}"


def test_gemm_help_names_the_preset_and_not_its_former_name():
    result = CliRunner().invoke(cli.cli, ["gemm", "--help"], prog_name="xferscope")
    text = " ".join(result.output.split())
    assert "near-8k (8128-8180 by 8" in text and "[default: near-8k]" in text
    assert "seed003" not in text


def _printed_strings(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of every string literal in a module but its docstrings (the module's, its
    classes' and its functions'), which cite the seeds for whoever reads the code; a command's
    docstring, which is its help, is checked through --help above."""
    tree = ast.parse(path.read_text())
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if ast.get_docstring(node, clean=False) and isinstance(first, ast.Expr):
                docstrings.add(id(first.value))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ):
            yield node.lineno, node.value


@pytest.mark.parametrize("path", USER_FACING, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_printed_string_names_a_seed(path):
    named = [f"{path.name}:{line}: {text!r}" for line, text in _printed_strings(path)]
    named = [entry for entry in named if SEED.search(entry.split(": ", 1)[1])]
    assert not named, "strings users read name a seed:\n" + "\n".join(named)


def test_the_case_listing_names_no_seed():
    assert not [e.key for e in EXPERIMENTS if SEED.search(e.description)]


def test_the_gemm_report_names_no_seed(capsys, tmp_path):
    code = cli.main(
        [
            "gemm",
            "--simulate",
            "--quick",
            "--trials",
            "3",
            "--precision",
            "fp32",
            "--transfers",
            "none",
            "--pad",
            "off",
            "--cpu",
            "1",
            "--cpu-sizes",
            "256",
            "--ladder",
            "16",
            "-o",
            str(tmp_path),
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    (page,) = tmp_path.glob("gemm-*/report.html")
    html = page.read_text()
    assert "Alignment classes (largest power of two dividing M, N and K)" in html
    assert "scaling: CPU scaling over threads" in html
    for text in (out, err, html):
        assert not SEED.search(text), SEED.search(text)
