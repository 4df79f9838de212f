"""Loading an exported dataset into tensors: shapes and the paper's per-choice queries, per task."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from training.data import DatasetError, load_qa_dataset


@pytest.mark.parametrize("task,m", [("visual_cloze", 4), ("visual_coherence", 3), ("visual_ordering", 4)])
def test_shapes_per_task(toy_home, task, m):
    did = toy_home["ids"][(task, "0-0-0")]
    ds = load_qa_dataset(toy_home["export"], did, "tokens", max_steps=12, max_tokens=16, min_token_freq=1)
    assert ds.task == task and set(ds.splits) <= {"train", "val", "test"} and "train" in ds.splits
    sp = ds.splits["train"]
    assert sp.query.shape == (len(sp), 4, m) and (sp.query > 0).all()
    assert set(sp.answer.tolist()) <= {0, 1, 2, 3}
    b = ds.batch("train", np.arange(5))
    assert b["query"].shape == (5, 4, m, ds.image_dim) and b["ctx"].shape[0] == 5
    assert b["ctx_mask"].sum(1).tolist() == ds.ctx_len[torch.as_tensor(sp.recipe_row[:5])].tolist()
    assert ds.vocab[:2] == ["<pad>", "<unk>"] and len(ds.vocab) > 10
    if task == "visual_cloze":
        # queries of the 4 choices differ only in the placeholder's slot
        differ = (sp.query != sp.query[:, :1]).any(1)                    # (Q, M)
        assert (differ.sum(1) == 1).all()
        assert ((sp.target_ctx >= 0) & (sp.target_ctx < ds.ctx_len[torch.as_tensor(sp.recipe_row)].numpy())).all()
    if task == "visual_coherence":
        # query c is the question minus image c: the 4 queries are pairwise different sets
        assert all(len({tuple(sorted(q)) for q in row}) == 4 for row in sp.query[:20].tolist())


def test_vectors_text_features(toy_home):
    did = toy_home["ids"][("visual_cloze", "0-0-0")]
    ds = load_qa_dataset(toy_home["export"], did, "vectors", max_steps=12)
    assert ds.text_dim == 32 and ds.ctx.dtype == torch.float32 and ds.vocab is None
    assert ds.text_source == "export:body"


def _ctx(ds) -> dict:
    """{(recipe row, step): vector} of the steps a dataset's contexts hold."""
    return {(r, s): ds.ctx[r, s].numpy().tobytes() for r in range(len(ds.ctx)) for s in range(int(ds.ctx_len[r]))}


def test_an_export_trains_on_the_step_bodies_without_the_feature_store(toy_home, tmp_path, caplog):
    """The step texts the readers read come with the export (its body vectors), so a machine without
    the feature store loads the same tensors; an export of titles only is read, with a warning."""
    import shutil

    import duckdb
    did = toy_home["ids"][("visual_cloze", "0-0-0")]
    no_store = str(tmp_path / "no-lance")
    from_export = load_qa_dataset(toy_home["export"], did, "vectors", max_steps=12, lance_uri=no_store)
    assert from_export.text_source == "export:body"
    bare = tmp_path / "bare"                       # the same export without its vector files: the store's
    shutil.copytree(toy_home["export"], bare, ignore=shutil.ignore_patterns("*_vectors.parquet"))
    from_store = load_qa_dataset(bare, did, "vectors", max_steps=12)
    assert from_store.text_source == "store:body"
    assert _ctx(from_export) == _ctx(from_store) and len(_ctx(from_store)) > 100
    assert torch.equal(from_export.images, load_qa_dataset(bare, did, "vectors", max_steps=12).images)

    titles = tmp_path / "titles"                   # an export written before it carried the bodies
    shutil.copytree(toy_home["export"], titles)
    f = titles / "text_vectors.parquet"
    duckdb.sql(f"COPY (SELECT * FROM '{toy_home['export'] / 'text_vectors.parquet'}' WHERE field = 'title') "
               f"TO '{f}' (FORMAT parquet)")
    with caplog.at_level("WARNING", logger="training.data"):
        from_titles = load_qa_dataset(titles, did, "vectors", max_steps=12, lance_uri=no_store)
    assert from_titles.text_source == "export:title" and _ctx(from_titles) != _ctx(from_store)
    assert "the step titles only" in caplog.text and "mrqa export --with-vectors" in caplog.text


def test_unknown_dataset_is_a_clear_error(toy_home, tmp_path):
    with pytest.raises(DatasetError, match="not in"):
        load_qa_dataset(toy_home["export"], "no-such-dataset")
    with pytest.raises(DatasetError, match="not a Parquet export"):
        load_qa_dataset(tmp_path, "x")


