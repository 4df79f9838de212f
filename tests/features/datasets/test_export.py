"""The exports as their users read them: the Parquet export loaded with Hugging Face `datasets` (a config
per dataset, named by task x setting, three splits), polars, DuckDB and pandas, with typed columns and the
dataset card; the RecipeQA JSON scored by a re-implementation of RecipeQA's evaluate.py and re-imported by `mrqa ingest
recipeqa` (the strict importer). One synthetic world with real image files per module."""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import duckdb
import numpy as np
import pytest
from synthetic_home import synthetic_home

from features.datasets.export import export_parquet, export_recipeqa_json, record_images, tree_sha256
from features.datasets.generate import generate_datasets
from features.datasets.knobs import AF_DEFAULT_ROUNDS, KnobParams

ENC = "synthetic-enc-0001"
SETTINGS = [("visual_cloze", KnobParams.preset_for("visual_cloze", 0, 1, 1)),
            ("visual_cloze", KnobParams.preset_for("visual_cloze", 0, 1, 1, k3_mode="balanced")),
            ("visual_cloze", replace(KnobParams.preset_for("visual_cloze", 0, 1, 1), af_rounds=AF_DEFAULT_ROUNDS)),
            ("visual_cloze", KnobParams.recipeqa_preset()),
            ("visual_coherence", KnobParams.preset_for("visual_coherence", 0, 1, 0)),
            ("visual_ordering", KnobParams.preset_for("visual_ordering", 0, 1, 0)),
            ("textual_cloze", KnobParams.preset_for("textual_cloze", 0, 1, 0))]
HF_SPLIT = {"train": "train", "val": "validation", "test": "test"}


