"""The words encoder (text only) and a home without photos end to end: fit, embed, generate, export, read.

The corpus plants what a reader needs: each step's title names an action on an ingredient ("Whisk the
eggs") and its body says it with other words around them, and no two steps of a recipe share the action
or the ingredient, so a title is tied to its own body by their words alone."""
from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from etl.load import load_recipe
from etl.records import RecipeRecord, StepRecord

VERBS = {"whisk": "bowl", "chop": "knife", "bake": "oven", "fry": "pan", "boil": "pot", "knead": "board",
         "grate": "grater", "roast": "tray", "slice": "blade", "steam": "basket"}
THINGS = ("eggs", "onions", "dough", "potatoes", "carrots", "chicken", "cheese", "rice", "apples", "garlic")
FILLER = ("gently", "slowly", "carefully", "well", "briefly", "evenly", "thoroughly", "lightly")
SPLITS = ("train",) * 6 + ("val", "val", "test", "test")


def load_text_only_recipes(con, n_recipes: int = 60, steps: int = 6, seed: int = 0) -> None:
    """`n_recipes` recipes with titled steps and no photos (as RecipeQA imported without --images)."""
    rng = np.random.default_rng(seed)
    verbs = list(VERBS)
    for r in range(n_recipes):
        vs = rng.permutation(len(verbs))[:steps]
        ts = rng.permutation(len(THINGS))[:steps]
        body_steps = [StepRecord(0, "Intro", "A dish for a weeknight supper with family and friends.")]
        for s, (v, t) in enumerate(zip(vs, ts), start=1):
            verb, thing = verbs[v], THINGS[t]
            fill = FILLER[int(rng.integers(len(FILLER)))]
            body_steps.append(StepRecord(s, f"{verb.capitalize()} the {thing}",
                                         f"Use the {VERBS[verb]} to {verb} the {thing} {fill}, "
                                         f"about {int(rng.integers(2, 9))} minutes, then set the {thing} aside."))
        rid = f"Text-Recipe-{r}"
        load_recipe(con, RecipeRecord(rid, f"https://example.test/{rid}/", f"Text recipe {r}", category="cooking",
                                      steps=body_steps), source="recipeqa", split=SPLITS[r % len(SPLITS)])


@pytest.fixture
def text_home(paths, con):
    from flows.cli import app
    load_text_only_recipes(con)
    con.close()
    res = CliRunner().invoke(app, ["--no-prefect", "clean", "--workers", "1"])
    assert res.exit_code == 0, res.output
    return paths


def test_words_encoder_ties_each_title_to_its_body_and_is_deterministic(text_home):
    from etl.warehouse import connect
    from features.embed.encoders import EncoderUnavailable, load_encoder
    from features.embed.words_encoder import WordsConfig, WordsEncoder, fit_words_encoder
    con = connect(text_home)
    try:
        first = fit_words_encoder(con, text_home, WordsConfig(dim=16))
        m = first["metrics"]
        assert m["eval_split"] == "val" and m["n_title_body_pairs"] == 12 * 7
        # the planted link: a title finds its own body among its recipe's 7 steps (chance ~0.14)
        assert m["title_body_in_recipe_r@1"] >= 0.9 > 3 * m["chance_in_recipe_r@1"]
        assert m["title_body_r@10"] > 3 * m["chance_title_body_r@10"]
        enc = load_encoder(con, first["encoder_id"], paths=text_home)
        assert isinstance(enc, WordsEncoder) and enc.dim == 16
        texts = ["Whisk the eggs", "Use the bowl to whisk the eggs gently", "no known word here", ""]
        v = enc.encode_texts(texts)
        assert v.shape == (4, 16) and v.dtype == np.float32
        assert np.allclose(np.linalg.norm(v[:3], axis=1), 1.0, atol=1e-5)
        with pytest.raises(EncoderUnavailable, match="no image tower"):
            enc.encode_image_tensors(None)
        # fitted again on the same texts: the same id and the same vectors, byte for byte
        again = fit_words_encoder(con, text_home, WordsConfig(dim=16))
        assert again["encoder_id"] == first["encoder_id"]
        assert load_encoder(con, again["encoder_id"], paths=text_home).encode_texts(texts).tobytes() == v.tobytes()
        # another config is another encoder
        assert fit_words_encoder(con, text_home, WordsConfig(dim=8))["encoder_id"] != first["encoder_id"]
        row = con.execute("SELECT kind, dim, train_split FROM encoders WHERE encoder_id = ?",
                          [first["encoder_id"]]).fetchall()
        assert row == [("words", 16, "train")]
        # files cut short or out of step with each other: one error that says to fit it again, not a traceback
        from pathlib import Path
        folder = Path(first["dir"])
        weights, vocab = (folder / "words.safetensors").read_bytes(), (folder / "vocabulary.json").read_text()
        for name, broken in (("words.safetensors", weights[:500]), ("vocabulary.json", vocab[:40]),
                             ("vocabulary.json", json.dumps(json.loads(vocab)[:-1]))):
            (folder / name).write_bytes(broken if isinstance(broken, bytes) else broken.encode())
            with pytest.raises(EncoderUnavailable, match="fit it again with `mrqa encoder words`"):
                load_encoder(con, first["encoder_id"], paths=text_home)
            (folder / "words.safetensors").write_bytes(weights)
            (folder / "vocabulary.json").write_text(vocab)
        assert load_encoder(con, first["encoder_id"], paths=text_home).encode_texts(texts).tobytes() == v.tobytes()
        # the default encoder (no --encoder): a words encoder only when no encoder with an image tower exists
        from features.embed.encoders import latest_encoder_id, register_encoder
        assert con.execute("SELECT kind FROM encoders WHERE encoder_id = ?",
                           [latest_encoder_id(con)]).fetchall() == [("words",)]
        clip = register_encoder(con, {"encoder_id": "mrqa-tiny-clip-000000000000-00000000", "kind": "trained",
                                      "model_name": "mrqa-tiny-clip", "dim": 128, "weights_sha256": "0" * 64,
                                      "preprocess_sha256": "0" * 64,
                                      "created_at": "2000-01-01 00:00:00"})    # older than the words encoders
        assert latest_encoder_id(con) == clip
    finally:
        con.close()


