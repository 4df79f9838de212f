"""The training library's two entry helpers: `resolve_configs` (the one resolver of a model size for
`mrqa train|sweep|bench train`, torchrun and the flows) and `training_export` (the Parquet export a
dataset is trained or scored on, written from the warehouse when missing)."""
from __future__ import annotations

import shutil
from argparse import Namespace

import pytest

from training.config import ModelConfig, TrainConfig, resolve_configs
from training.data import DatasetError, list_datasets, training_export


def test_resolve_configs_sizes_and_overrides():
    mc, tc = resolve_configs()
    assert (mc, tc) == (ModelConfig(), TrainConfig())                     # paper by default
    assert resolve_configs(tiny=True) == (ModelConfig.tiny(), TrainConfig.tiny())
    assert resolve_configs("small", tiny=True)[0] == ModelConfig.small()   # a named size wins over --tiny
    mc, tc = resolve_configs("tiny", scorer="bidaf", text_features="vectors", layers=3, width=24, lr=2e-4,
                             max_epochs=None, seed=7)
    assert (mc.scorer, mc.text_features, mc.n_layers, mc.d_model) == ("bidaf", "vectors", 3, 24)
    assert (tc.lr, tc.seed, tc.max_epochs) == (2e-4, 7, TrainConfig.tiny().max_epochs)   # None keeps the size's


@pytest.mark.parametrize("kw, msg", [
    ({"size": "huge"}, "--size must be one of paper, small, tiny, got 'huge'"),
    ({"scorer": "hasty"}, "--scorer must be one of transformer, bidaf, impatient, question_only"),
    ({"text_features": "pixels"}, "--text-features must be one of tokens, vectors"),
    ({"layers": 0}, "--layers must be >= 1, got 0"),
    ({"tiny": True, "width": 25}, "multiple of n_heads"),
    ({"lr": -1.0}, "--lr must be > 0 and finite, got -1.0"),
    ({"lr": float("nan")}, "--lr must be > 0 and finite, got nan"),
    ({"lr": float("inf")}, "--lr must be > 0 and finite, got inf"),
    ({"max_epochs": 0}, "--max-epochs must be >= 1, got 0"),
    ({"batch_size": 0}, "--batch-size must be >= 1, got 0"),
    ({"batch_size": -4}, "--batch-size must be >= 1, got -4"),
    ({"max_train_questions": 0}, "--max-train-questions must be >= 1, got 0"),
    ({"patience": -1}, "--patience must be >= 0, got -1"),
    ({"warmup_steps": -1}, "--warmup-steps must be >= 0, got -1"),
    ({"threads": -2}, "--threads must be >= 0, got -2"),
    ({"seed": -1}, "--seed must be in [0, 4294967295], got -1"),
    ({"seed": 2**32}, "--seed must be in [0, 4294967295], got 4294967296"),
])
def test_resolve_configs_refuses_bad_values_naming_the_option(kw, msg):
    with pytest.raises(ValueError) as e:
        resolve_configs(**kw)
    assert msg in str(e.value)


def test_resolve_configs_keeps_the_edge_values():
    _, tc = resolve_configs(tiny=True, max_epochs=1, batch_size=1, max_train_questions=1, patience=0,
                            warmup_steps=0, threads=0, seed=2**32 - 1)
    assert (tc.max_epochs, tc.batch_size, tc.patience, tc.seed) == (1, 1, 0, 2**32 - 1)


def test_resolve_configs_refuses_a_field_trainconfig_lacks():
    with pytest.raises(TypeError, match="epochs"):
        resolve_configs(epochs=3)


def test_the_torchrun_arguments_resolve_like_the_cli():
    from training.train import configs_from_args, parse_args
    a = parse_args(["--export", "x", "--dataset", "d", "--tiny", "--layers", "2", "--lr", "0.01", "--no-amp"])
    assert isinstance(a, Namespace)
    mc, tc = configs_from_args(a)
    ref_mc, ref_tc = resolve_configs(tiny=True, layers=2, lr=0.01, amp=False)
    assert (mc, tc) == (ref_mc, ref_tc) and tc.amp is False and mc.n_layers == 2


