"""The README and the pages under docs/ stay honest: every relative link resolves (a `#anchor` to
a heading that exists), every results file they name is in benchmarks/results/, the README keeps
the two set-up commands CI runs and stays short, and every command has a page the README links
to. Reads files only."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from xferscope.cli.app import COMMANDS

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
RESULTS = ROOT / "benchmarks" / "results"
PAGES = [README, *sorted(DOCS.glob("*.md"))]

INSTALL_AND_RUN = "python3 -m pip install . && xferscope run"
INSTALL_AND_TEST = 'python3 -m pip install ".[test]" && python3 -m pytest'
README_MAX_LINES = 300
FIRST_SCREENS = 80  # lines within which a newcomer finds the set-up commands

LINK = re.compile(r"!?\[([^\]]*)\]\(\s*([^)\s]*)[^)]*\)")
RESULTS_FILE = re.compile(r"[A-Za-z0-9_.-]+-\d{8}[a-z]?\.jsonl?\b")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
EXTERNAL = ("http://", "https://", "mailto:")


def name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def prose_lines(text: str) -> list[str]:
    """The page's lines with fenced code blocks blanked (line numbers kept)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            lines.append("")
        else:
            lines.append("" if fenced else line)
    return lines


def prose(path: Path) -> str:
    """The page's text outside code: fences blanked, inline code spans' contents replaced by
    spaces, so that positions (and line numbers) stay as they are."""
    text = "\n".join(prose_lines(path.read_text()))
    return re.sub(r"`[^`]*`", lambda m: re.sub(r"[^\n]", " ", m.group()), text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text (a link's text, no code marks), lowercase,
    punctuation other than '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def headings(path: Path) -> list[tuple[int, str, int]]:
    """(level, text, line index) of every heading outside code blocks."""
    found = []
    for index, line in enumerate(prose_lines(path.read_text())):
        match = HEADING.match(line)
        if match:
            found.append((len(match.group(1)), match.group(2), index))
    return found


def anchors(path: Path) -> dict[str, int]:
    """Every anchor of a page (GitHub numbers repeated ones: name, name-1, name-2) and the
    index of its heading in `headings`."""
    seen: Counter[str] = Counter()
    found = {}
    for position, (_, text, _) in enumerate(headings(path)):
        base = slug(text)
        found[base if not seen[base] else f"{base}-{seen[base]}"] = position
        seen[base] += 1
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every Markdown link and image outside code."""
    text = prose(path)
    return [(text.count("\n", 0, m.start()) + 1, m.group(2)) for m in LINK.finditer(text)]


def relative_links(path: Path) -> list[tuple[int, Path, str]]:
    """(line number, file, anchor) of every link into the repository."""
    found = []
    for line, target in links(path):
        if not target or target.startswith(EXTERNAL):
            continue
        file, _, anchor = target.partition("#")
        found.append((line, (path.parent / file).resolve() if file else path, anchor))
    return found


def section_headings(path: Path, anchor: str) -> list[str]:
    """The headings of a page's section (the whole page without an anchor): the anchored
    heading and those under it, up to the next of its level or above."""
    every = headings(path)
    if not anchor:
        return [text for _, text, _ in every]
    start = anchors(path)[anchor]
    level = every[start][0]
    section = [every[start][1]]
    for depth, text, _ in every[start + 1 :]:
        if depth <= level:
            break
        section.append(text)
    return section


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_every_relative_link_resolves(page):
    broken = []
    for line, target, anchor in relative_links(page):
        where = f"{name(page)}:{line}"
        if not target.is_relative_to(ROOT):
            broken.append(f"{where}: {target} is outside the repository")
        elif not target.exists():
            broken.append(f"{where}: no such file {target.relative_to(ROOT)}")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            broken.append(f"{where}: {name(target)} has no heading for #{anchor}")
    assert not broken, "broken links:\n" + "\n".join(broken)


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_every_code_fence_is_closed(page):
    """An open fence would hide the rest of the page (and its links) in one code block."""
    opened = None
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if line.lstrip().startswith(("```", "~~~")):
            opened = number if opened is None else None
    assert opened is None, f"{name(page)}:{opened}: a code fence opened here is never closed"


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_every_results_file_named_exists(page):
    missing = [
        f"{name(page)}:{number}: {found} is not in benchmarks/results/"
        for number, line in enumerate(page.read_text().splitlines(), 1)
        for found in RESULTS_FILE.findall(line)
        if not (RESULTS / found).is_file()
    ]
    assert not missing, "results files named but missing:\n" + "\n".join(missing)


def test_the_readme_keeps_the_set_up_commands_in_its_first_screens():
    lines = README.read_text().splitlines()
    fenced_sh, language = [], None
    for number, line in enumerate(lines, 1):
        if line.startswith("```"):
            language = line[3:].strip() if language is None else None
        elif language == "sh":
            fenced_sh.append((number, line.strip()))
    for command in (INSTALL_AND_RUN, INSTALL_AND_TEST):
        at = [number for number, line in fenced_sh if line == command]
        assert at, f"README.md: no ```sh block holds the line `{command}`"
        assert at[0] <= FIRST_SCREENS, (
            f"README.md:{at[0]}: `{command}` is past the first {FIRST_SCREENS} lines"
        )


def test_the_readme_is_short():
    count = len(README.read_text().splitlines())
    assert count < README_MAX_LINES, (
        f"README.md has {count} lines (under {README_MAX_LINES}): move the detail to docs/"
    )


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_readme_links_to_every_commands_page(command):
    """`xferscope --help` lists the commands of COMMANDS; each has a page, or a section of one
    (`compare`, `history` and `report` share one), whose headings name it, linked from the
    README."""
    named = re.compile(rf"`(?:xferscope )?{re.escape(command)}`")
    pages = []
    for _, target, anchor in relative_links(README):
        if target.parent != DOCS or target.suffix != ".md" or not target.exists():
            continue
        if anchor and anchor not in anchors(target):
            continue
        pages.append(f"{name(target)}#{anchor}" if anchor else name(target))
        if any(named.search(text) for text in section_headings(target, anchor)):
            return
    pytest.fail(
        f"README.md links to no page under docs/ with a heading naming `xferscope {command}` "
        f"(it links to: {', '.join(dict.fromkeys(pages)) or 'none'})"
    )


def test_every_file_in_docs_is_reached_from_the_readme():
    """No page or picture under docs/ is left where no link leads to it."""
    reached, queue = {README}, [README]
    while queue:
        for _, target, _ in relative_links(queue.pop()):
            if target.suffix == ".md" and target.exists() and target not in reached:
                queue.append(target)
            reached.add(target)
    orphans = [name(path) for path in sorted(DOCS.iterdir()) if path.resolve() not in reached]
    assert not orphans, "nothing links to (from README.md and the pages it leads to): " + ", ".join(
        orphans
    )


def test_slug_follows_githubs_rule():
    assert slug("Results, and stopping at any moment") == "results-and-stopping-at-any-moment"
    assert slug("OpenGL transfers: `xferscope gl`") == "opengl-transfers-xferscope-gl"
    assert slug("`xferscope.copy_many`") == "xferscopecopy_many"
    assert slug("A [linked](x.md) heading") == "a-linked-heading"


def test_the_layout_map_names_every_subpackage_and_the_readmes_homes_exist():
    """docs/development.md's layout names every package under src/xferscope/, and each home the
    README gives for new code (a trace finding, a framework integration, a file loader) is a
    package of the tree."""
    text = (DOCS / "development.md").read_text()
    start = text.index("## Layout")
    layout = text[start : text.index("\n## ", start + 1)]
    src = README.parent / "src" / "xferscope"
    for package in sorted(p.parent for p in src.rglob("__init__.py")):
        if package == src:
            continue
        assert f"{package.name}/" in layout, (
            f"docs/development.md's layout names no {package.relative_to(src)}/"
        )
    homes = re.findall(r"`(src/xferscope/[\w/]+/)`", README.read_text())
    assert len(homes) >= 3, f"the README names {len(homes)} homes for new code: {homes}"
    for home in homes:
        assert (README.parent / home / "__init__.py").exists(), f"README's {home} is no package"
