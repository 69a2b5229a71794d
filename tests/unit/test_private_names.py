"""No module reads another package's private names, read from the source with ast: a name that
starts with one underscore, imported from a module of another package (`from ..batch.copy import
_copier`), read as an attribute of such a module (`copy._copier`, `many._e`), or asked for by
name (`getattr(x, "_handle")`). The benchmarks, outside the package, read none at all. Within
a package, private names are shared freely; dunder names are public."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
PACKAGE = "xferscope"
# the compiled module, private by its name, and the one module that imports it
COMPILED, ITS_IMPORTER = f"{PACKAGE}._engine", f"{PACKAGE}.core.compiled"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _module_of(path: Path) -> str:
    """The dotted name of a module of the package ('' for a script outside it)."""
    if not path.is_relative_to(SRC):
        return ""
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package_of(module: str, path: Path) -> str:
    """The package a module belongs to: itself for a package's __init__, else its parent."""
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _target(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module an ImportFrom reads from."""
    if not node.level:
        return node.module or ""
    base = _package_of(module, path).split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _is_module(name: str) -> bool:
    """Whether a dotted name of the package is a module or a package (not a name in one)."""
    relative = Path(*name.split("."))
    return (SRC / relative).with_suffix(".py").exists() or (SRC / relative).is_dir()


def _foreign(target: str, home: str) -> bool:
    """Whether `target`, a module of the package, lies outside the package `home`."""
    if target.split(".")[0] != PACKAGE:
        return False
    return not home or not (target == home or target.startswith(home + "."))


def violations(path: Path) -> list[str]:
    module = _module_of(path)
    home = _package_of(module, path) if module else ""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    aliases: dict[str, str] = {}  # local name -> a module of another package
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = _target(module, path, node)
            for alias in node.names:
                full = f"{target}.{alias.name}"
                if _is_module(full):
                    if _foreign(full, home):
                        aliases[alias.asname or alias.name] = full
                elif full == COMPILED and module == ITS_IMPORTER:
                    continue
                elif _private(alias.name) and _foreign(target, home):
                    found.append(f"{path}:{node.lineno}: imports {alias.name} from {target}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and _foreign(alias.name, home):
                    aliases[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and _private(node.attr)
        ):
            found.append(f"{path}:{node.lineno}: reads {aliases[node.value.id]}.{node.attr}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr", "setattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
        ):
            found.append(f"{path}:{node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
    return found


def _sources() -> list[Path]:
    return sorted([*(SRC / PACKAGE).rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")])


def test_no_module_reads_another_packages_private_names():
    found = [v for path in _sources() for v in violations(path)]
    assert not found, "private names read across packages:\n" + "\n".join(found)


def test_the_check_finds_each_way_of_reaching_in(tmp_path):
    """The checker itself: each form it looks for, in a script outside the package, is found;
    public names and dunders are not."""
    script = tmp_path / "reach.py"
    script.write_text(
        "from xferscope.transfer.copy import _copies, copy_many\n"
        "from xferscope.transfer import copy as many\n"
        "import xferscope.transfer.policy as policy\n"
        "many._routes.clear()\n"
        "policy._facts.clear()\n"
        "policy.__doc__\n"
        "getattr(copy_many, '_handle')\n"
        "getattr(copy_many, '__name__')\n"
    )
    found = violations(script)
    assert sorted(f.split(": ", 1)[1] for f in found) == [
        "getattr(..., '_handle')",
        "imports _copies from xferscope.transfer.copy",
        "reads xferscope.transfer.copy._routes",
        "reads xferscope.transfer.policy._facts",
    ], found
