"""The default encoder: trained on the train split only, deterministic, measurably better than chance;
real-weights registration and its errors."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from toy_kitchen import build_toy_warehouse

from etl.config import Paths
from etl.warehouse import connect
from features.embed.decode import image_items
from features.embed.encoders import (
    EncoderUnavailable,
    latest_encoder_id,
    list_encoders,
    load_encoder,
    register_pretrained_encoder,
    resolve_pretrained,
)
from features.embed.train_encoder import TrainConfig, evaluate_retrieval, load_manifest, train_encoder

# 32 px keeps the test fast on a busy 2-core machine; colours and shapes stay visible
CFG = TrainConfig(epochs=15, batch_size=30, lr=3e-3, warmup_steps=4, seed=7, eval_max_pairs=200,
                  image_size=32)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    paths = Paths.from_env(tmp_path_factory.mktemp("enc") / "home").ensure()
    con = connect(paths)
    build_toy_warehouse(con, paths, n_recipes=30, steps=5, images_per_step=1, seed=1)
    res = train_encoder(con, paths, CFG)
    yield paths, con, res
    con.close()


def test_trained_encoder_is_registered_with_checkpoint_and_config(trained):
    paths, con, res = trained
    assert latest_encoder_id(con) == res["encoder_id"]
    row = list_encoders(con)[-1]
    assert row["kind"] == "trained" and row["train_split"] == "train" and row["dim"] == 128
    assert res["encoder_id"].startswith("mrqa-tiny-clip-") and row["weights_sha256"][:12] in res["encoder_id"]
    d = paths.models / "encoders" / res["encoder_id"]
    assert (d / "model.safetensors").is_file()
    cfg = json.loads((d / "open_clip_config.json").read_text())
    assert cfg["model_cfg"]["vision_cfg"]["image_size"] == 32
    assert not row["checkpoint_path"].startswith("/")      # relative to MRQA_HOME
    # the instruction set the CPU kernels chose is recorded: the same seed trains other weights on a CPU
    # with another one (AVX2 against AVX-512), so a user can tell why their datasets differ from ours
    built = (row["config"] if isinstance(row["config"], dict) else json.loads(row["config"]))["platform"]
    assert built["cpu_capability"] == torch.backends.cpu.get_cpu_capability() and built["torch"] == torch.__version__
    assert json.loads((d / "train_manifest.json").read_text())["platform"] == built


def test_training_saw_no_val_or_test_image(trained):
    paths, con, res = trained
    manifest = load_manifest(paths, list_encoders(con)[-1]["checkpoint_path"])
    seen = set(manifest["train_image_ids"])
    heldout = {r[0] for r in con.execute(
        "SELECT image_id FROM images JOIN recipes USING (recipe_id) WHERE split <> 'train'").fetchall()}
    train = {r[0] for r in con.execute(
        "SELECT image_id FROM images JOIN recipes USING (recipe_id) WHERE split = 'train'").fetchall()}
    assert heldout and seen
    assert seen.isdisjoint(heldout)
    assert seen == train                                       # every readable train image was used
    splits = {r[0] for r in con.execute("SELECT DISTINCT split FROM recipes WHERE list_contains(?, recipe_id)",
                                        [manifest["train_recipe_ids"]]).fetchall()}
    assert splits == {"train"}
    # the pixel cache holds train images only (keyed by sha256)
    cached = set(json.loads(next((paths.models / "pixel_cache").glob("32px-*/keys.json")).read_text()))
    heldout_sha = {r[0] for r in con.execute("SELECT sha256 FROM images JOIN recipes USING (recipe_id) "
                                             "WHERE split <> 'train'").fetchall()}
    assert cached and cached.isdisjoint(heldout_sha)


def test_encoder_learns_image_text_link_far_above_chance(trained):
    _, _, res = trained
    m = res["metrics"]
    assert m["n_pairs"] >= 20
    assert m["i2t_r@10"] > 2 * m["chance_r@10"] and m["t2i_r@10"] > 2 * m["chance_r@10"]
    assert m["i2t_r@1"] > 3 * m["chance_r@1"]
    assert m["train_loss_per_epoch"][-1] < m["train_loss_per_epoch"][0]


def test_reloaded_encoder_gives_same_vectors_and_metrics(trained):
    paths, con, res = trained
    enc = load_encoder(con, res["encoder_id"], paths=paths)
    assert enc.device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    m = evaluate_retrieval(enc, image_items(con, paths, split="val"), max_pairs=200, seed=CFG.seed)
    for key in ("i2t_r@1", "t2i_r@10"):
        assert m[key] == pytest.approx(res["metrics"][key], abs=0.02)
    v = enc.encode_texts(["Add the red circle", "Add the blue square"])
    assert v.shape == (2, 128) and np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-4)


def test_training_is_deterministic(trained, tmp_path):
    paths, con, res = trained
    quick = TrainConfig(**{**CFG.__dict__, "epochs": 1, "max_train_pairs": 40, "eval_max_pairs": 10})
    again, again2 = train_encoder(con, paths, quick), train_encoder(con, paths, quick)
    assert again["encoder_id"] == again2["encoder_id"] != res["encoder_id"]


@pytest.mark.parametrize("losses", [{}, {"recipe_weight": 0.25, "twins": "mask"}, {"hard_share": 0.5}],
                         ids=["clip", "clip+recipe+twins", "look-alike-batches"])
def test_two_tower_threads_give_the_same_weights_bit_for_bit(trained, losses):
    """The text tower on its own thread (the default on CPU) changes nothing but the time: every op
    runs as in the plain forward/backward, so the weights (and the id named by their hash) are equal,
    with the CLIP loss alone (the default), with the recipe term and masked text twins, and with the
    second epoch's look-alike batches (mined with the image tower between epochs)."""
    paths, con, _ = trained
    quick = {**CFG.__dict__, "epochs": 2, "max_train_pairs": 60, "eval_max_pairs": 10, **losses}
    threaded = train_encoder(con, paths, TrainConfig(**{**quick, "tower_threads": True}))
    plain = train_encoder(con, paths, TrainConfig(**{**quick, "tower_threads": False}))
    assert threaded["encoder_id"] == plain["encoder_id"]
    assert threaded["metrics"]["train_loss_per_epoch"] == plain["metrics"]["train_loss_per_epoch"]
    d = paths.models / "encoders" / plain["encoder_id"]
    assert json.loads((d / "train_manifest.json").read_text())["config"]["tower_threads"] is False