def test_words_encoder_refuses_a_split_without_text(text_home):
    from flows.cli import app
    res = CliRunner().invoke(app, ["--no-prefect", "encoder", "words", "--split", "nosuch"])
    assert res.exit_code != 0
    assert "0 such text(s)" in res.output and "--split" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(app, ["--no-prefect", "encoder", "words", "--dim", "0"])
    assert res.exit_code != 0 and "--dim" in res.output


def test_a_home_without_photos_makes_textual_cloze_that_readers_read_from_the_bodies(text_home, tmp_path):
    """embed writes step-text vectors only; generate --all makes the textual cloze settings and leaves the
    visual ones out (a visual setting alone is refused in one line); the export carries no image vectors;
    the trainer's textual cloze reads each step's body vector where a home with photos reads its photos."""
    from etl.warehouse import connect
    from features.vectors.store import FeatureStore
    from flows.cli import app
    run = CliRunner()
    res = run.invoke(app, ["--no-prefect", "encoder", "words", "--dim", "16"])
    assert res.exit_code == 0, res.output
    enc = json.loads(res.output)["encoder_id"]
    res = run.invoke(app, ["--no-prefect", "embed", "--encoder", enc])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output[res.output.index("{"):])
    assert out["images_encoded"] == 0 and out["texts_encoded"] == 60 * 7 * 2
    assert out["neighbours"].startswith("none")
    store = FeatureStore(text_home.lance)
    assert store.find_table("image_vectors", enc) is None
    res = run.invoke(app, ["--no-prefect", "encoder", "eval", "--encoder", enc])     # text retrieval, not images
    assert res.exit_code == 0 and "84 val (title, body) pairs" in res.output, res.output
    assert "among its recipe's steps R@1 1.000" in res.output, res.output

    res = run.invoke(app, ["--no-prefect", "generate", "--task", "visual_cloze", "--knobs", "0-1-0", "--encoder", enc])
    assert res.exit_code != 0 and "words encoder" in res.output and "Traceback" not in res.output
    res = run.invoke(app, ["--no-prefect", "generate", "--all", "--encoder", enc])
    assert res.exit_code == 0, res.output
    con = connect(text_home)
    try:
        tasks = {t for t, in con.execute("SELECT DISTINCT task FROM datasets WHERE encoder_id = ?", [enc]).fetchall()}
        assert tasks == {"textual_cloze"}
        did = con.execute("SELECT dataset_id FROM datasets WHERE encoder_id = ? AND setting = '0-1-0'",
                          [enc]).fetchall()[0][0]
        n = con.execute("SELECT count(*) FROM questions WHERE dataset_id = ?", [did]).fetchall()[0][0]
        assert n > 50
    finally:
        con.close()

    export = tmp_path / "export"
    res = run.invoke(app, ["--no-prefect", "export", "--dataset", did, "--with-vectors", "--out", str(export)])
    assert res.exit_code == 0, res.output
    assert (export / "text_vectors.parquet").exists() and not (export / "image_vectors.parquet").exists()

    from training.data import load_qa_dataset
    ds = load_qa_dataset(export, did, text_features="vectors")
    assert ds.text_source == "bodies"
    ids, mat = store.text_vectors(enc, "body")
    body = dict(zip(ids, np.asarray(mat, np.float32)))
    # each recipe's context row s is its step s's body vector (the intro's included), zeros past its steps
    import duckdb

    from training.data import _questions
    rid = sorted({r["recipe_id"] for r in _questions(duckdb.connect(), export, did)})[0]
    ctx = ds.ctx[0].numpy()
    for s in range(7):
        assert np.allclose(ctx[s], body[f"{rid}_{s}_body"])
    assert not ctx[7:].any() and int(ds.ctx_len[0]) == 7