def test_an_export_with_vectors_loads_without_lancedb(toy_home):
    """A GPU machine that trains from an export needs no LanceDB: loading a dataset from an export with
    vectors imports neither lancedb nor the store's dependencies (the process's modules, checked in a
    fresh interpreter)."""
    import subprocess
    import sys
    did = toy_home["ids"][("visual_cloze", "0-0-0")]
    code = ("import sys; from training.data import load_qa_dataset; "
            f"ds = load_qa_dataset({str(toy_home['export'])!r}, {did!r}, 'vectors', max_steps=12, "
            "lance_uri='/nonexistent/lance'); "
            "print(ds.text_source, sorted(m for m in ('lancedb', 'lance', 'pydantic') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["export:body", "[]"]


def test_textual_cloze_reads_titles_as_items_and_the_steps_photos_as_context(toy_home):
    """RecipeQA's textual cloze: the query items are the titles (the provenance's item ids) with the
    placeholder's taken by each choice, and each context step is the normalised mean of its photos."""
    import json

    import duckdb

    from features.vectors.store import FeatureStore
    did = toy_home["ids"][("textual_cloze", "0-1-0")]
    ds = load_qa_dataset(toy_home["export"], did, "vectors", max_steps=12)
    assert ds.task == "textual_cloze" and ds.text_source == "images" and ds.vocab is None
    assert ds.text_dim == ds.image_dim == 32
    sp = ds.splits["train"]
    assert len(sp) > 20 and sp.query.shape[1:] == (4, 4) and (sp.query > 0).all()
    differ = (sp.query != sp.query[:, :1]).any(1)                     # the choices differ in one slot
    assert (differ.sum(1) == 1).all()
    store = FeatureStore(str(toy_home["home"] / "lance"))
    ids, mat = store.text_vectors(ds.encoder_id, "title")
    title = dict(zip(ids, mat))
    glob = str(toy_home["export"] / "questions" / "**" / "*.parquet")
    rec = {q: (json.loads(p), list(qs), list(cl)) for q, p, qs, cl in duckdb.sql(
        f"SELECT qid, provenance, question, choice_list FROM read_parquet('{glob}', hive_partitioning = true) "
        f"WHERE dataset_id = '{did}'").fetchall()}
    rows = torch.as_tensor(sp.recipe_row)
    for k, qid in enumerate(sp.qids[:25]):
        prov, question, _ = rec[qid]
        p = question.index("@placeholder")
        assert int(np.flatnonzero(differ[k])[0]) == p
        for c, item in enumerate(prov["choice_items"]):            # each choice's query: its title's vector
            want = prov["question_items"][:p] + [item] + prov["question_items"][p + 1:]
            got = ds.images[torch.as_tensor(sp.query[k, c])].numpy()
            assert np.allclose(got, np.stack([title[i] for i in want]), atol=1e-6)
        assert prov["choice_items"][int(sp.answer[k])] == prov["question_items"][p]
        assert 0 <= sp.target_ctx[k] < int(ds.ctx_len[rows[k]])
    img_ids, img_mat = store.image_vectors(ds.encoder_id)
    by_step: dict = {}
    for i, v in zip(img_ids, img_mat):
        rid, step, _ = i.rsplit("_", 2)
        by_step.setdefault((rid, int(step)), []).append(v)
    qrid = duckdb.sql(f"SELECT recipe_id FROM read_parquet('{glob}', hive_partitioning = true) "
                      f"WHERE qid = '{sp.qids[0]}' AND dataset_id = '{did}'").fetchall()[0][0]
    step_ids = [r[0] for r in duckdb.sql(f"SELECT step_idx FROM read_parquet('{toy_home['export']}/steps.parquet') "
                                         f"WHERE recipe_id = '{qrid}' ORDER BY step_idx").fetchall()]
    for s, idx in enumerate(step_ids[:12]):
        row = ds.ctx[int(sp.recipe_row[0]), s].numpy()
        if (qrid, idx) in by_step:
            mean = np.mean(by_step[(qrid, idx)], 0)
            assert np.allclose(row, mean / np.linalg.norm(mean), atol=1e-5)
        else:
            assert not row.any()
    with pytest.raises(DatasetError, match="--text-features vectors"):
        load_qa_dataset(toy_home["export"], did, "tokens")


def test_a_textual_cloze_export_without_the_title_ids_is_a_clear_error(toy_home, tmp_path):
    """An export whose textual cloze provenance lacks `question_items` / `choice_items` (written before
    they were recorded) is refused with what to do, not read with the wrong items."""
    import shutil

    import duckdb
    did = toy_home["ids"][("textual_cloze", "0-1-0")]
    old = tmp_path / "old"
    shutil.copytree(toy_home["export"], old)
    files = sorted((old / "questions" / "task=textual_cloze").rglob("*.parquet"))
    assert files
    for f in files:                               # the same rows, the provenance without the item ids
        tmp = f.with_suffix(".tmp")
        duckdb.sql(f"COPY (SELECT * REPLACE (CAST(json_merge_patch(provenance, "
                   f"'{{\"question_items\": null, \"choice_items\": null}}') AS VARCHAR) AS provenance) "
                   f"FROM read_parquet('{f}')) TO '{tmp}' (FORMAT parquet)")
        tmp.replace(f)
    with pytest.raises(DatasetError, match="no title item ids in its provenance"):
        load_qa_dataset(old, did, "vectors")
    assert load_qa_dataset(toy_home["export"], did, "vectors").splits["train"]        # the export as written


def _tensors(ds) -> list:
    """Everything a loaded dataset holds, as comparable values."""
    out = [ds.images.numpy().tobytes(), ds.ctx.numpy().tobytes(), ds.ctx_len.numpy().tobytes(), ds.text_source]
    for name in sorted(ds.splits):
        for k, x in sorted(vars(ds.splits[name]).items()):
            out.append((name, k, np.asarray(x).tobytes() if isinstance(x, (np.ndarray, torch.Tensor)) else x))
    return out


def test_an_export_of_the_questions_vectors_loads_the_same_datasets(toy_home, tmp_path):
    """`mrqa export --with-vectors --vectors-of questions` keeps only the vectors the questions' models read:
    the photos and titles they show and their own and context-ablation recipes' own photos and steps. Every
    dataset of every task loads the same tensors from it as from an export of every vector of the splits, and
    a recipe no question reads leaves no vector in it; its card says which it is."""
    import duckdb
    from typer.testing import CliRunner

    from flows.cli import app
    ids = toy_home["ids"]
    lean = tmp_path / "lean"
    res = CliRunner().invoke(app, ["--no-prefect", "export", "--dataset", ",".join(sorted(ids.values())),
                                   "--with-vectors", "--vectors-of", "questions", "--out", str(lean)])
    assert res.exit_code == 0, res.output
    alone = CliRunner().invoke(app, ["--no-prefect", "export", "--dataset", sorted(ids.values())[0], "--vectors-of",
                                     "questions", "--out", str(tmp_path / "no-vectors")])
    assert alone.exit_code != 0 and "give --with-vectors too" in alone.output and not (tmp_path / "no-vectors").exists()
    assert {d.split("-")[0] for d in ids.values()} == {"vc", "vcoh", "vord", "tc"}
    for did in sorted(ids.values()):
        full = load_qa_dataset(toy_home["export"], did, "vectors", max_steps=12)
        assert _tensors(load_qa_dataset(lean, did, "vectors", max_steps=12)) == _tensors(full), did
    assert "only those the questions' models read" in (lean / "README.md").read_text()
    assert "only those the questions' models read" not in (toy_home["export"] / "README.md").read_text()

    one = tmp_path / "one"                        # one dataset: the recipes its questions read, and no other
    did = sorted(d for (t, _), d in ids.items() if t == "visual_coherence")[0]
    res = CliRunner().invoke(app, ["--no-prefect", "export", "--dataset", did, "--with-vectors", "--vectors-of",
                                   "questions", "--out", str(one)])
    assert res.exit_code == 0, res.output
    q = f"read_parquet('{one}/questions/**/*.parquet', hive_partitioning = false)"
    read = {r[0] for r in duckdb.sql(f"SELECT recipe_id FROM {q} UNION SELECT context_recipe_id FROM "
                                     f"read_parquet('{one}/context_ablation.parquet')").fetchall()}
    shown = {r[0] for r in duckdb.sql(f"SELECT DISTINCT unnest(question) FROM {q} UNION "
                                      f"SELECT DISTINCT unnest(choice_list) FROM {q}").fetchall()}
    kept = duckdb.sql(f"SELECT image_id, recipe_id FROM read_parquet('{one}/image_vectors.parquet')").fetchall()
    every = duckdb.sql(f"SELECT image_id, recipe_id FROM read_parquet('{toy_home['export']}/image_vectors.parquet') "
                       "WHERE split IN (SELECT DISTINCT split FROM " + q + ")").fetchall()
    assert sorted(kept) == sorted((i, r) for i, r in every if r in read or i in shown)
    assert len(kept) < len(every) and {r for _, r in every} - read           # a recipe no question reads is gone
    text = duckdb.sql(f"SELECT DISTINCT recipe_id FROM read_parquet('{one}/text_vectors.parquet')").fetchall()
    assert {r for (r,) in text} == read
    assert _tensors(load_qa_dataset(one, did, "vectors", max_steps=12)) == _tensors(
        load_qa_dataset(toy_home["export"], did, "vectors", max_steps=12))
