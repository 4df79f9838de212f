"""GM3C end to end on CPU in seconds (open_clip-style `main([...])`), checkpoint round trip and
clear errors for corrupted / mismatched checkpoints, every scorer on every visual task."""
from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest
import torch

from training.config import SCORERS, ModelConfig, TrainConfig
from training.train import CheckpointError, build_model, evaluate, evaluate_run, fit, load_checkpoint


def test_tiny_run_trains_and_beats_chance(trained, toy_home):
    m = trained
    assert m["epochs_run"] == 12 and len(m["history"]) == 12
    assert m["history"][-1]["train_acc"] > m["history"][0]["train_acc"] + 0.2      # it learns
    # held-out questions (val + test), scored from the saved checkpoint
    res = [evaluate_run(m["run_id"], toy_home["export"], m["dataset_id"], split=s) for s in ("val", "test")]
    n = sum(r["n"] for r in res)
    acc = sum(r["accuracy"] * r["n"] for r in res) / n
    assert n >= 50 and acc > 0.40, (acc, n)          # chance 0.25; P(acc > 0.40 | chance) < 0.01 at n >= 50
    f = m["faithfulness"]
    assert f["uniform_share"] > 0 and 0 <= f["attention_on_placeholder_step"] <= 1
    assert 0 <= f["rollout_on_placeholder_step"] <= 1 and f["rollout_ratio_vs_uniform"] > 0
    ab = m["context_ablation"]
    assert 0 <= ab["foreign_context_acc"] <= 1 and ab["kept_own_context"] == 0
    assert abs(ab["drop"] - (m["test_acc"] - ab["foreign_context_acc"])) < 1e-4
    from etl.warehouse import connect
    con = connect()
    row = con.execute("SELECT scorer, image_encoder, metrics FROM runs WHERE run_id = ?", [m["run_id"]]).fetchall()
    con.close()
    assert row and row[0][0] == "transformer" and row[0][1] == "synthetic-enc-0001"
    assert json.loads(row[0][2])["test_acc"] == m["test_acc"]
    on_disk = json.loads((toy_home["home"] / "models" / "runs" / m["run_id"] / "metrics.json").read_text())
    assert on_disk["dataset_hash"] == m["dataset_hash"]


def test_checkpoint_round_trip_gives_same_predictions(trained, toy_home):
    from training.data import load_qa_dataset
    model, ck = load_checkpoint(trained["checkpoint"])
    assert ck["meta"]["encoder_id"] == "synthetic-enc-0001" and ck["model_args"]["scorer"] == "transformer"
    tc = ck["train_config"]
    ds = load_qa_dataset(toy_home["export"], trained["dataset_id"], ck["meta"]["text_features"],
                         vocab=ck["meta"]["vocab"], max_steps=tc["max_steps_per_recipe"],
                         max_tokens=tc["max_tokens_per_step"])
    a = evaluate(model, ds, "test", torch.device("cpu"))
    b = evaluate_run(trained["run_id"], toy_home["export"], trained["dataset_id"], split="test")
    assert a["predictions"] == b["predictions"] and a["accuracy"] == pytest.approx(trained["test_acc"])


def _edited(trained, tmp_path, **meta):
    ck = torch.load(trained["checkpoint"], weights_only=False)
    ck["meta"].update(meta)
    p = tmp_path / "ckpt.pt"
    torch.save(ck, p)
    return p


