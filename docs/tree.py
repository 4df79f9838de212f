"""Print (or write into README.md) the repository's file tree: one line per tracked file, described
by the first sentence of its docstring or leading comment.

    .venv/bin/python docs/tree.py            # print the tree
    .venv/bin/python docs/tree.py --write    # replace the ``` block under "## Files" in README.md

Files without a docstring or leading comment (data, config) are described in OTHER below.
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OTHER = {
    ".gitignore": "What git ignores: .venv/, data/ and caches.",
    "README.md": "What the project is, set-up, the command line, the pipeline, and this file tree.",
    "features/embed/mrqa-tiny-clip.json":
        "open_clip configuration of the default encoder (tiny ViT + text tower, 128-d).",
    "prefect.yaml": "The Prefect deployments for `prefect deploy --all` (process work pool, weekly cron).",
    "pyproject.toml": "The package: pinned dependencies, the `mrqa` console script, pytest settings and markers.",
    "sql/migrations.txt": "The order in which the files of sql/schema/ are applied.",
    "tests/etl/roles_real_labels.json": "Hand labels (events, tools, habitats, times, temperatures) of 123 steps of 20 "
                                        "real RecipeQA validation recipes: ids and labels only, no recipe text.",
}
HEADING = "## Files"


def tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [f for f in out.splitlines() if (REPO / f).is_file()]


_END = re.compile(r"(?<!e\.g)(?<!i\.e)(?<!etc)[.!?](\s|$)")


def first_sentence(text: str, at_least: int = 40) -> str:
    """The first sentence of the first paragraph on one line (two when the first is shorter than
    `at_least` characters, e.g. "One row per recipe.")."""
    para = " ".join(text.strip().split("\n\n")[0].split())
    m = _END.search(para)
    if m and m.end() < at_least:
        m = _END.search(para, m.end()) or m
    return para[:m.end()].strip() if m else para


def _comment_block(lines: list[str], marker: str) -> str:
    block = []
    for ln in lines:
        s = ln.strip()
        if s.startswith("#!") or (not block and not s):
            continue
        if not s.startswith(marker):
            break
        block.append(s[len(marker):].strip())
    return "\n".join(block)


def describe(path: str) -> str:
    if path in OTHER:
        return OTHER[path]
    p = REPO / path
    text = p.read_text(errors="replace")
    if p.suffix == ".py":
        try:
            doc = ast.get_docstring(ast.parse(text))
        except SyntaxError:
            doc = None
        if doc:
            return first_sentence(doc)
        return "Package marker." if p.name == "__init__.py" else ""
    if p.suffix == ".sql":
        return first_sentence(_comment_block(text.splitlines(), "--"))
    if p.suffix == ".md":
        m = re.search(r"^# (.+)$", text, re.M)
        return m.group(1).strip() if m else ""
    return first_sentence(_comment_block(text.splitlines(), "#"))


def tree() -> str:
    files = tracked_files()
    width = max(len(f) for f in files) + 2
    return "\n".join(f"{f:<{width}}{describe(f)}".rstrip() for f in files)


def write_readme(readme: Path = REPO / "README.md") -> None:
    text = readme.read_text()
    start = text.index(HEADING)
    a = text.index("```\n", start) + 4
    b = text.index("```", a)
    readme.write_text(text[:a] + tree() + "\n" + text[b:])


if __name__ == "__main__":
    if "--write" in sys.argv[1:]:
        write_readme()
    else:
        print(tree())