def test_encoder_training_bench_compares_the_modes_and_leaves_the_home_as_it_was(trained):
    from features.embed.bench import bench_encoder_training
    paths, con, _ = trained
    rows_before = list_encoders(con)
    dirs_before = sorted(p.name for p in (paths.models / "encoders").iterdir())
    out = bench_encoder_training(con, paths, epochs=1, repeats=1, seed=CFG.seed)
    assert out["same_weights"] is True and len(out["encoder_ids"]) == 1
    assert out["encoder_ids"][0] not in {r["encoder_id"] for r in rows_before}
    assert len(out["two_threads_s"]) == len(out["one_thread_s"]) == 1 and out["one_thread_vs_two_threads"] > 0
    assert list_encoders(con) == rows_before                         # its encoders removed again
    assert sorted(p.name for p in (paths.models / "encoders").iterdir()) == dirs_before
    # an encoder of the home with the bench's weights: its row, date and manifest are left as they were
    own = train_encoder(con, paths, TrainConfig(epochs=1, seed=3, eval_max_pairs=10))
    rows_before = list_encoders(con)
    manifest = (paths.models / "encoders" / own["encoder_id"] / "train_manifest.json").read_bytes()
    out = bench_encoder_training(con, paths, epochs=1, repeats=1, seed=3)
    assert out["encoder_ids"] == [own["encoder_id"]]
    assert list_encoders(con) == rows_before and latest_encoder_id(con) == own["encoder_id"]
    assert (paths.models / "encoders" / own["encoder_id"] / "train_manifest.json").read_bytes() == manifest


