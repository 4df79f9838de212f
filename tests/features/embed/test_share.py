"""An encoder carried to another home by `mrqa encoder export` / `mrqa encoder import`: the same id, row,
weights and vectors there, used by `mrqa embed` instead of training one; bad archives refused in one line."""
from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile

import numpy as np
import pytest
from toy_kitchen import build_toy_warehouse
from typer.testing import CliRunner

from etl.config import Paths
from etl.warehouse import connect
from features.embed.decode import image_items
from features.embed.encoders import latest_encoder_id, list_encoders, load_encoder
from features.embed.train_encoder import TrainConfig, train_encoder
from tests.features.embed.test_words_encoder import load_text_only_recipes

QUICK = TrainConfig(epochs=1, batch_size=30, seed=3, eval_max_pairs=10, image_size=32)
KEPT = ("encoder_id", "kind", "model_name", "pretrained", "weights_sha256", "preprocess_sha256", "dim",
        "train_split", "config", "metrics")


def _cli(*args):
    """Run `mrqa ARGS` in this process; the environment it sets (`--home` sets MRQA_HOME) is put back, so
    the worker's own home is kept for the tests after these."""
    from flows.cli import app
    saved = dict(os.environ)
    try:
        return CliRunner().invoke(app, list(args))
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _home(root, name: str) -> Paths:
    paths = Paths.from_env(root / name).ensure()
    con = connect(paths)
    build_toy_warehouse(con, paths, n_recipes=12, steps=3, images_per_step=1, seed=1)
    con.close()
    return paths


@pytest.fixture(scope="module")
def homes(tmp_path_factory):
    """Home A with a trained encoder and its archive; home B with the same recipes and no encoder."""
    root = tmp_path_factory.mktemp("share")
    a, b = _home(root, "a"), _home(root, "b")
    con = connect(a)
    eid = train_encoder(con, a, QUICK)["encoder_id"]
    con.close()
    archive = root / "enc.tar"
    res = _cli("--home", str(a.home), "encoder", "export", eid, "--out", str(archive))
    assert res.exit_code == 0, res.output
    return a, b, eid, archive


def _rows(paths: Paths) -> list[dict]:
    con = connect(paths, read_only=True)
    try:
        return [{k: r[k] for k in KEPT} for r in list_encoders(con)]
    finally:
        con.close()


def _vectors(paths: Paths, eid: str) -> np.ndarray:
    con = connect(paths, read_only=True)
    try:
        enc = load_encoder(con, eid, "cpu", paths)
        from PIL import Image
        items = image_items(con, paths, split="val")[:6]
        pix = [enc.preprocess(Image.open(it.path).convert("RGB")) for it in items]
        import torch
        return np.concatenate([enc.encode_image_tensors(torch.stack(pix)),
                               enc.encode_texts(["Add the red circle", "Stir the blue square"])])
    finally:
        con.close()


def test_imported_encoder_is_the_same_encoder_and_embed_uses_it(homes, tmp_path):
    a, b, eid, archive = homes
    again = tmp_path / "again.tar"
    assert _cli("--home", str(a.home), "encoder", "export", eid, "--out", str(again)).exit_code == 0
    assert again.read_bytes() == archive.read_bytes()          # the same encoder, the same archive bytes

    res = _cli("--home", str(b.home), "encoder", "import", str(archive))
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["encoder_id"] == eid and out["already_registered"] is False
    assert _rows(b) == _rows(a)                                  # id, weights, config, metrics
    con = connect(b, read_only=True)
    assert latest_encoder_id(con) == eid
    con.close()
    ckpt = b.models / "encoders" / eid / "model.safetensors"
    assert hashlib.sha256(ckpt.read_bytes()).hexdigest() == _rows(a)[0]["weights_sha256"]
    np.testing.assert_array_equal(_vectors(b, eid), _vectors(a, eid))   # bit for bit

    # embed in B uses the imported encoder: nothing is trained, the registry stays one row
    res = _cli("--home", str(b.home), "--no-prefect", "embed", "--no-train", "--k", "5")
    assert res.exit_code == 0, res.output
    assert [r["encoder_id"] for r in _rows(b)] == [eid]
    con = connect(b, read_only=True)
    n = con.execute("SELECT count(*) FROM neighbours WHERE encoder_id = ?", [eid]).fetchone()[0]
    con.close()
    assert n > 0

    # importing again is safe: the same row, files and weights
    res = _cli("--home", str(b.home), "encoder", "import", str(archive))
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["already_registered"] is True
    assert _rows(b) == _rows(a)


def _tar(path, members: dict[str, bytes]) -> None:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _members(archive) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}


