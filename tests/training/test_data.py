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