def test_real_weights_from_a_local_file(trained):
    paths, con, res = trained
    ckpt = paths.models / "encoders" / res["encoder_id"] / "model.safetensors"
    eid = register_pretrained_encoder(con, "mrqa-tiny-clip", str(ckpt), paths=paths)
    row = [r for r in list_encoders(con) if r["encoder_id"] == eid][0]
    assert row["kind"] == "pretrained" and row["pretrained"] == str(ckpt)
    assert eid.split("-")[-2] == res["encoder_id"].split("-")[-2]   # same weights hash
    enc = load_encoder(con, eid, paths=paths)
    assert enc.encode_texts(["x"]).shape == (1, 128)


def test_unavailable_weights_give_a_clear_error(monkeypatch, tmp_path, con):
    import huggingface_hub.constants as hc
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(EncoderUnavailable, match="not available.*--pretrained /path"):
        resolve_pretrained("ViT-B-32", "openai")
    with pytest.raises(EncoderUnavailable, match="neither an existing file nor a known tag"):
        resolve_pretrained("ViT-B-32", str(tmp_path / "nope.safetensors"))
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not weights")
    with pytest.raises(EncoderUnavailable, match="could not load"):
        register_pretrained_encoder(con, "mrqa-tiny-clip", str(bad))
    with pytest.raises(EncoderUnavailable, match="no encoder registered"):
        load_encoder(con)


def test_cli_reports_unavailable_weights_without_traceback(monkeypatch, tmp_path, paths):
    import huggingface_hub.constants as hc
    from typer.testing import CliRunner

    from flows.cli import app
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    res = CliRunner().invoke(app, ["encoder", "add", "--clip-model", "ViT-B-32", "--pretrained", "openai"])
    assert res.exit_code == 2 and "not available" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(app, ["encoder", "eval"])
    assert res.exit_code == 2 and "no encoder registered" in res.output


# ----------------------------------------------------------------------------- recipe term, batching, cache

def test_recipe_batches_cover_every_step_once_and_keep_recipe_positives():
    from features.embed.train_encoder import recipe_batches
    step_recipe = np.repeat(np.arange(20), [5, 6, 7, 8, 9] * 4)        # 20 recipes, 5..9 steps
    batches = recipe_batches(step_recipe, batch_size=32, per_recipe=4, rng=np.random.default_rng(3))
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(len(step_recipe)))      # each step exactly once
    assert all(len(b) <= 32 for b in batches)
    # most images have a same-recipe positive in their batch
    with_pos = sum(int((step_recipe[b] == step_recipe[i]).sum() > 1) for b in batches for i in b)
    assert with_pos / len(flat) > 0.85
    again = recipe_batches(step_recipe, 32, 4, np.random.default_rng(3))
    assert all(np.array_equal(a, b) for a, b in zip(batches, again))   # seeded


def test_neighbour_batches_gather_look_alike_steps_and_cover_each_step_once():
    from features.embed.train_encoder import neighbour_batches
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(8, 16))
    cluster = np.repeat(np.arange(8), 16)                             # 8 look-alike groups of 16 steps
    vecs = centres[cluster] + 0.05 * rng.normal(size=(128, 16))
    steps = rng.permutation(128)[:112]                                # a subset, as with --hard-share
    batches = neighbour_batches(vecs, steps, 16, np.random.default_rng(1))
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == sorted(steps.tolist())            # each given step exactly once
    pure = np.mean([np.mean(cluster[b] == np.bincount(cluster[b]).argmax()) for b in batches])
    assert pure > 0.8                                                 # random batches: ~1/8
    again = neighbour_batches(vecs, steps, 16, np.random.default_rng(1))
    assert all(np.array_equal(a, b) for a, b in zip(batches, again))  # seeded


