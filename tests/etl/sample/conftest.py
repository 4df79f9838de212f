"""One small sample kitchen build shared by the sample tests (a few seconds)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

# This folder is named like the package it tests (tests/etl/sample mirrors etl/sample). Without
# __init__.py files, pytest's rootdir-relative sys.path makes `tests/etl` a namespace package `etl`
# that shadows the real one for `etl.sample`. Put the repository first and repair an `etl`
# namespace module imported earlier in the session (the real fix: pytest `pythonpath = ["."]`).
REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
_etl = sys.modules.get("etl")
if _etl is not None and getattr(_etl, "__file__", None) is None:
    _etl.__path__.append(str(REPO / "etl"))
    if getattr(sys.modules.get("etl.sample"), "__file__", "x") is None:
        del sys.modules["etl.sample"]

N_RECIPES, SEED = 40, 11


@pytest.fixture(scope="session")
def sample_build(tmp_path_factory):
    from etl.sample.generate import build_sample
    out = tmp_path_factory.mktemp("sample_kitchen")
    summary = build_sample(out, N_RECIPES, SEED, workers=2, progress=False)
    gt = [json.loads(line) for line in (out / "ground_truth.jsonl").read_text(encoding="utf-8").splitlines()]
    return out, summary, gt