def test_mismatched_or_corrupted_checkpoint_is_a_clear_error(trained, toy_home, tmp_path):
    exp, did = toy_home["export"], trained["dataset_id"]
    with pytest.raises(CheckpointError, match="encoder other-encoder"):
        evaluate_run(str(_edited(trained, tmp_path, encoder_id="other-encoder")), exp, did)
    with pytest.raises(CheckpointError, match="changed since this run was trained"):
        evaluate_run(str(_edited(trained, tmp_path, dataset_hash="0" * 64)), exp, did)
    other = toy_home["ids"][("visual_cloze", "0-0-0")]
    with pytest.raises(CheckpointError, match="--cross-dataset"):
        evaluate_run(trained["run_id"], exp, other)
    assert evaluate_run(trained["run_id"], exp, other, cross_dataset=True)["n"] > 0
    with pytest.raises(CheckpointError, match="task visual_cloze"):
        evaluate_run(trained["run_id"], exp, toy_home["ids"][("visual_ordering", "0-0-0")], cross_dataset=True)
    bad = tmp_path / "corrupt.pt"
    shutil.copy(trained["checkpoint"], bad)
    bad.write_bytes(bad.read_bytes()[: bad.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        load_checkpoint(bad)
    with pytest.raises(CheckpointError, match="no run"):
        evaluate_run("no-such-run", exp, did)
    # a run trained before the readers' slot features: 28 alignment features per photo, now more
    ck = torch.load(trained["checkpoint"], weights_only=False)
    assert ck["model_args"]["align"]
    for k in ("align_head.0.weight", "query.align.weight"):
        ck["state_dict"][k] = ck["state_dict"][k][..., :28].clone()
    old = tmp_path / "before-slot.pt"
    torch.save(ck, old)
    with pytest.raises(CheckpointError, match="28 step-alignment features per photo.*train the run again"):
        load_checkpoint(old)


@pytest.mark.parametrize("task", ["visual_cloze", "visual_coherence", "visual_ordering"])
def test_every_scorer_trains_on_every_task(toy_home, task):
    from training.data import load_qa_dataset
    ds = load_qa_dataset(toy_home["export"], toy_home["ids"][(task, "0-0-0")], "tokens",
                         max_steps=8, max_tokens=8, min_token_freq=1, max_train_questions=32)
    cfg = replace(TrainConfig.tiny(), max_epochs=1, batch_size=16)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)                     # tiny matrices: one thread is fastest on a busy CPU
    try:
        _train_each_scorer(ds, cfg)
    finally:
        torch.set_num_threads(threads)


def _train_each_scorer(ds, cfg):
    for scorer in SCORERS:
        torch.manual_seed(0)
        model = build_model(ds, ModelConfig.tiny(scorer=scorer))
        res = fit(model, ds, cfg, torch.device("cpu"))
        assert res["epochs_run"] == 1 and np.isfinite(res["history"][0]["loss"])
        out = model(ds.batch("val", np.arange(3)))
        assert out.shape == (3, 4) and torch.isfinite(out).all()


def test_cli_evaluate_writes_recipeqa_predictions_and_fails_cleanly(trained, toy_home, tmp_path):
    from typer.testing import CliRunner

    from flows.cli import app
    out = tmp_path / "pred.json"
    r = CliRunner().invoke(app, ["evaluate", "--run", trained["run_id"], "--dataset", trained["dataset_id"],
                                 "--export", str(toy_home["export"]), "--predictions", str(out)])
    assert r.exit_code == 0, r.output
    pred = json.loads(out.read_text())
    assert list(pred) == ["visual_cloze"] and set(pred["visual_cloze"]) <= {0, 1, 2, 3}
    r = CliRunner().invoke(app, ["evaluate", "--run", "nope", "--dataset", trained["dataset_id"],
                                 "--export", str(toy_home["export"])])
    assert r.exit_code == 2 and "no run" in r.output


def test_transformer_inputs_are_not_drowned_by_position_tables_at_init():
    """At init the position + segment embeddings must be small next to the projected step/query
    features; with nn.Embedding's N(0, 1) default they were ~3x larger and the scorer sat at chance."""
    from training.model import TransformerScorer
    torch.manual_seed(0)
    cfg = ModelConfig.small(scorer="transformer")
    sc = TransformerScorer(cfg)
    feats = torch.tanh(torch.randn(64, 10, 2 * cfg.lstm_hidden))      # BiLSTM outputs are in (-1, 1)
    content = sc.inp(feats).std().item()
    assert sc.pos.weight.std().item() < content / 5
    assert sc.seg.weight.std().item() < content / 5


def test_attention_rollout_of_the_transformer_scorer():
    """Rollout is 0.5 W + 0.5 I per layer, multiplied up: one layer gives half the CLS -> step
    attention of the last layer; rows stay distributions; padded steps get nothing."""
    from training.model import TransformerScorer, attention_rollout
    torch.manual_seed(1)
    h2 = 2 * ModelConfig.small().lstm_hidden
    c, q = torch.randn(3, 6, h2), torch.randn(3, 4, h2)
    c_mask = torch.ones(3, 6, dtype=torch.bool)
    c_mask[0, 4:] = False                                              # a recipe with 4 steps
    q_mask = torch.ones(3, 4, dtype=torch.bool)
    one = TransformerScorer(ModelConfig.small(scorer="transformer", n_layers=1, dropout=0.0)).eval()
    _, att = one(c, c_mask, q, q_mask, return_attention=True)
    assert torch.allclose(att["rollout"], 0.5 * att["last"], atol=1e-6)
    deep = TransformerScorer(ModelConfig.small(scorer="transformer", n_layers=3, dropout=0.0)).eval()
    score, att = deep(c, c_mask, q, q_mask, return_attention=True)
    assert torch.allclose(score, deep(c, c_mask, q, q_mask))          # weights don't change scores
    assert float(att["rollout"][0, 4:].detach().abs().max()) == 0.0
    assert float(att["last"][0, 4:].detach().abs().max()) == 0.0
    ws = [torch.softmax(torch.randn(2, 5, 5), -1) for _ in range(3)]
    r = attention_rollout(ws)
    assert torch.allclose(r.sum(-1), torch.ones(2, 5), atol=1e-5)
    eye = torch.eye(5)
    want = (0.5 * ws[2] + 0.5 * eye) @ (0.5 * ws[1] + 0.5 * eye) @ (0.5 * ws[0] + 0.5 * eye)
    assert torch.allclose(r, want, atol=1e-6)


def test_foreign_context_rows_give_every_question_another_recipe():
    from training.ablation import foreign_context_rows
    rng = np.random.default_rng(3)
    rows = rng.integers(0, 40, 500)
    out, own = foreign_context_rows(rows)
    assert own == 0 and not (out == rows).any()
    assert sorted(out.tolist()) == sorted(rows.tolist())        # a permutation of the recipes' rows
    assert np.array_equal(foreign_context_rows(rows)[0], out)    # deterministic
    lopsided = np.array([0] * 6 + [1, 2])                          # recipe 0 has 6 of 8 questions
    out, own = foreign_context_rows(lopsided)
    assert own == int((out == lopsided).sum()) == 4               # no derangement exists; reported


def test_context_ablation_changes_the_context_and_nothing_else(toy_home):
    """A context-free scorer keeps every prediction with another recipe's steps; a scorer that reads
    the context (untrained BiDAF) changes some; the trained tiny run records the figure."""
    from training.data import load_qa_dataset
    from training.train import accuracy_with_foreign_context
    ds = load_qa_dataset(toy_home["export"], toy_home["ids"][("visual_cloze", "0-0-0")], "tokens",
                         max_steps=8, max_tokens=8, min_token_freq=1)
    cpu = torch.device("cpu")
    torch.manual_seed(0)
    question_only = build_model(ds, ModelConfig.tiny(scorer="question_only"))
    assert accuracy_with_foreign_context(question_only, ds, "test", cpu)["accuracy"] == \
        evaluate(question_only, ds, "test", cpu)["accuracy"]
    bidaf = build_model(ds, ModelConfig.tiny(scorer="bidaf")).eval()
    from training.ablation import foreign_context_rows
    idx = np.arange(len(ds.splits["test"]))
    rows, _ = foreign_context_rows(ds.splits["test"].recipe_row)
    with torch.no_grad():
        own = bidaf(ds.batch("test", idx))
        other = bidaf(ds.batch("test", idx, ctx_rows=rows))
    assert not torch.allclose(own, other)
    b1, b2 = ds.batch("test", idx), ds.batch("test", idx, ctx_rows=rows)
    for k in ("query", "query_mask", "answer", "target_ctx"):
        assert torch.equal(b1[k], b2[k]), k


def test_cli_train_model_size_flags_reach_the_checkpoint_and_bad_ones_are_refused(toy_home):
    from typer.testing import CliRunner

    from flows.cli import app
    did = toy_home["ids"][("visual_cloze", "0-0-0")]
    args = ["train", "--dataset", did, "--export", str(toy_home["export"]), "--scorer", "transformer", "--tiny",
            "--text-features", "vectors", "--max-epochs", "1", "--threads", "1"]
    r = CliRunner().invoke(app, args + ["--layers", "3", "--width", "24", "--lr", "0.0002"])
    assert r.exit_code == 0, r.output
    run_id = json.loads(r.output[r.output.index("{"):])["run_id"]
    from training.train import find_checkpoint
    model, ck = load_checkpoint(find_checkpoint(run_id))
    assert (model.cfg.n_layers, model.cfg.d_model) == (3, 24) and len(model.scorer.blocks) == 3
    assert ck["train_config"]["lr"] == 0.0002
    for bad, msg in ((["--layers", "0"], "--layers must be >= 1"), (["--width", "25"], "multiple of n_heads"),
                     (["--lr", "-1"], "--lr must be > 0")):
        r = CliRunner().invoke(app, args + bad)
        assert r.exit_code == 2 and msg in r.output, r.output


@pytest.mark.parametrize("scorer", ["question_only", "transformer"])
def test_adam_foreach_step_ends_at_the_weights_of_the_per_tensor_step(toy_home, scorer):
    """`fit` steps Adam with torch's foreach kernels on CPU too (faster, `mrqa bench train` prints by how much):
    it must train the same weights, byte for byte, as torch's per-tensor step, or every seeded run would
    move. The bench's own comparison says so too."""
    from training.bench import bench_train, throughput
    from training.config import resolve_configs
    from training.data import load_qa_dataset
    from training.train import set_seed
    mc, tc = resolve_configs("tiny", scorer=scorer, text_features="vectors", seed=0)
    ds = load_qa_dataset(toy_home["export"], toy_home["ids"][("visual_cloze", "0-0-0")], "vectors")
    each, one = {}, {}
    throughput(ds, mc, replace(tc, batch_size=8), 64, True, each)
    throughput(ds, mc, replace(tc, batch_size=8), 64, False, one)
    set_seed(tc.seed)                                   # the bench's start: the same seeded weights
    start = {k: v.clone() for k, v in build_model(ds, mc).state_dict().items()}
    assert each.keys() == one.keys() and all(torch.equal(each[k], one[k]) for k in each)
    assert any(not torch.equal(each[k], start[k]) for k in each if k in start)         # it did train
    lines = bench_train(ds, mc, tc, 64)
    assert any(line.startswith("Adam foreach") and line.endswith("same weights: True") for line in lines), lines