def _jpeg(seed: int) -> bytes:
    from PIL import Image
    rgb = tuple(int(v) for v in np.random.default_rng(seed).integers(0, 255, 3))
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), rgb).save(buf, "JPEG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with synthetic_home(tmp_path_factory, "export_home", n_recipes=90, seed=1, dim=24, k=100) as (home, paths, con):
        for i, (path,) in enumerate(con.execute("SELECT path FROM images WHERE status = 'ok' ORDER BY image_id")
                                    .fetchall()):
            f = home / path
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(_jpeg(i))
        summaries = generate_datasets(con, SETTINGS, seed=0, encoder_id=ENC, lance_uri=paths.lance, progress=False)
        ids = {(s["task"], s["knobs"]): s["dataset_id"] for s in summaries}
        expected = Counter()
        for task, setting, split, n in con.execute(
                "SELECT q.task, d.setting, q.split, count(*) FROM questions q JOIN datasets d USING (dataset_id) "
                "GROUP BY ALL").fetchall():
            expected[(task, setting, split)] = n
        yield {"con": con, "paths": paths, "home": home, "ids": ids, "expected": expected}


@pytest.fixture(scope="module")
def export(world, tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "meta-recipeqa"
    res = export_parquet(world["con"], sorted(world["ids"].values()), out, with_vectors=True,
                         lance_uri=world["paths"].lance, with_images=True, home=world["home"])
    return {"out": out, "res": res}


# ----------------------------------------------------------------------------- Parquet: one-line loads

def test_settings_cover_the_cases(world):
    """The world gives what the load test needs: a config with all three splits, a preset, an AF set."""
    exp = world["expected"]
    assert all(exp[("visual_cloze", "0-1-1", s)] > 0 for s in ("train", "val", "test"))
    assert {s for _, s, _ in exp} >= {"0-1-1", "0-1-1-balanced", "0-1-1-af", "recipeqa", "0-1-0"}


def test_hf_datasets_loads_a_config_as_three_typed_splits(world, export):
    import datasets
    out, exp = export["out"], world["expected"]
    names = datasets.get_dataset_config_names(str(out))
    configs = sorted({f"{t}-{s}" for t, s, _ in exp})
    assert sorted(n for n in names if "-" in n) == configs
    assert export["res"]["configs"] == len(configs)
    ds = datasets.load_dataset(str(out), "visual_cloze-0-1-1")
    assert set(ds) == {"train", "validation", "test"}
    for split, hf in HF_SPLIT.items():
        assert ds[hf].num_rows == exp[("visual_cloze", "0-1-1", split)]
        assert set(ds[hf]["split"]) == {split} and set(ds[hf]["knobs"]) == {"0-1-1"}
    f = ds["train"].features
    assert {c: f[c].dtype for c in ("k1", "k2", "k3", "adversarial", "answer", "task", "k3_mode")} == {
        "k1": "int8", "k2": "int8", "k3": "int8", "adversarial": "bool", "answer": "int32", "task": "string",
        "k3_mode": "string"}
    row = ds["test"][0]
    assert (row["k1"], row["k2"], row["k3"], row["k3_mode"], row["adversarial"]) == (0, 1, 1, "coin", False)
    af = datasets.load_dataset(str(out), "visual_cloze-0-1-1-af")
    assert set(af["train"]["adversarial"]) == {True} and "-af-" in af["train"][0]["dataset_id"]
    bal = datasets.load_dataset(str(out), "visual_cloze-0-1-1-balanced")
    assert set(bal["train"]["k3_mode"]) == {"balanced"}
    pre = datasets.load_dataset(str(out), "visual_cloze-recipeqa")
    assert {(r["k1"], r["k2"], r["k3"], r["preset"]) for r in pre["train"]} == {(None, None, None, "recipeqa")}
    order = datasets.load_dataset(str(out), "visual_ordering-0-1-0")["train"]
    assert str(order.features["choice_orderings"]) == "List(List(Value('string')))"
    for r in order:
        assert r["choice_orderings"] == [json.loads(c) for c in r["choice_list"]]
        assert all(len(o) == 4 for o in r["choice_orderings"])
    ab = datasets.load_dataset(str(out), "context_ablation")["train"]     # the context ablation's other recipes
    assert ab.num_rows == export["res"]["questions"] and ab.column_names == [
        "dataset_id", "split", "qid", "recipe_id", "context_recipe_id"]


def test_polars_duckdb_and_pandas_read_the_hive_tree(world, export):
    import pandas as pd
    import polars as pl
    out, exp = export["out"], world["expected"]
    glob = (out / "questions" / "**" / "*.parquet").as_posix()
    q = pl.read_parquet(glob, hive_partitioning=True)
    assert q.height == sum(exp.values()) == export["res"]["questions"]
    assert {c: q.schema[c] for c in ("k1", "k2", "k3", "adversarial", "answer")} == {
        "k1": pl.Int8, "k2": pl.Int8, "k3": pl.Int8, "adversarial": pl.Boolean, "answer": pl.Int32}
    assert q.schema["choice_orderings"] == pl.List(pl.List(pl.String))
    got = {(r["task"], r["knobs"], r["split"]): r["len"]
           for r in q.group_by("task", "knobs", "split").len().iter_rows(named=True)}
    assert got == dict(exp)
    assert q.filter(pl.col("knobs") == "recipeqa")["k1"].null_count() == q.filter(pl.col("knobs") == "recipeqa").height

    con = duckdb.connect()
    rel = f"read_parquet('{glob}', hive_partitioning = false)"     # as the card says
    types = dict(con.execute(f"SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM {rel})").fetchall())
    assert (types["k1"], types["adversarial"], types["choice_orderings"], types["task"]) == (
        "TINYINT", "BOOLEAN", "VARCHAR[][]", "VARCHAR")
    got = {(t, k, s): n for t, k, s, n in con.execute(f"SELECT task, knobs, split, count(*) FROM {rel} GROUP BY ALL")
           .fetchall()}
    assert got == dict(exp)
    # the values inside a file agree with its folder (DuckDB's hive columns vs the file's own)
    files = con.execute(f"SELECT DISTINCT filename, task, knobs, split FROM read_parquet('{glob}', filename = true, "
                        "hive_partitioning = false)").fetchall()
    assert all(f"task={t}/knobs={k}/split={s}/" in f for f, t, k, s in files) and len(files) == len(exp)

    df = pd.read_parquet(out / "questions")
    assert len(df) == sum(exp.values())
    assert [str(df[c].dtype) for c in ("k1", "k2", "k3")] == ["Int8"] * 3     # never float64
    assert df.loc[df["knobs"] == "recipeqa", "k1"].isna().all()
    one = pd.read_parquet(next((out / "questions").rglob("*.parquet")))
    assert str(one["k1"].dtype) == "Int8" and {"task", "knobs", "split"} <= set(one.columns)


def test_side_tables_images_and_vectors(world, export):
    import datasets
    from PIL import Image
    out, con = export["out"], world["con"]
    n_ok = con.execute("SELECT count(*) FROM images i JOIN recipes r USING (recipe_id) WHERE i.status = 'ok' "
                       "AND r.status = 'ok'").fetchall()[0][0]
    assert export["res"]["images"] == n_ok and export["res"]["images_missing"] == 0
    imgs = datasets.load_dataset(str(out), "images")["train"]
    assert imgs.num_rows == n_ok and type(imgs.features["image"]).__name__ == "Image"
    first = imgs[0]
    assert isinstance(first["image"], Image.Image) and first["image"].size == (8, 8)
    v = duckdb.connect()
    for name, extra in (("image_vectors", "image_id"), ("text_vectors", "field")):
        cols = dict(v.execute(f"SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM "
                              f"'{out / name}.parquet')").fetchall())
        assert cols["item_id"] == "VARCHAR" and cols["step_idx"] == "INTEGER" and extra in cols
    assert v.execute(f"SELECT count(*) FROM '{out}/image_vectors.parquet' WHERE item_id <> image_id"
                     ).fetchall() == [(0,)]
    # the step-text vectors of both fields, as the feature store holds them for the exported splits
    from features.vectors.store import FeatureStore
    store = FeatureStore(world["paths"].lance)
    splits = {s for (s,) in v.execute(f"SELECT DISTINCT split FROM '{out}/recipes.parquet'").fetchall()}
    for field in ("title", "body"):
        rows = v.execute(f"SELECT item_id, vector FROM '{out}/text_vectors.parquet' WHERE field = ? "
                         "ORDER BY item_id", [field]).fetchall()
        ids, mat = store.text_vectors(ENC, field)
        split_of = dict(v.execute(f"SELECT recipe_id, split FROM '{out}/recipes.parquet'").fetchall())
        want = {i: m for i, m in zip(ids, np.asarray(mat, np.float32)) if split_of.get(i.rsplit("_", 2)[0]) in splits}
        assert rows and [i for i, _ in rows] == sorted(want) and all(i.endswith(f"_{field}") for i, _ in rows)
        assert all(np.array_equal(np.asarray(vec, np.float32), want[i]) for i, vec in rows)


def test_card_documents_every_config_and_provenance_key(world, export):
    import yaml

    from features.datasets.card import PROVENANCE_KEYS, QUESTION_COLUMNS
    text = (export["out"] / "README.md").read_text()
    front = yaml.safe_load(text.split("---\n")[1])
    cfg = {c["config_name"]: {d["split"]: d["path"] for d in c["data_files"]} for c in front["configs"]}
    for task, setting, split in world["expected"]:
        path = cfg[f"{task}-{setting}"][HF_SPLIT[split]]
        assert path == f"questions/task={task}/knobs={setting}/split={split}/data_0.parquet"
        assert (export["out"] / path).is_file()
    assert "(undocumented)" not in text
    keys = {k for (k,) in world["con"].execute("SELECT DISTINCT unnest(json_keys(provenance)) FROM questions")
            .fetchall()}
    assert keys <= set(PROVENANCE_KEYS)
    import pyarrow.parquet as pq
    names = pq.read_schema(next((export["out"] / "questions").rglob("*.parquet"))).names
    assert names == [c for c, _, _ in QUESTION_COLUMNS]
    vc011 = world["ids"][("visual_cloze", "0-1-1")]
    line = next(ln for ln in text.splitlines() if f"| {vc011} |" in ln)
    exp = world["expected"]
    assert [int(x.replace(",", "")) for x in line.split("|")[3:6]] == [exp[("visual_cloze", "0-1-1", s)]
                                                                      for s in ("train", "val", "test")]
    header = next(ln for ln in text.splitlines() if ln.startswith("| config | dataset_id |"))
    assert "| centre of the choices |" in header and len(header.split("|")) == len(line.split("|"))


def test_each_config_holds_one_dataset_when_a_setting_has_several(world, tmp_path):
    """Another seed and a `-p` dataset (other parameters) of visual cloze 0-1-1 beside the plain one: each gets
    a config of its own holding its questions only, the plain seed-0 one under the setting's name (adding a
    twin renames nothing), the others named by the rest of their id, and the card lists all three; an
    export of one of them keeps the setting's name, and so does the lower seed of two plain ones."""
    import datasets
    import yaml

    from features.datasets.knobs import setting_of
    from training.data import list_datasets
    con, lance, plain = world["con"], world["paths"].lance, world["ids"][("visual_cloze", "0-1-1")]
    st = ("visual_cloze", KnobParams.preset_for("visual_cloze", 0, 1, 1))
    made = [generate_datasets(con, [st], seed=1, encoder_id=ENC, lance_uri=lance, progress=False)[0],
            generate_datasets(con, [(st[0], replace(st[1], k=60))], seed=0, encoder_id=ENC, lance_uri=lance,
                              progress=False)[0]]
    extra = [m["dataset_id"] for m in made]
    try:
        assert extra[0].endswith(extra[0].split("-0-1-1-", 1)[1]) and "-p" in extra[1]
        ids = [plain, *extra]
        res = export_parquet(con, ids, tmp_path / "three")
        names = {d["dataset_id"]: d["knobs"] for d in list_datasets(tmp_path / "three")}
        assert names == {plain: "0-1-1", **{did: "0-1-1-" + did.split("-0-1-1-", 1)[1] for did in extra}}
        assert len(set(names.values())) == 3 and res["configs"] == 3
        assert {setting_of(k) for k in names.values()} == {"0-1-1"}
        from training.score import load_split  # `mrqa score` says the setting, as the warehouse
        assert {load_split(did, "train", tmp_path / "three").setting for did in ids} == {"0-1-1"}
        card = (tmp_path / "three" / "README.md").read_text()
        front = yaml.safe_load(card.split("---\n")[1])
        assert sorted(c["config_name"] for c in front["configs"] if c["config_name"].startswith("visual")) == \
            sorted(f"visual_cloze-{k}" for k in names.values())
        for did, knobs in names.items():
            assert any(ln.startswith(f"| visual_cloze-{knobs} | {did} |") for ln in card.splitlines()), did
            ds = datasets.load_dataset(str(tmp_path / "three"), f"visual_cloze-{knobs}")
            assert {r for s in ds for r in ds[s]["dataset_id"]} == {did}
            assert sum(ds[s].num_rows for s in ds) == _n_questions(con, did)
        one = export_parquet(con, [extra[1]], tmp_path / "one")
        assert [d["knobs"] for d in list_datasets(tmp_path / "one")] == ["0-1-1"] and one["configs"] == 1
        export_parquet(con, extra, tmp_path / "twins")          # seed 1 (plain) and a -p of seed 0
        assert {d["dataset_id"]: d["knobs"] for d in list_datasets(tmp_path / "twins")} == {
            extra[0]: "0-1-1", extra[1]: "0-1-1-" + extra[1].split("-0-1-1-", 1)[1]}
        # DuckDB's own hive reading (duckdb 2.0) took a lone knobs=0-1-1 for a date: the card reads the files' columns
        glob = (tmp_path / "one" / "questions" / "**" / "*.parquet").as_posix()
        line = next(ln for ln in card.splitlines() if ln.startswith("duckdb.sql("))
        assert "hive_partitioning = false" in line
        assert duckdb.sql(f"SELECT DISTINCT knobs FROM read_parquet('{glob}', hive_partitioning = false)"
                          ).fetchall() == [("0-1-1",)]
    finally:
        for t in ("questions", "generation_skips", "datasets"):
            con.execute(f"DELETE FROM {t} WHERE list_contains(?, dataset_id)", [extra])


def test_current_export_writes_only_what_changed(world, tmp_path):
    """`current_export` (the pipeline's sweep export) writes an export once, leaves it while it holds the
    datasets as the warehouse has them, and writes it again when it holds an older generation of one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from features.datasets.export import current_export
    con, ids, out = world["con"], sorted(world["ids"].values()), tmp_path / "all"
    assert current_export(con, ids, out) is True and current_export(con, ids, out) is False
    first = tree_sha256(out)
    f = sorted((out / "questions").rglob("*.parquet"))[0]
    t = pq.read_table(f)
    pq.write_table(t.set_column(t.schema.get_field_index("answer"), "answer",
                                pa.array([(a + 1) % 4 for a in t["answer"].to_pylist()], pa.int32())), f)
    assert current_export(con, ids, out) is True and tree_sha256(out) == first
    assert current_export(con, ids[:2], out) is True and current_export(con, ids[:2], out) is False


def test_read_before_use_lists_the_configs_past_a_bound():
    """A config is listed once, with its worst figure over its datasets; the bounds are strict (35% answered
    without reading, 40% kept)."""
    from features.datasets.card import reading_caveats
    text = "\n".join(reading_caveats(
        [("a", {"qo_acc": 0.30, "pair_rule_acc": 0.60}), ("a", {"qo_acc": 0.70}), ("b", {"qo_acc": 0.30,
         "hasty_student_acc": None}), ("c", {"probe_acc": 0.35})],
        [("b-af", 0.39), ("b-af", 0.20), ("d-af", 0.40)]))
    rows = [ln for ln in text.splitlines() if ln.startswith("| ") and "---" not in ln]
    assert rows == ["| config | highest context-free figure | accuracy |", "| a | question-only probe | 70.0% |",
                    "| config | kept of the knob questions |", "| b-af | 20.0% |"]
    assert text.startswith("## Read before use") and "## Small adversarial configs" in text
    only_small = "\n".join(reading_caveats([("x", {"qo_acc": 0.2})], [("x-af", 0.1)]))
    assert only_small.startswith("## Read before use") and "| x-af | 10.0% |" in only_small
    assert reading_caveats([("x", {"qo_acc": 0.25, "pair_rule_acc": 0.35})], [("x-af", 0.5)]) == []


def test_export_is_byte_identical(world, export, tmp_path):
    again = export_parquet(world["con"], sorted(world["ids"].values()), tmp_path / "again", with_vectors=True,
                           lance_uri=world["paths"].lance, with_images=True, home=world["home"])
    assert again["sha256"] == export["res"]["sha256"] == tree_sha256(export["out"])


def test_an_export_replaces_an_earlier_export_and_nothing_else(world, tmp_path, monkeypatch):
    con, did = world["con"], world["ids"][("visual_cloze", "0-1-1")]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("important")
    with pytest.raises(ValueError, match=r"refusing to replace .*mine: it holds more than an export \(keep.txt\)"):
        export_parquet(con, [did], mine)
    with pytest.raises(ValueError, match=r"more than a RecipeQA export \(keep.txt\)"):
        export_recipeqa_json(con, [did], mine, home=world["home"], with_images=False)
    with pytest.raises(ValueError, match="keep.txt"):                        # the same through a URI
        export_parquet(con, [did], f"file://{mine.as_posix()}")
    assert [p.name for p in mine.iterdir()] == ["keep.txt"] and (mine / "keep.txt").read_text() == "important"
    out = tmp_path / "exp"
    first = export_parquet(con, [did], out)
    (out / "questions" / "stale.txt").write_text("left by hand inside the export's own tree")
    again = export_parquet(con, [did], out)                                 # an earlier export: replaced
    assert not (out / "questions" / "stale.txt").exists() and again["sha256"] == first["sha256"]
    monkeypatch.chdir(tmp_path)                                             # never the working directory
    for bad in ("", "."):
        with pytest.raises(ValueError, match="working directory"):
            export_parquet(con, [did], bad)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ValueError, match="it is a file"):
        export_parquet(con, [did], tmp_path / "afile")
    with pytest.raises(ValueError, match="below the root"):
        export_parquet(con, [did], "file:///")
    for bad in ("newdir/..", "/"):                                          # a folder by its own name only
        with pytest.raises(ValueError, match="give the folder by its own name, not the root or '..'"):
            export_parquet(con, [did], tmp_path / bad if bad != "/" else bad)
        with pytest.raises(ValueError, match="give the folder by its own name"):
            export_recipeqa_json(con, [did], tmp_path / bad if bad != "/" else bad, with_images=False)
    with pytest.raises(ValueError, match="not a folder or a storage URI"):
        export_parquet(con, [did], "bogus:/x/y")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "exp", "mine"]


def test_an_export_is_swapped_in_whole_or_not_at_all(world, tmp_path):
    """The new export is written beside the earlier one and swapped in by renames: while it is written the
    earlier one stays whole, and when the swap cannot happen (here the earlier folder is immutable) the
    earlier one is left as it was, with nothing half-written beside it; what a killed export left beside
    it is cleared by the next one."""
    import shutil
    import subprocess
    con, ids = world["con"], sorted(world["ids"].values())
    out = tmp_path / "exp"
    first = export_parquet(con, ids[:1], out)
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(out)], capture_output=True).returncode:
        pytest.skip("this file system cannot make a folder immutable (chattr +i), or not running as root")
    try:
        with pytest.raises(ValueError, match=rf"cannot replace the export {out}: .* \(it is left as it was\)"):
            export_parquet(con, ids[:2], out)
    finally:
        subprocess.run(["chattr", "-i", str(out)], check=True)
    assert tree_sha256(out) == first["sha256"] and sorted(p.name for p in tmp_path.iterdir()) == ["exp"]
    import os

    from features.datasets.export import WRITING_PREFIX
    dead, live = tmp_path / f"{WRITING_PREFIX}exp.999999999", tmp_path / f"{WRITING_PREFIX}exp.{os.getppid()}.old"
    dead.mkdir()                    # left by an export killed half way; the other one's process still runs
    live.mkdir()
    second = export_parquet(con, ids[:2], out)
    assert second["sha256"] != first["sha256"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["exp", live.name])


@contextlib.contextmanager
def _locked_by_another_process(lock: Path):
    """`lock` held (flock) by a second Python process for the length of the block, as a running export holds its."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, sys; f = open(sys.argv[1], 'w'); fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); "
        "sys.stdin.read()"), str(lock)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        yield
    finally:
        holder.communicate("")


def test_a_killed_writer_is_told_by_its_lock_not_its_pid(world, tmp_path):
    """What an export killed half way left beside the folder is cleared by the next export when its lock file
    is free, even where its pid now belongs to a running process (pids are reused); a writer that still
    holds its lock (another process) is left alone, and a finished export leaves no lock behind."""
    import os

    from features.datasets.export import WRITING_PREFIX
    con, ids = world["con"], sorted(world["ids"].values())
    out = tmp_path / "exp"
    first = export_parquet(con, ids[:1], out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp"]          # no lock, nothing beside
    dead = tmp_path / f"{WRITING_PREFIX}exp.{os.getppid()}-0"            # a running pid, a free lock
    dead.mkdir()
    (dead / "questions").mkdir()
    Path(f"{dead}.old").mkdir()
    Path(f"{dead}.lock").touch()
    live = tmp_path / f"{WRITING_PREFIX}exp.4242-7"                      # its lock held by another process
    live.mkdir()
    with _locked_by_another_process(Path(f"{live}.lock")):
        second = export_parquet(con, ids[:2], out)
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["exp", live.name, f"{live.name}.lock"])
    assert second["sha256"] != first["sha256"] and tree_sha256(out) == second["sha256"]
    export_parquet(con, ids[:1], out)                                   # its writer is gone now: cleared
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp"]


def test_an_export_clears_what_killed_exports_of_other_folders_left_beside_it(world, tmp_path):
    """Leftovers of a killed export are cleared by the next export into the same parent folder, whatever
    folder it was writing (they stayed until that folder was exported again), and so is the temporary lock
    file of a writer killed before it named it, once a minute old; a fresh one, and a writer still holding its
    lock, are left alone."""
    import os
    import time

    from features.datasets.export import WRITING_PREFIX
    con, ids = world["con"], sorted(world["ids"].values())
    dead = tmp_path / f"{WRITING_PREFIX}other.v1.{os.getppid()}-3"        # another folder's, its lock free
    dead.mkdir()
    Path(f"{dead}.lock").touch()
    legacy = tmp_path / f"{WRITING_PREFIX}old.999999999"                  # an older version's, its pid gone
    legacy.mkdir()
    stale, fresh = tmp_path / ".mrqa-lock-abc", tmp_path / ".mrqa-lock-def"
    stale.touch()
    fresh.touch()
    os.utime(stale, (time.time() - 3600,) * 2)
    live = tmp_path / f"{WRITING_PREFIX}third.4242-1"
    live.mkdir()
    with _locked_by_another_process(Path(f"{live}.lock")):
        export_parquet(con, ids[:1], tmp_path / "exp")
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["exp", fresh.name, live.name, f"{live.name}.lock"])