def test_clip_loss_soft_is_clip_loss_without_duplicates_and_spares_duplicate_texts():
    import open_clip

    from features.embed.train_encoder import clip_loss_soft
    g = torch.Generator().manual_seed(0)
    img = torch.nn.functional.normalize(torch.randn(6, 8, generator=g), dim=1)
    txt = torch.nn.functional.normalize(torch.randn(6, 8, generator=g), dim=1)
    scale = torch.tensor(10.0)
    tokens = torch.arange(6)[:, None].repeat(1, 4)                    # 6 distinct texts
    ref = open_clip.ClipLoss()(img, txt, scale)
    assert torch.allclose(clip_loss_soft(img, txt, scale, tokens), ref, atol=1e-6)
    # steps 0 and 1 share their text: matching image 0 to text 1 is no longer penalised
    dup = tokens.clone()
    dup[1] = dup[0]
    aligned = torch.nn.functional.normalize(txt + 0.0, dim=1)
    swapped_img = aligned.clone()
    swapped_img[[0, 1]] = aligned[[1, 0]]
    assert clip_loss_soft(swapped_img, aligned, scale, dup) < clip_loss_soft(swapped_img, aligned, scale, tokens)


def test_hard_choice_accuracy_separates_content_from_kitchen():
    from features.embed.train_encoder import hard_choice_accuracy
    rng = np.random.default_rng(0)
    recipe = np.repeat(np.arange(40), 4)                              # 40 recipes of 4 steps
    author = recipe // 8                                              # 5 authors, one kitchen each
    kitchen = rng.normal(size=(5, 32))[author]
    content = rng.normal(size=(len(recipe), 32))                      # the step's own content
    same = torch.from_numpy(recipe[:, None] == recipe[None, :])
    unit = lambda a: torch.nn.functional.normalize(torch.from_numpy(a).float(), dim=1)
    img = unit(kitchen + content)
    # texts that only know the kitchen: random choices (mostly other kitchens) are easy, look-alike
    # choices (the same kitchen) are not
    m = hard_choice_accuracy(img, unit(kitchen + 0.01 * rng.normal(size=kitchen.shape)), same)
    assert m["t2i_rand4"] > 0.6 and m["t2i_hard4"] < 0.4
    # texts that know the step's content: both are easy
    m2 = hard_choice_accuracy(img, unit(content), same)
    assert m2["t2i_hard4"] > 0.9 and m2["t2i_rand4"] > 0.9


def test_recipe_supcon_loss_prefers_grouped_features():
    from features.embed.train_encoder import recipe_supcon_loss
    labels = torch.tensor([0, 0, 1, 1, 2, 2])
    centres = torch.eye(3)
    grouped = torch.nn.functional.normalize(centres[labels] + 0.05 * torch.randn(6, 3), dim=1)
    mixed = grouped[torch.tensor([0, 2, 4, 1, 3, 5])]
    assert recipe_supcon_loss(grouped, labels, 0.1) < recipe_supcon_loss(mixed, labels, 0.1)
    assert float(recipe_supcon_loss(grouped, torch.arange(6), 0.1)) == 0.0   # no positives: no term


def test_used_rows_embedding_matches_the_full_table_and_writes_back():
    from features.embed.train_encoder import _UsedRowsEmbedding
    full = torch.nn.Embedding(50, 4)
    before = full.weight.detach().clone()
    used = torch.tensor([3, 7, 11])
    emb = _UsedRowsEmbedding(full, used)
    ids = torch.tensor([[3, 11, 7, 3]])
    assert torch.equal(emb(ids), full(ids))
    with torch.no_grad():
        emb.weight.add_(1.0)
    out = emb.write_back()
    assert out is full and torch.allclose(full.weight[used], before[used] + 1)
    unused = torch.ones(50, dtype=torch.bool)
    unused[used] = False
    assert torch.equal(full.weight[unused], before[unused])