def test_bad_archives_are_refused_in_one_line_and_change_nothing(homes, tmp_path):
    a, b, eid, archive = homes
    fresh = Paths.from_env(tmp_path / "c").ensure()
    connect(fresh).close()
    good = _members(archive)
    manifest = json.loads(good["encoder.json"])

    damaged_weights = dict(good, **{"model.safetensors": good["model.safetensors"][:-1] + b"\0"})
    other_weights = json.loads(good["encoder.json"])
    other_weights["files"]["model.safetensors"] = hashlib.sha256(b"x").hexdigest()
    other_weights["row"]["weights_sha256"] = hashlib.sha256(b"x").hexdigest()
    cases = {
        "not a tar": (b"plain text, not an archive\n", "not an encoder archive"),
        "cut short": (archive.read_bytes()[:40_000], "cut short or damaged"),
        "a path out of the folder": ({"../evil": b"x", **good}, "not a plain file at its top"),
        "no manifest": ({k: v for k, v in good.items() if k != "encoder.json"}, "no encoder.json"),
        "damaged weights": (damaged_weights, "does not match its sha256"),
        "another format": ({**good, "encoder.json": json.dumps({**manifest, "format": "x/9"}).encode()},
                           "this mrqa reads"),
        "weights not the row's": ({**good, "encoder.json": json.dumps(other_weights).encode(),
                                   "model.safetensors": b"x"}, "not those of encoder"),
    }
    for name, (content, expected) in cases.items():
        bad = tmp_path / f"{name.replace(' ', '-')}.tar"
        if isinstance(content, bytes):
            bad.write_bytes(content)
        else:
            _tar(bad, content)
        res = _cli("--home", str(fresh.home), "encoder", "import", str(bad))
        assert res.exit_code == 2, (name, res.output)
        assert expected in res.output and "Traceback" not in res.output, (name, res.output)
        assert _rows(fresh) == [], name
        assert not list(fresh.models.glob("encoders/*")), name

    res = _cli("--home", str(fresh.home), "encoder", "import", str(tmp_path / "missing.tar"))
    assert res.exit_code == 2 and "no such archive" in res.output


def test_the_same_id_with_other_weights_is_refused(homes, tmp_path):
    a, b, eid, archive = homes
    fresh = Paths.from_env(tmp_path / "d").ensure()
    con = connect(fresh)
    from features.embed.registry import register_encoder
    register_encoder(con, {**_rows(a)[0], "weights_sha256": "0" * 64, "checkpoint_path": "elsewhere.bin"})
    con.close()
    res = _cli("--home", str(fresh.home), "encoder", "import", str(archive))
    assert res.exit_code == 2 and "registered here with other weights" in res.output
    assert _rows(fresh)[0]["weights_sha256"] == "0" * 64
    assert not (fresh.models / "encoders" / eid).exists()


def test_export_refuses_unknown_and_outside_encoders(homes, tmp_path):
    a, b, eid, archive = homes
    res = _cli("--home", str(a.home), "encoder", "export", "no-such-encoder", "--out", str(tmp_path / "x.tar"))
    assert res.exit_code == 2 and "is not registered" in res.output
    res = _cli("--home", str(a.home), "encoder", "export", eid, "--out", str(tmp_path))
    assert res.exit_code == 2 and "is a folder" in res.output
    # an encoder registered from a weights file outside the home (as `encoder add --pretrained` does)
    outside = tmp_path / "weights.bin"
    outside.write_bytes(b"weights")
    home = Paths.from_env(tmp_path / "e").ensure()
    con = connect(home)
    from features.embed.registry import register_encoder
    register_encoder(con, {**_rows(a)[0], "encoder_id": "outside-enc", "checkpoint_path": str(outside),
                           "weights_sha256": hashlib.sha256(b"weights").hexdigest()})
    con.close()
    res = _cli("--home", str(home.home), "encoder", "export", "outside-enc", "--out", str(tmp_path / "o.tar"))
    assert res.exit_code == 2 and "register the same weights file" in res.output
    assert not (tmp_path / "o.tar").exists()


def test_a_words_encoder_travels_too(tmp_path):
    from features.embed.words_encoder import WordsConfig, fit_words_encoder
    a, b = (Paths.from_env(tmp_path / n).ensure() for n in "ab")
    for p in (a, b):
        con = connect(p)
        load_text_only_recipes(con, n_recipes=20)
        con.close()
        assert _cli("--home", str(p.home), "--no-prefect", "clean", "--workers", "1").exit_code == 0
    con = connect(a)
    eid = fit_words_encoder(con, a, WordsConfig(dim=8))["encoder_id"]
    con.close()
    archive = tmp_path / "words.tar"
    assert _cli("--home", str(a.home), "encoder", "export", eid, "--out", str(archive)).exit_code == 0
    res = _cli("--home", str(b.home), "encoder", "import", str(archive))
    assert res.exit_code == 0, res.output
    assert _rows(b) == _rows(a)
    texts = ["Whisk the eggs", "Bake the dough gently in the oven"]
    vec = {}
    for p in (a, b):
        con = connect(p, read_only=True)
        vec[p.home.name] = load_encoder(con, eid, paths=p).encode_texts(texts)
        con.close()
    np.testing.assert_array_equal(vec["a"], vec["b"])
