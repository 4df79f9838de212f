"""Module structure of the project: no import cycles among its modules (imports inside functions
count too), the production pipeline knows nothing of the demo, no stage is called by a string, and every
third-party module the code imports comes from a dependency pyproject.toml declares."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("etl", "features", "flows", "training")


def project_modules() -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of the project's packages."""
    mods = {}
    for pkg in PACKAGES:
        for f in sorted((REPO / pkg).rglob("*.py")):
            parts = list(f.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join(parts)] = f
    return mods


def imported_modules(name: str, file: Path, mods: dict[str, Path]) -> set[str]:
    """The project modules `name` imports anywhere in its file (top level or inside functions)."""
    def resolve(dotted: str) -> str | None:
        while dotted and dotted not in mods:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    package = name if file.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str | None] = set()
    for node in ast.walk(ast.parse(file.read_text(), str(file))):
        if isinstance(node, ast.Import):
            found |= {resolve(a.name) for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{base}" if base else anchor
            # `from pkg import module` imports that module; `from module import name` the module
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in mods else resolve(base) for a in node.names}
    return {m for m in found if m and m != name}


def import_graph() -> dict[str, set[str]]:
    mods = project_modules()
    return {name: imported_modules(name, f, mods) for name, f in mods.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_cycle_finder_finds_a_cycle_and_accepts_a_tree():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_no_import_cycle_among_the_project_modules():
    graph = import_graph()
    assert "flows.pipeline" in graph and "training.train" in graph
    assert cycles(graph) == []


def test_the_pipeline_does_not_import_the_demo():
    graph = import_graph()
    assert "flows.demo" not in graph["flows.pipeline"]
    assert "flows.pipeline" in graph["flows.demo"]          # the demo is a caller of the pipeline


def test_no_string_based_dispatch_in_flows():
    """Stages and helpers are called through imports a reader can follow, never importlib."""
    for f in sorted((REPO / "flows").rglob("*.py")):
        text = f.read_text()
        text = text.replace("importlib.metadata", "")      # reading the package version is no dispatch
        assert "importlib" not in text and "__import__" not in text, f


def third_party_imports() -> dict[str, set[str]]:
    """Top-level module -> the project files importing it, for every absolute import of the project's
    packages that is neither the standard library nor the project itself."""
    import sys
    own = set(PACKAGES)
    found: dict[str, set[str]] = {}
    for name, f in project_modules().items():
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            tops = []
            if isinstance(node, ast.Import):
                tops = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                tops = [node.module.split(".")[0]]
            for t in tops:
                if t not in own and t not in sys.stdlib_module_names and t != "__future__":
                    found.setdefault(t, set()).add(name)
    return found


def declared_distributions() -> set[str]:
    """The normalised names of pyproject.toml's dependencies (the runtime list, not the dev extra)."""
    import re
    import tomllib
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    return {re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9_.-]+", d)[0]).lower() for d in deps}


def test_every_third_party_import_is_a_declared_dependency():
    """A module the code imports must come from a distribution pyproject.toml names, not from whatever
    another dependency happens to pull in (scipy came with scikit-learn, unnamed, until it was declared)."""
    import re
    from importlib.metadata import packages_distributions
    dists = packages_distributions()
    declared = declared_distributions()
    undeclared = {}
    for top, users in sorted(third_party_imports().items()):
        names = {re.sub(r"[-_.]+", "-", d).lower() for d in dists.get(top, [])}
        assert names, f"{top} (imported by {sorted(users)[0]}) is not installed: declare it in pyproject.toml"
        if not names & declared:
            undeclared[top] = sorted(users)[:3]
    assert not undeclared, f"imported but not declared in pyproject.toml's dependencies: {undeclared}"
    assert "scipy" in declared


def test_the_library_never_leaves_a_duckdb_result_unfinished():
    """DuckDB 2.0 keeps a result read with `fetchone()` open, and the connection then refuses `register`
    (ResourceInUseException) until it is read to the end: a warehouse helper that peeks one row would break
    its caller's next Arrow load. So the packages read results whole (`fetchall()`), never with fetchone."""
    import duckdb
    import pyarrow as pa
    con = duckdb.connect()
    con.execute("SELECT 1").fetchone()
    try:                                       # the behaviour this guards against, as the installed DuckDB has it
        con.register("t", pa.table({"a": [1]}))
        refuses = False
    except duckdb.Error:
        refuses = True
    con.execute("SELECT 1").fetchall()
    con.register("t", pa.table({"a": [1]}))      # read whole: the connection is free
    offenders = [f"{f.relative_to(REPO)}:{n}" for f in project_modules().values()
                 for n, line in enumerate(f.read_text().splitlines(), 1) if ".fetchone()" in line]
    assert offenders == [], (offenders, "DuckDB refuses register after fetchone" if refuses else "")
