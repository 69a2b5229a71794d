"""The tests' own shape, read from their source with ast: no assert whose message is itself a
check (`assert code == 0, err and "x" in out` tests only the code: the second check is the
message, never evaluated as a test), and no assert of a bare constant."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]


def _checks_in_messages(tree: ast.AST) -> list[int]:
    """The lines of asserts whose message is a boolean expression or a comparison."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert) and node.msg is not None:
            message = node.msg
            negated = isinstance(message, ast.UnaryOp) and isinstance(message.op, ast.Not)
            if isinstance(message, (ast.BoolOp, ast.Compare)) or negated:
                found.append(node.lineno)
        if isinstance(node, ast.Assert) and isinstance(node.test, ast.Constant):
            found.append(node.lineno)
    return found


def test_no_assert_hides_a_check_in_its_message():
    found = [
        f"{path.relative_to(TESTS.parent)}:{line}"
        for path in sorted(TESTS.rglob("*.py"))
        for line in _checks_in_messages(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert found == []


@pytest.mark.parametrize(
    ("source", "lines"),
    [
        ('assert code == 0, err and "x" in out', [1]),
        ("assert ok, not done", [1]),
        ("assert a, b == c", [1]),
        ("assert True", [1]),
        ('assert code == 0, err\nassert "x" in out, out', []),
        ('assert ok, f"{a} and {b}"', []),
    ],
)
def test_the_finder_finds_them(source, lines):
    assert _checks_in_messages(ast.parse(source)) == lines