def test_training_export_given_found_or_written(toy_home, tmp_path, monkeypatch):
    from etl.config import Paths
    did = toy_home["ids"][("visual_cloze", "0-0-0")]
    assert training_export(did, toy_home["export"]) == toy_home["export"]          # --export as given
    assert training_export(did) == toy_home["export"]                               # exports/all holds it
    with pytest.raises(DatasetError, match="is not a Parquet export"):
        training_export(did, tmp_path)
    # a home whose warehouse has the datasets but no export yet: exports/<dataset> is written once
    home = tmp_path / "home"
    src = Paths.from_env()
    home.mkdir()
    shutil.copy(src.warehouse, home / src.warehouse.name)
    shutil.copytree(src.lance, home / "lance")
    monkeypatch.setenv("MRQA_HOME", str(home))
    out = training_export(did)
    assert out == home / "exports" / did
    assert [d["dataset_id"] for d in list_datasets(out)] == [did]
    stamp = {p: p.stat().st_mtime_ns for p in out.rglob("*.parquet")}
    assert stamp and training_export(did) == out                                    # found, not rewritten
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.parquet")} == stamp
    # an older generation of the dataset (generated or filtered again after the export): written again
    import pyarrow as pa
    import pyarrow.parquet as pq
    f = sorted((out / "questions").rglob("*.parquet"))[0]
    t = pq.read_table(f)
    pq.write_table(t.set_column(t.schema.get_field_index("answer"), "answer",
                                pa.array([(a + 1) % 4 for a in t["answer"].to_pylist()], pa.int32())), f)
    assert training_export(did) == out
    assert pq.read_table(f)["answer"].to_pylist() == t["answer"].to_pylist()      # the warehouse's answers again
    from etl.warehouse import connect_reader
    from features.datasets.export import export_freshness
    con = connect_reader(Paths.from_env())
    try:
        assert export_freshness(con, out) == {"current": [did], "changed": [], "gone": [], "missing": []}
    finally:
        con.close()
    # exports/<id> holding a user's files: refused, saying what train can do (it has no --out)
    shutil.rmtree(out)
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(DatasetError, match=r"cannot write the training export: refusing to replace .* \(notes.txt\); "
                                           r"move them away, or give --export DIR$"):
        training_export(did)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    with pytest.raises(DatasetError, match="no dataset 'nope'"):
        training_export("nope")
    assert not (home / "exports" / "nope").exists()
    # a home without a warehouse (a mistyped --home): an error, never a new empty warehouse
    empty = tmp_path / "empty"
    monkeypatch.setenv("MRQA_HOME", str(empty))
    with pytest.raises(DatasetError, match="there is no warehouse at .*give --export, or run `mrqa demo`"):
        training_export(did)
    assert not (empty / "warehouse.duckdb").exists()


@pytest.mark.parametrize("name", ["res [old]", "w*[x]?y", "Bob's {data}"])
def test_an_export_in_a_folder_with_glob_characters_is_read(toy_home, tmp_path, name):
    """DuckDB globs the questions' path: a folder's own `[`, `*` or `?` match only themselves (before, "res [old]"
    was a character class and no file was found)."""
    from etl.config import Paths
    from etl.warehouse import connect_reader
    from features.datasets.export import export_freshness
    from training.score import load_split
    exp = tmp_path / name / "out"
    shutil.copytree(toy_home["export"], exp)
    did = toy_home["ids"][("visual_cloze", "0-0-0")]
    assert list_datasets(exp) == list_datasets(toy_home["export"])
    assert load_split(did, "test", exp).qids == load_split(did, "test", toy_home["export"]).qids
    con = connect_reader(Paths.from_env())
    try:
        assert export_freshness(con, exp) == export_freshness(con, toy_home["export"])
        assert did in export_freshness(con, exp)["current"]
    finally:
        con.close()


def test_a_damaged_export_is_a_clear_error_and_train_passes_it_over(toy_home, tmp_path, monkeypatch):
    """A questions file cut short (an interrupted copy, an export still being written): list_datasets, the
    loader and `mrqa score` name the export instead of a DuckDB traceback, and training_export passes over a
    damaged exports/all and writes exports/<id> from the warehouse."""
    from etl.config import Paths
    from training.data import load_qa_dataset
    from training.score import ScoreError, load_split
    did = toy_home["ids"][("visual_cloze", "0-0-0")]
    src = Paths.from_env()
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(src.warehouse, home / src.warehouse.name)
    shutil.copytree(src.lance, home / "lance")
    shutil.copytree(toy_home["export"], home / "exports" / "all")
    f = next(p for p in sorted((home / "exports" / "all" / "questions").rglob("*.parquet")) if did not in str(p))
    f.write_bytes(f.read_bytes()[:100])
    damaged = home / "exports" / "all"
    with pytest.raises(DatasetError, match="its questions cannot be read"):
        list_datasets(damaged)
    with pytest.raises(ScoreError, match="its questions cannot be read"):
        load_split(did, "test", damaged)
    with pytest.raises(DatasetError, match="its questions cannot be read"):
        load_qa_dataset(damaged, did)
    monkeypatch.setenv("MRQA_HOME", str(home))
    assert training_export(did) == home / "exports" / did
    assert [d["dataset_id"] for d in list_datasets(home / "exports" / did)] == [did]
