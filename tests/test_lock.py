"""The constraints file `make venv` installs with (.ci/constraints.txt): every dependency pyproject.toml names,
the dev extra's too, is pinned there to one exact version that its specifier allows, and the file pins nothing
twice and never the project itself. Where the environment was made from it (CI, a fresh `make venv`), every
pinned package is installed at its pin."""
from __future__ import annotations

import os
import re
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parent.parent
LOCK = REPO / ".ci" / "constraints.txt"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins() -> dict[str, str]:
    """Normalised name -> pinned version, every line `name==version` (comments and blanks aside)."""
    out: dict[str, str] = {}
    for n, line in enumerate(LOCK.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
        assert m, f"{LOCK.name}:{n}: not an exact pin: {line!r}"
        name = _norm(m[1])
        assert name not in out, f"{LOCK.name}:{n}: {name} pinned twice"
        out[name] = m[2]
    return out


def requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = [*project["dependencies"], *(d for ds in project.get("optional-dependencies", {}).values() for d in ds)]
    return [Requirement(r) for r in reqs]


def test_every_dependency_is_pinned_to_a_version_its_specifier_allows():
    p = pins()
    assert _norm("meta-recipeqa") not in p, "the project itself is pinned: make lock leaves it out"
    missing, refused = [], []
    for r in requirements():
        if r.marker is not None and not r.marker.evaluate():
            continue
        name = _norm(r.name)
        if name not in p:
            missing.append(name)
        elif not r.specifier.contains(Version(p[name]), prereleases=True):
            refused.append(f"{name}=={p[name]} (pyproject.toml: {r.specifier})")
    assert not missing, f"not pinned in .ci/constraints.txt (run make lock): {missing}"
    assert not refused, f"pins pyproject.toml does not allow: {refused}"


def test_the_pins_parse_and_the_file_says_how_it_is_made():
    text = LOCK.read_text()
    assert text.startswith("# ") and "make lock" in text.splitlines()[1]
    assert len(pins()) >= len({_norm(r.name) for r in requirements()})
    assert pins()["torch"] == "2.14.1" and pins()["duckdb"] == "2.0.0"   # the pins pyproject.toml holds itself


def test_the_environment_is_the_pinned_one():
    """Every pinned package that is installed has its pinned version; `make venv` made this environment from the
    file. An environment resolved afresh (`make venv CONSTRAINTS=`) may differ, so outside CI a difference skips
    with the list; in CI (CI=true, a fresh clone) it fails."""
    off = []
    for name, pinned in sorted(pins().items()):
        try:
            have = version(name)
        except PackageNotFoundError:
            continue                              # a pin of another platform's package (e.g. CUDA libraries)
        if Version(have) != Version(pinned) and Version(have).public != Version(pinned).public:
            off.append(f"{name} {have} (pinned {pinned})")
    if off and os.environ.get("CI", "").lower() not in ("true", "1"):
        pytest.skip(f"this environment was not made from .ci/constraints.txt: {off[:5]}")
    assert not off, f"installed versions differ from .ci/constraints.txt: {off}"
