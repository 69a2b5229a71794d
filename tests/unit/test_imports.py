"""The shape of the package, read from its source with ast: no import cycle, deferred imports
(inside functions) included, and no module importing a package above its own (`from .. import
__version__` in xferscope/cli/x.py imports xferscope itself, whose __init__ sits above cli);
and no module of the checkout's own code over MOST_LINES lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = "xferscope"


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()
# The compiled engine (CMakeLists.txt installs it into the package): a module that imports none.
COMPILED = {f"{PACKAGE}._engine"}


def _is_package(name: str) -> bool:
    return MODULES.get(name, Path()).name == "__init__.py"


def _resolve(module: str, node: ast.ImportFrom | ast.Import) -> list[str]:
    """The modules of the package that one import statement loads (a name imported from a
    package that is itself a module counts as that module)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == PACKAGE]
    if node.level:
        base = module.split(".")
        if not _is_package(module):
            base = base[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    if target.split(".")[0] != PACKAGE:
        return []
    out = []
    for alias in node.names:
        sub = f"{target}.{alias.name}"
        out.append(sub if sub in MODULES or sub in COMPILED else target)
    return out


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _graph() -> dict[str, set[str]]:
    """Module -> the modules its imports run. Importing a.b.c runs the packages a.b (and a)
    first, the ones the importer is not already inside: those count as imported too, since a
    package's __init__ that imports back is a cycle at run time."""
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        edges: set[str] = set()
        mine = set(_ancestors(name))
        for node in ast.walk(tree):  # every import, at any depth: deferred ones too
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _resolve(name, node):
                    for t in [*_ancestors(target), target]:
                        if t in MODULES and t != name and t not in mine:
                            edges.add(t)
        graph[name] = edges
    return graph


GRAPH = _graph()


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_source_is_read():
    assert len(MODULES) > 100 and GRAPH["xferscope.cli.sweep"]


def test_no_import_cycle_deferred_or_not():
    assert _cycles(GRAPH) == []


def test_no_module_imports_a_package_above_its_own():
    upward = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                upward += [
                    f"{name} imports {target}"
                    for target in _resolve(name, node)
                    if _is_package(target) and name.startswith(target + ".")
                ]
    assert upward == []


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"a"}, "c": set()}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, [["a", "b", "c"]]),
    ],
)
def test_the_cycle_finder_finds_cycles(graph, expected):
    assert _cycles(graph) == expected


# ---- module size ----------------------------------------------------------------------------

ROOT = SRC.parent
MOST_LINES = 600
# Where the checkout's own code lives, and which files are code: Python, C++ and CUDA.
CODE_DIRS = ("src", "engine", "bindings", "tests", "benchmarks", "build_backend", "scripts")
CODE_SUFFIXES = (".py", ".cpp", ".hpp", ".cu", ".cuh", ".h")
# A module allowed past MOST_LINES, with why. None is: a long module is split where its parts
# have jobs of their own.
LONGER: dict[str, str] = {}


def _code_files() -> list[Path]:
    return [
        path
        for top in CODE_DIRS
        for path in sorted((ROOT / top).rglob("*"))
        if path.suffix in CODE_SUFFIXES and path.is_file()
    ]


def test_no_module_is_over_600_lines():
    over = {
        str(path.relative_to(ROOT)): n
        for path in _code_files()
        if (n := len(path.read_text(encoding="utf-8", errors="replace").splitlines())) > MOST_LINES
    }
    assert {name: n for name, n in over.items() if name not in LONGER} == {}
    assert not set(LONGER) - set(over), "an exception no longer needed"


def test_the_size_rule_reads_every_kind_of_code():
    kinds = {path.suffix for path in _code_files()}
    assert {".py", ".cpp", ".hpp", ".cu"} <= kinds and len(_code_files()) > 200
