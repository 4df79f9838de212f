"""The documentation stays true to the repository: every path docs/architecture.md's "Where is X"
table and the README's file tree name exists, every tracked file has its line in the README tree,
every warehouse table is described in docs/data-model.md, and no file outside tests/ points to notes
a reader of the repository does not have."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# The references that must not appear outside tests/ (the same pattern as the grep in the review list).
OUTSIDE_NOTES = re.compile(r"shared/DESIGN|STACK_NOTES|DESIGN\.md|issue [0-9]|contract C[0-9]|helper [A-Z]\b")
SEARCHED_SUFFIXES = (".py", ".md", ".sql", ".toml", ".yaml")


def git_files(*extra: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", *extra], cwd=REPO, capture_output=True, text=True, check=True)
    return [f for f in out.stdout.splitlines() if (REPO / f).is_file()]


def section(text: str, heading: str) -> str:
    """The text of a Markdown section, up to the next heading of the same or a higher level."""
    level = len(heading) - len(heading.lstrip("#"))
    start = text.index(heading + "\n")
    nxt = re.compile(rf"^#{{1,{level}}} ", re.M).search(text, start + len(heading))
    return text[start:nxt.start() if nxt else len(text)]


def where_is_paths() -> list[str]:
    table = section((REPO / "docs" / "architecture.md").read_text(), "## Where is X")
    paths = []
    for row in table.splitlines():
        cells = row.split("|")
        if len(cells) < 4 or set(cells[2].strip()) <= {"-", " "} or cells[2].strip() == "where":
            continue
        paths += re.findall(r"`([^`]+)`", cells[2])
    return paths


def readme_tree() -> list[str]:
    block = section((REPO / "README.md").read_text(), "## Files")
    body = block.split("```\n", 1)[1].split("```", 1)[0]
    return [ln.split()[0] for ln in body.splitlines() if ln.strip()]


def test_where_is_x_paths_exist():
    paths = where_is_paths()
    assert len(paths) > 40
    missing = [p for p in paths if not (REPO / p).exists()]
    assert missing == [], f"docs/architecture.md names paths that do not exist: {missing}"


def test_readme_tree_names_existing_files_once():
    tree = readme_tree()
    assert len(tree) == len(set(tree)), "a file has two lines in the README tree"
    missing = [p for p in tree if not (REPO / p).is_file()]
    assert missing == [], (f"README tree names files that do not exist: {missing}; "
                           "regenerate it with `.venv/bin/python docs/tree.py --write`")


def test_every_tracked_file_is_in_the_readme_tree():
    absent = sorted(set(git_files()) - set(readme_tree()))
    assert absent == [], (f"tracked files missing from the README tree: {absent}; "
                          "regenerate it with `.venv/bin/python docs/tree.py --write`")


def test_every_warehouse_table_is_in_the_data_model(con):
    doc = (REPO / "docs" / "data-model.md").read_text()
    names = [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() UNION ALL "
                                       "SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()]
    assert len(names) >= 19
    assert [n for n in names if f"### `{n}`" not in doc] == []


@pytest.mark.parametrize("line,bad", [("see DESIGN.md §7", True), ("fixed in issue 7", True),
                                      ("(contract C3)", True), ("helper F does it", True),
                                      ("docs/knobs.md", False), ("the issue: 7 rows", False)])
def test_the_outside_notes_pattern(line, bad):
    assert bool(OUTSIDE_NOTES.search(line)) is bad


def test_no_file_outside_tests_points_to_outside_notes():
    files = git_files("--cached", "--others", "--exclude-standard")
    searched = [f for f in files if not f.startswith(("tests/", ".venv/"))
                and (f.endswith(SEARCHED_SUFFIXES) or Path(f).name == "Makefile")]
    assert "README.md" in searched and "features/datasets/knobs.py" in searched
    hits = [f"{f}:{n}: {ln.strip()}" for f in searched
            for n, ln in enumerate((REPO / f).read_text(errors="replace").splitlines(), 1)
            if OUTSIDE_NOTES.search(ln)]
    assert hits == [], "say it in the project's own words (docs/...):\n" + "\n".join(hits)
