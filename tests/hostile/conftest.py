"""Helpers for the hostile-input tests: run the real `mrqa` command in a scratch MRQA_HOME, and
fingerprint a warehouse so a test can assert that a refused input changed nothing.

Fixtures (usable from any file in tests/hostile/):
- `run_mrqa(*args, home=..., timeout=...)` -> MrqaResult(rc, stdout, stderr)
- `warehouse_fingerprint(home)` -> {"sha256": file hash, "tables": {table: content hash}}
- `recipeqa_doc(recipe_id, n_steps, images_per_step)` -> a valid RecipeQA document (four records,
  one per task) about a made-up recipe, for importer and query tests that need no fixtures
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

MRQA = Path(sys.executable).with_name("mrqa")


@dataclass
class MrqaResult:
    rc: int
    stdout: str
    stderr: str

    @property
    def error_lines(self) -> list[str]:
        """The lines of stderr that start with 'error:' (what the CLI's fail helper prints)."""
        return [ln for ln in self.stderr.splitlines() if ln.startswith("error:")]

    def assert_refused(self) -> str:
        """rc 2, exactly one 'error:' line, no traceback; returns the error line."""
        assert self.rc == 2, f"rc {self.rc}\nstdout: {self.stdout[-2000:]}\nstderr: {self.stderr[-2000:]}"
        assert "Traceback" not in self.stderr, self.stderr[-3000:]
        assert len(self.error_lines) == 1, self.stderr[-2000:]
        return self.error_lines[0]


def mrqa(*args: str, home: Path, timeout: float = 300, input: str | None = None) -> MrqaResult:
    """Run `mrqa ARGS` as a subprocess with MRQA_HOME=home (no shell; the arguments go through
    untouched)."""
    env = {**os.environ, "MRQA_HOME": str(home), "NO_COLOR": "1", "COLUMNS": "200"}
    p = subprocess.run([str(MRQA), *map(str, args)], env=env, capture_output=True, text=True, check=False,
                       timeout=timeout, input=input)
    return MrqaResult(p.returncode, p.stdout, p.stderr)


def fingerprint(home: Path) -> dict:
    """sha256 of the warehouse file plus a content hash of every table (opened read-only)."""
    import duckdb

    from etl.config import Paths
    from etl.warehouse import table_fingerprint
    db = Paths(Path(home)).warehouse
    out = {"sha256": hashlib.sha256(db.read_bytes()).hexdigest(), "tables": {}}
    con = duckdb.connect(str(db), read_only=True)
    try:
        names = [t for (t,) in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE' "
            "ORDER BY table_name").fetchall()]
        out["tables"] = {t: table_fingerprint(con, t) for t in names}
    finally:
        con.close()
    return out


@pytest.fixture(scope="session")
def run_mrqa():
    return mrqa


@pytest.fixture(scope="session")
def warehouse_fingerprint():
    return fingerprint


def make_recipeqa_doc(recipe_id: str = "toy-soup", n_steps: int = 4, images_per_step: int = 2,
                      split: str = "val") -> dict:
    """A valid RecipeQA `{"data": [...]}`: one record per task about one made-up recipe."""
    steps = range(1, n_steps + 1)
    img = [[f"{recipe_id}_{s}_{k}.jpg" for k in range(images_per_step)] for s in steps]
    body = {s: f"Step {s}: stir the pot for {s} minutes." for s in steps}
    visual_ctx = [{"id": s, "body": body[s], "title": f"Stir {s}", "videos": []} for s in steps]
    textual_ctx = [{"id": s, "body": body[s], "images": img[s - 1], "videos": []} for s in steps]
    first = [i[0] for i in img]
    common = {"recipe_id": recipe_id, "split": split}
    return {"data": [
        {**common, "task": "textual_cloze", "qid": f"1000-{recipe_id}-0-1-2", "context": textual_ctx,
         "question": ["@placeholder", "Stir 2", "Stir 3"], "choice_list": ["Stir 1", "Bake", "Fry"],
         "answer": 0},
        {**common, "task": "visual_cloze", "qid": f"2000-{recipe_id}-0-1-2", "context": visual_ctx,
         "question": [first[0], "@placeholder", first[2]], "choice_list": first[1:3] + first[:1],
         "answer": 0},
        {**common, "task": "visual_coherence", "qid": f"3000-{recipe_id}-0-1-2",
         "context": visual_ctx, "question": first[:3], "choice_list": first[:3], "answer": 1},
        {**common, "task": "visual_ordering", "qid": f"4000-{recipe_id}-0-1-2", "context": visual_ctx,
         "question": ["Choose the correct order"], "choice_list": [first, first[::-1]],
         "answer": 0},
    ]}


@pytest.fixture(scope="session")
def recipeqa_doc():
    return make_recipeqa_doc