def test_real_recipeqa_text_words_encoder_and_adversarial_filtering(paths, shared_fixtures):
    """On the 538 real RecipeQA validation records (text only, re-split by recipe id): the words encoder
    finds a real title's own body among its recipe's steps well above chance, and in its space the learned
    question-only probe reads a plain textual cloze setting far above chance and its AF variant near it."""
    from etl.warehouse import connect
    from features.diagnostics.bias import learned_probe_rows
    from flows.cli import app
    run = CliRunner()
    for args in (["ingest", "recipeqa", str(shared_fixtures / "recipeqa" / "val_dev.json"), "--resplit", "0.6,0.2,0.2"],
                 ["clean", "--workers", "1"], ["encoder", "words"]):
        res = run.invoke(app, ["--no-prefect", *args])
        assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    m, enc = out["metrics"], out["encoder_id"]
    assert m["n_title_body_pairs"] > 200
    assert m["title_body_in_recipe_r@1"] > 2 * m["chance_in_recipe_r@1"], m
    for args in (["embed", "--encoder", enc],
                 ["generate", "--task", "textual_cloze", "--knobs", "0-1-0", "--encoder", enc],
                 ["generate", "--task", "textual_cloze", "--knobs", "0-1-0-af", "--encoder", enc]):
        res = run.invoke(app, ["--no-prefect", *args])
        assert res.exit_code == 0, res.output
    con = connect(paths)
    try:
        ids = dict(con.execute("SELECT setting, dataset_id FROM datasets WHERE encoder_id = ?", [enc]).fetchall())
        probe = learned_probe_rows(con, [ids["0-1-0"], ids["0-1-0-af"]], lance_uri=paths.lance)
    finally:
        con.close()
    plain, af = probe[ids["0-1-0"]]["qo_acc"], probe[ids["0-1-0-af"]]["qo_acc"]
    assert plain > 0.45 and af < 0.32, (plain, af)


@pytest.mark.slow      # the whole pipeline on a text-only home (~6 min)
def test_the_pipeline_runs_a_home_without_photos_through_the_words_encoder(text_home):
    """`mrqa pipeline --train --reading-folds split` on a home whose only encoder is a words encoder: embed,
    generate (textual cloze only), the pooled step, the report and the train stage's checks all complete, every
    dataset is a textual cloze one in the words encoder's space, and each recorded reading check holds every
    split out in turn."""
    from etl.warehouse import connect
    from flows.cli import app
    run = CliRunner()
    res = run.invoke(app, ["--no-prefect", "encoder", "words", "--dim", "16"])
    assert res.exit_code == 0, res.output
    enc = json.loads(res.output)["encoder_id"]
    res = run.invoke(app, ["pipeline", "--train", "--reading-folds", "split"])
    assert res.exit_code == 0, res.output
    out, _ = json.JSONDecoder().raw_decode(res.output[res.output.index("{"):])
    assert out["failed"] is None
    assert [(s["stage"], s["status"]) for s in out["stages"]] == [
        ("clean", "completed"), ("embed", "completed"), ("generate", "completed"), ("competence", "completed"),
        ("report", "completed"), ("train", "completed")]
    con = connect(text_home)
    try:
        tasks = set(con.execute("SELECT DISTINCT task, encoder_id FROM datasets").fetchall())
        checks = con.execute("SELECT c.n_test, c.folds, (SELECT count(*) FROM questions q WHERE q.dataset_id = "
                             "c.dataset_id) FROM reading_checks c").fetchall()
    finally:
        con.close()
    assert tasks == {("textual_cloze", enc)}
    assert checks and all(folds == "split" and n == total for n, folds, total in checks)