def test_pixel_cache_decodes_once_and_matches_the_embed_preprocessing(trained, tmp_path):
    from PIL import Image

    from features.embed.decode import PixelCache
    paths, con, res = trained
    enc = load_encoder(con, res["encoder_id"], paths=paths)
    items = image_items(con, paths, split="val")[:12]
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(items[0].path.read_bytes()[:100])
    bad = [type(items[0])("x_0_0.jpg", broken, "x", 0, 0, "val", "f" * 64),
           type(items[0])("y_0_0.jpg", tmp_path / "missing.jpg", "y", 0, 0, "val", "e" * 64)]
    cache = PixelCache(tmp_path / "cache", enc.preprocess, 32)
    px, ok, stats = cache.pixels(items + bad)
    assert stats == {"decoded": 14, "cached": 0, "unreadable": 2} and ok == list(range(12))
    assert px.dtype == torch.uint8 and px.shape == (12, 32, 32, 3)
    px2, ok2, stats2 = PixelCache(tmp_path / "cache", enc.preprocess, 32).pixels(items)
    assert stats2["decoded"] == 0 and torch.equal(px, px2) and ok2 == ok
    with Image.open(items[5].path) as im:
        ref = enc.preprocess(im.convert("RGB"))
    assert torch.allclose(cache.model_input(px[5:6])[0], ref, atol=1e-5)
    assert PixelCache(tmp_path / "cache", enc.preprocess, 32).dir != \
        PixelCache(tmp_path / "cache", build_preprocess(48), 48).dir   # other size, other cache


def build_preprocess(size):
    import open_clip

    from features.embed.encoders import register_tiny_config
    register_tiny_config()
    return open_clip.create_model_and_transforms("mrqa-tiny-clip", force_image_size=size)[2]


def test_training_used_the_pixel_cache_and_reports_recipe_metrics(trained):
    paths, con, res = trained
    m = res["metrics"]
    assert m["images_decoded"] + m["images_from_cache"] == m["n_train_images"]
    assert list((paths.models / "pixel_cache").glob("32px-*/pixels.npy"))
    assert 0 <= m["chance_same_recipe_r@1"] < 1 and 0 <= m["img_same_recipe_r@1"] <= 1
    assert len(m["recipe_loss_per_epoch"]) == CFG.epochs


def test_bench_encoder_train_cli(tmp_path, monkeypatch):
    """`mrqa bench encoder-train` through the real Typer app: a clear error without a warehouse or
    without train images, else one JSON object with both modes (tiny run: code path, not figures)."""
    from typer.testing import CliRunner

    from flows.cli import app
    monkeypatch.setenv("MRQA_HOME", str(tmp_path / "empty"))
    r = CliRunner().invoke(app, ["bench", "encoder-train"])
    assert r.exit_code == 2 and "no warehouse" in r.output and "mrqa demo" in r.output
    paths = Paths.from_env(tmp_path / "home").ensure()
    connect(paths).close()                                          # a warehouse with no recipes
    monkeypatch.setenv("MRQA_HOME", str(paths.home))
    r = CliRunner().invoke(app, ["bench", "encoder-train"])
    assert r.exit_code == 2 and "train step(s) with a readable image" in r.output
    con = connect(paths)
    build_toy_warehouse(con, paths, n_recipes=10, steps=4, images_per_step=1, seed=2)
    con.close()
    r = CliRunner().invoke(app, ["bench", "encoder-train", "--epochs", "1", "--repeats", "1"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output[r.output.index("{"):])
    assert res["same_weights"] is True and res["epochs"] == 1 and len(res["one_thread_s"]) == 1
    r = CliRunner().invoke(app, ["bench", "encoder-train", "--epochs", "0"])
    assert r.exit_code == 2