def test_a_recipeqa_export_is_swapped_in_whole_or_not_at_all(world, tmp_path):
    """The RecipeQA JSON export replaces an earlier one as the Parquet export does: written beside it and
    swapped in, so when the swap cannot happen (the earlier folder is immutable) the earlier files are left
    as they were, with nothing half-written beside them (it used to delete them first, then write)."""
    import shutil
    import subprocess
    con, ids = world["con"], sorted(world["ids"].values())
    out = tmp_path / "rq"
    first = export_recipeqa_json(con, ids[:1], out, home=world["home"], with_images=False)
    before = tree_sha256(out)
    assert first["records"] and sorted(p.name for p in tmp_path.iterdir()) == ["rq"]
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(out)], capture_output=True).returncode:
        pytest.skip("this file system cannot make a folder immutable (chattr +i), or not running as root")
    try:
        with pytest.raises(ValueError, match=rf"cannot replace the export {out}: .* \(it is left as it was\)"):
            export_recipeqa_json(con, ids[1:2], out, home=world["home"])
    finally:
        subprocess.run(["chattr", "-i", str(out)], check=True)
    assert tree_sha256(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["rq"]
    again = export_recipeqa_json(con, ids[1:2], out, home=world["home"])
    assert again["images_copied"] > 0 and (out / "images-qa").is_dir() and tree_sha256(out) != before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rq"]


def test_a_recipeqa_export_of_several_datasets_refuses_one_datasets_folder(world, tmp_path):
    """One dataset's RecipeQA export writes its split files into OUT; several datasets' export writes a folder
    per dataset: into a folder holding the first, the second is refused (it mixed train.json with dataset
    folders), and the other way round too."""
    con, ids = world["con"], sorted(world["ids"].values())
    one, several = tmp_path / "one", tmp_path / "several"
    export_recipeqa_json(con, ids[:1], one, with_images=False)
    before = tree_sha256(one)
    with pytest.raises(ValueError, match=r"it holds one dataset's RecipeQA export \(its split files\)"):
        export_recipeqa_json(con, ids[:2], one, with_images=False)
    assert tree_sha256(one) == before
    export_recipeqa_json(con, ids[:2], several, with_images=False)
    with pytest.raises(ValueError, match="holds more than a RecipeQA export"):
        export_recipeqa_json(con, ids[:1], several, with_images=False)
    assert sorted(p.name for p in several.iterdir()) == sorted(ids[:2])


def test_a_full_disk_is_a_clear_error_and_keeps_the_earlier_export(world, tmp_path):
    """An export to a file system that fills up (a 2 MB tmpfs) fails with one line naming the folder and the
    cause, and leaves the earlier export as it was, with nothing beside it (it ended in a pyarrow traceback)."""
    import os
    import subprocess
    con, ids = world["con"], sorted(world["ids"].values())
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here (needs root in a system that allows mounts)")
    try:
        out = disk / "exp"
        first = export_parquet(con, ids[:1], out)
        st = os.statvfs(disk)                   # the disk full but for 64 KB
        (disk / "filler").write_bytes(b"\0" * max(0, st.f_bavail * st.f_frsize - (64 << 10)))
        with pytest.raises(ValueError, match=rf"^cannot write the export {out}: .*(No space left on device|"
                                             r"[Nn]o space).* \(an earlier export is left as it was\)$"):
            export_parquet(con, ids, out, with_vectors=True, lance_uri=world["paths"].lance, with_images=True,
                           home=world["home"])
        assert tree_sha256(out) == first["sha256"] and sorted(p.name for p in disk.iterdir()) == ["exp", "filler"]
        rq = disk / "rq"                        # the RecipeQA export the same (it blamed the image it copied)
        (disk / "filler").unlink()
        export_recipeqa_json(con, ids[:1], rq, with_images=False)
        before = tree_sha256(rq)
        st = os.statvfs(disk)
        (disk / "filler").write_bytes(b"\0" * max(0, st.f_bavail * st.f_frsize - (16 << 10)))
        with pytest.raises(ValueError, match=rf"^cannot write the export {rq}: .*[Nn]o space.* \(an earlier export "
                                             r"is left as it was\)$"):
            export_recipeqa_json(con, ids[:1], rq, home=world["home"])
        assert tree_sha256(rq) == before and sorted(p.name for p in disk.iterdir()) == ["exp", "filler", "rq"]
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_a_first_export_warns_of_nothing(world, tmp_path, caplog):
    """With no earlier export there is nothing to delete after the swap: no warning that "the earlier export
    could not be deleted" (it was logged on every first export, and on every export to a storage URI)."""
    import logging
    con, ids = world["con"], sorted(world["ids"].values())
    with caplog.at_level(logging.WARNING, logger="features.datasets.export"):
        export_parquet(con, ids[:1], tmp_path / "new" / "exp")
        export_parquet(con, ids[:1], f"file://{tmp_path}/uri")
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_concurrent_export_that_swaps_in_first_leaves_nothing_beside(world, tmp_path, monkeypatch):
    """Two exports of one folder: when the other one's swap lands between this one's two renames, this one
    fails saying so, and the earlier export it had moved aside is deleted, not left as `.writing-*.old`."""
    from pathlib import Path

    from features.datasets.export import WRITING_PREFIX
    con, ids = world["con"], sorted(world["ids"].values())
    out = tmp_path / "exp"
    export_parquet(con, ids[:1], out)
    rename = Path.rename

    def racing(self, target):
        if self.name.startswith(WRITING_PREFIX) and not self.name.endswith(".old") and Path(target) == out:
            (out / "questions").mkdir(parents=True)         # the other export's swap lands first
        return rename(self, target)
    monkeypatch.setattr(Path, "rename", racing)
    with pytest.raises(ValueError, match="another export of it was swapped in meanwhile"):
        export_parquet(con, ids[:2], out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp"]


def test_a_file_uri_is_swapped_in_as_its_folder_is(world, tmp_path):
    """`--out file:///x` is the local folder /x: written beside it and swapped in, so an export that cannot
    replace the earlier one (its folder is immutable) leaves it whole and says why; it was emptied file by
    file first, as far as it could be, and pyarrow's PermissionError came out as a traceback."""
    import shutil
    import subprocess
    con, ids = world["con"], sorted(world["ids"].values())
    out = tmp_path / "exp"
    first = export_parquet(con, ids[:1], f"file://{out.as_posix()}")
    assert first["out"] == f"file://{out.as_posix()}" and first["sha256"] == tree_sha256(out)
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(out)], capture_output=True).returncode:
        pytest.skip("this file system cannot make a folder immutable (chattr +i), or not running as root")
    try:
        with pytest.raises(ValueError, match="cannot replace the export"):
            export_parquet(con, ids[:2], f"file://{out.as_posix()}")
        assert tree_sha256(out) == first["sha256"]
    finally:
        subprocess.run(["chattr", "-i", str(out)], check=True)
    second = export_parquet(con, ids[:2], f"file://{out.as_posix()}")
    assert second["sha256"] == tree_sha256(out) != first["sha256"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp"]


def test_an_out_that_is_a_symlink_is_written_where_it_points(world, tmp_path):
    """`--out link` (a symlink to a folder, e.g. on a bigger disk): the export replaces the folder it points
    to; the link stays a link, and nothing is left beside either."""
    con, ids = world["con"], sorted(world["ids"].values())
    target, link = tmp_path / "disk" / "exp", tmp_path / "link"
    export_parquet(con, ids[:1], target)
    link.symlink_to(target, target_is_directory=True)
    res = export_parquet(con, ids[:2], link)
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert res["sha256"] == tree_sha256(target) == export_parquet(con, ids[:2], tmp_path / "plain")["sha256"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["disk", "link", "plain"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["exp"]


def test_paths_with_a_quote_export_and_load(world, tmp_path):
    from training.data import list_datasets, load_qa_dataset
    con, did = world["con"], world["ids"][("visual_cloze", "0-1-1")]
    out = tmp_path / "Bob's data" / "exp"
    res = export_parquet(con, [did], out, with_vectors=True, lance_uri=world["paths"].lance)
    assert res["questions"] > 0 and [d["dataset_id"] for d in list_datasets(out)] == [did]
    ds = load_qa_dataset(out, did, "vectors", lance_uri=world["paths"].lance)
    assert sum(len(s) for s in ds.splits.values()) == res["questions"]


# ----------------------------------------------------------------------------- RecipeQA JSON

def recipeqa_evaluate(data_files: list, predictions_file) -> dict[str, float]:
    """RecipeQA's scoring, re-implemented: read the records, read the predictions (qid -> answer index),
    accuracy per task = predictions equal to `answer` / records of that task."""
    preds = json.loads(open(predictions_file).read())
    correct, total = Counter(), Counter()
    for f in data_files:
        for rec in json.loads(open(f).read())["data"]:
            total[rec["task"]] += 1
            correct[rec["task"]] += int(preds.get(rec["qid"]) == rec["answer"])
    return {t: correct[t] / total[t] for t in total}


def test_recipeqa_json_copies_every_shown_image(world, tmp_path):
    con, did = world["con"], world["ids"][("visual_cloze", "0-1-1")]
    res = export_recipeqa_json(con, [did], tmp_path, home=world["home"])
    assert res["images_missing"] == 0 and res["images_copied"] > 0
    asked = {r for (r,) in con.execute("SELECT DISTINCT recipe_id FROM questions WHERE dataset_id = ?", [did])
             .fetchall()}
    foreign = set()
    for split in res["records"]:
        recs = json.loads((tmp_path / f"{split}.json").read_text())["data"]
        folder = tmp_path / "images-qa" / split / "images-qa"
        for rec in recs:
            for iid in record_images(rec):
                assert (folder / iid).is_file(), iid
                if iid.rsplit("_", 2)[0] not in asked:
                    foreign.add(iid)
            assert [c["id"] for c in rec["context"]] == list(range(1, len(rec["context"]) + 1))
    assert foreign        # distractors from recipes without questions of their own are there too


@pytest.fixture(scope="module")
def rq_all(world, tmp_path_factory):
    """export_recipeqa_json of every dataset (what `mrqa export --all --format recipeqa-json` writes)."""
    out = tmp_path_factory.mktemp("rq") / "all"
    res = export_recipeqa_json(world["con"], sorted(world["ids"].values()), out, home=world["home"])
    return {"out": out, "res": res}


def _n_questions(con, did: str) -> int:
    return con.execute("SELECT n_questions FROM datasets WHERE dataset_id = ?", [did]).fetchall()[0][0]


def test_recipeqa_json_all_is_one_folder_per_dataset_and_scores(world, rq_all, tmp_path):
    con, out, res = world["con"], rq_all["out"], rq_all["res"]
    ids = sorted(world["ids"].values())
    assert sorted(p.name for p in out.iterdir()) == ids and res["images_missing"] == 0
    rng = np.random.default_rng(0)
    for did in ids:
        data = sorted((out / did).glob("*.json"))
        assert {f.stem for f in data} == set(res["datasets"][did]) <= {"train", "val", "test"}
        recs = [r for f in data for r in json.loads(f.read_text())["data"]]
        assert len(recs) == _n_questions(con, did) and len({r["task"] for r in recs}) == 1
        assert all(r["qid"].startswith(did + ".") for r in recs) and len({r["qid"] for r in recs}) == len(recs)
        gold, rand = tmp_path / f"{did}.gold.json", tmp_path / f"{did}.random.json"
        gold.write_text(json.dumps({r["qid"]: r["answer"] for r in recs}))
        rand.write_text(json.dumps({r["qid"]: int(rng.integers(len(r["choice_list"]))) for r in recs}))
        assert recipeqa_evaluate(data, gold) == {recs[0]["task"]: 1.0}
        acc = recipeqa_evaluate(data, rand)[recs[0]["task"]]
        n = len(recs)
        assert abs(acc - 0.25) <= 4 * math.sqrt(0.25 * 0.75 / n), (did, acc, n)   # 4 sigma of Binomial(n, 1/4)
        wrong = {r["qid"]: (r["answer"] + 1) % 4 for r in recs}                     # the scorer can say 0
        (tmp_path / "wrong.json").write_text(json.dumps(wrong))
        assert recipeqa_evaluate(data, tmp_path / "wrong.json") == {recs[0]["task"]: 0.0}


def _expected_by_task(world) -> dict[str, int]:
    want = Counter()
    for (task, _), did in world["ids"].items():
        want[task] += _n_questions(world["con"], did)
    return dict(want)


def test_recipeqa_json_reimports_with_the_strict_importer(world, rq_all, tmp_path):
    """etl.recipeqa.import_recipeqa (what `mrqa ingest recipeqa` runs) into a fresh warehouse."""
    from etl.config import Paths
    from etl.recipeqa import import_recipeqa
    from etl.warehouse import connect
    out = rq_all["out"]
    home2 = tmp_path / "home2"
    con2 = connect(Paths(home=home2).ensure())
    for did in sorted(world["ids"].values()):
        s = import_recipeqa(con2, sorted((out / did).glob("*.json")), images_dir=out / did / "images-qa",
                            home=home2)
        assert s["questions"] == _n_questions(world["con"], did)
    assert dict(con2.execute("SELECT task, count(*) FROM questions GROUP BY 1").fetchall()) == _expected_by_task(world)
    assert con2.execute("SELECT count(*) FROM images WHERE status <> 'ok'").fetchall() == [(0,)]
    con2.close()


@pytest.mark.slow
def test_recipeqa_json_reimports_with_mrqa_ingest(world, rq_all, tmp_path, monkeypatch, prefect_harness):
    from typer.testing import CliRunner

    from flows.cli import app
    out = rq_all["out"]
    home2 = tmp_path / "home2"
    monkeypatch.setenv("MRQA_HOME", str(home2))
    for did in sorted(world["ids"].values()):
        r = CliRunner().invoke(app, ["ingest", "recipeqa", *map(str, sorted((out / did).glob("*.json"))),
                                     "--images", str(out / did / "images-qa")])
        assert r.exit_code == 0, r.output
    c2 = duckdb.connect(str(home2 / "warehouse.duckdb"), read_only=True)
    assert dict(c2.execute("SELECT task, count(*) FROM questions GROUP BY 1").fetchall()) == _expected_by_task(world)
    c2.close()


def test_an_export_that_cannot_name_its_lock_leaves_nothing_beside(world, tmp_path):
    """A folder name the file system takes but the lock's longer name `.writing-<name>.<pid>-<n>.lock` does not
    (over NAME_MAX): the export fails saying why, and leaves no `.mrqa-lock-*` file beside the folder (one was
    left on every such try, for good: nothing clears them)."""
    con, ids = world["con"], sorted(world["ids"].values())
    name = "x" * 235                    # a valid folder name; its lock's name is over 255 bytes
    (tmp_path / name).mkdir()
    (tmp_path / name).rmdir()
    for export in (lambda out: export_parquet(con, ids[:1], out),
                   lambda out: export_recipeqa_json(con, ids[:1], out, with_images=False)):
        with pytest.raises(ValueError, match="cannot write an export next to .*File name too long"):
            export(tmp_path / name)
        assert list(tmp_path.iterdir()) == []


def test_the_sha256_is_of_what_this_export_wrote_when_another_replaces_it(world, tmp_path, monkeypatch):
    """Two exports of one folder at once: the other one may swap its own in just after this one's swap. This
    one still succeeds and reports the sha256 of the files it wrote; it hashed `out` after the swap, so it
    reported the other's, or failed ("cannot use ...: No such file or directory") on a file the other lacks."""
    import shutil

    from features.datasets.export import WRITING_PREFIX
    con, ids = world["con"], sorted(world["ids"].values())
    mine = export_parquet(con, ids[:2], tmp_path / "mine")["sha256"]
    other = tmp_path / "other"
    export_parquet(con, ids[2:3], other)
    out = tmp_path / "exp"
    rename = Path.rename

    def other_swaps_in_after(self, target):
        res = rename(self, target)
        if self.name.startswith(WRITING_PREFIX) and Path(target) == out:
            shutil.rmtree(out)                  # the other export's swap, just after this one's
            shutil.copytree(other, out)
        return res
    monkeypatch.setattr(Path, "rename", other_swaps_in_after)
    assert export_parquet(con, ids[:2], out)["sha256"] == mine


def test_a_recipeqa_export_of_several_refuses_before_it_replaces_any(world, tmp_path):
    """Several datasets, one folder each: when one of those folders holds foreign files, the export refuses
    before it writes any, so the folders of the datasets before it keep the earlier export (they were replaced,
    here without their images, and then the export refused)."""
    con, ids = world["con"], sorted(world["ids"].values())[:3]
    out = tmp_path / "rq"
    export_recipeqa_json(con, ids, out, home=world["home"])
    before = {did: tree_sha256(out / did) for did in ids}
    (out / ids[1] / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=f"refusing to replace {out / ids[1]}: .*notes.txt"):
        export_recipeqa_json(con, ids, out, home=world["home"], with_images=False)
    assert (out / ids[0] / "images-qa").is_dir() and tree_sha256(out / ids[0]) == before[ids[0]]
    assert sorted(p.name for p in out.iterdir()) == ids and sorted(p.name for p in tmp_path.iterdir()) == ["rq"]


_CTRL_C = """
import os, signal, sys
from pathlib import Path
from features.datasets.export import _swap_in, _writing
from flows.signals import stop_children_on_signals
stop_children_on_signals(grace_s=0.1)           # `mrqa`'s own handler: ends the process (os._exit(130))
out, when = Path(sys.argv[1]), sys.argv[2]
rename = Path.rename
def ctrl_c_between(self, target):               # Ctrl-C just after the earlier export is moved aside
    res = rename(self, target)
    if (self == out and when == "between-renames") or (Path(target) == out and when == "after-renames"):
        os.kill(os.getpid(), signal.SIGINT)
    return res
Path.rename = ctrl_c_between
with _writing(out) as new:
    (new / "README.md").write_text("new")
    if when == "writing":
        os.kill(os.getpid(), signal.SIGINT)
    if when == "query":                         # turned into another error, as DuckDB's "Query interrupted"
        try:
            os.kill(os.getpid(), signal.SIGINT)
        except BaseException:
            raise RuntimeError("Query interrupted") from None
    _swap_in(new, out)
"""


@pytest.mark.parametrize("when, left", [("writing", "earlier"), ("query", "earlier"), ("between-renames", "earlier"),
                                        ("after-renames", "new")])
def test_ctrl_c_of_mrqa_during_an_export_leaves_one_export_and_nothing_beside(tmp_path, when, left):
    """Ctrl-C (SIGINT) with `mrqa`'s signal handler (flows/signals.py), which ends the process at once: the
    export still deletes what it wrote beside the folder and its lock, and, when it came between the two
    renames, puts the earlier export back (just after both: the new one stays, the earlier one is deleted),
    before the process ends with 130. The handler's os._exit skipped all of that: a half-written `.writing-*`
    folder and its lock were left, or no export at all (the earlier one left as `.writing-*.old`)."""
    import os
    import subprocess
    import sys
    out = tmp_path / "exp"
    out.mkdir()
    (out / "README.md").write_text("earlier")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[3]),
                                                         os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-c", _CTRL_C, str(out), when], capture_output=True, text=True, env=env,
                         timeout=60)
    assert run.returncode == 130, run.stderr
    assert "stopped by SIGINT" in run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp"]
    assert (out / "README.md").read_text() == left


def test_an_out_that_is_a_symlink_loop_or_dangling_link(world, tmp_path):
    """`--out` a link that loops (a -> b -> a): refused in one line, both links left as they were, nothing
    written. A dangling link (to a folder not made yet): the folder it points to is made, the link stays."""
    con, ids = world["con"], sorted(world["ids"].values())
    a, b = tmp_path / "a", tmp_path / "b"
    a.symlink_to(b)
    b.symlink_to(a)
    with pytest.raises(ValueError, match="symbolic link.*loop"):
        export_parquet(con, ids[:1], a)
    assert a.is_symlink() and b.is_symlink() and os.readlink(a) == str(b)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]
    dangling, target = tmp_path / "d", tmp_path / "disk" / "exp"
    dangling.symlink_to(target, target_is_directory=True)
    res = export_parquet(con, ids[:1], dangling)
    assert dangling.is_symlink() and target.is_dir() and res["sha256"] == tree_sha256(target)


def test_an_object_store_export_deletes_nothing_before_the_new_one_is_written(world, tmp_path, monkeypatch):
    """`publish`, behind `--out s3://...` and `gs://...` (pyarrow's in-memory file system stands in for the
    store): the new export replaces the earlier one, its stale objects deleted after; a copy that fails half
    way leaves every object of the earlier export and its card, and says to run the export again."""
    from pyarrow import fs as pafs

    from features.datasets import export as ex
    con, ids = world["con"], sorted(world["ids"].values())
    old, new = tmp_path / "old", tmp_path / "new"
    export_parquet(con, ids[:1], old)
    export_parquet(con, ids[:2], new)
    store = pafs._MockFileSystem()

    def listing():
        return {i.path: store.open_input_stream(i.path).read() for i in
                store.get_file_info(pafs.FileSelector("b/x", recursive=True)) if i.type == pafs.FileType.File}

    def tree(root):
        return {f"b/x/{p.relative_to(root).as_posix()}": p.read_bytes() for p in root.rglob("*") if p.is_file()}

    ex.publish(old, store, "b/x")
    store.create_dir("b/x/questions")
    with store.open_output_stream("b/x/questions/stale.parquet") as f:
        f.write(b"an earlier export's partition")
    before = listing()
    assert "b/x/questions/stale.parquet" in before and before["b/x/README.md"] == (old / "README.md").read_bytes()
    real_put, written = ex._put, []

    def failing_put(src, fs, path):
        if len(written) == 2:
            raise OSError(28, "No space left on device")
        written.append(path)
        real_put(src, fs, path)

    monkeypatch.setattr(ex, "_put", failing_put)
    with pytest.raises(ValueError, match="run the export again"):
        ex.publish(new, store, "b/x")
    after = listing()
    assert set(after) >= set(before) and after["b/x/README.md"] == before["b/x/README.md"]   # nothing deleted
    assert "b/x/README.md" not in written
    monkeypatch.setattr(ex, "_put", real_put)
    ex.publish(new, store, "b/x")
    assert listing() == tree(new) != tree(old)
