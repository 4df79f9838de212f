"""Image decoding for the embed stage: the thread-pool decoder gives exactly the DataLoader's
batches (same order, same tensors, same reject reasons for broken and missing files); the uint8
pixel path (normalised on the encoder's device) gives the float path's model input and vectors."""
from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from PIL import Image

from features.embed.bench import bench_embed, synthetic_jpegs
from features.embed.decode import image_loader, open_rgb, split_preprocess, to_model_input
from features.embed.encoders import Encoder, build_model


def _preprocess(size: int):
    from torchvision import transforms as T
    return T.Compose([T.Resize(size), T.CenterCrop(size), T.ToTensor(),
                      T.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))])


def _batches(loader):
    return [(pos.tolist(), x, list(err)) for pos, x, err, _ in loader]


@pytest.mark.parametrize("pixels", [True, False], ids=["uint8", "float"])
def test_threaded_decode_equals_dataloader(tmp_path, pixels):
    files = synthetic_jpegs(tmp_path, 11, size=96, seed=4)
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    files[3] = tmp_path / "broken.jpg"
    files[7] = tmp_path / "missing.jpg"
    pre = _preprocess(32)
    ref = _batches(image_loader(files, pre, 32, batch_size=4, num_workers=0, pixels=pixels))
    got = _batches(image_loader(files, pre, 32, batch_size=4, num_workers=3, decode="threads",
                                pixels=pixels))
    assert [b[0] for b in got] == [b[0] for b in ref] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10]]
    for (_, xr, er), (_, xg, eg) in zip(ref, got):
        assert xr.dtype == xg.dtype == (torch.uint8 if pixels else torch.float32)
        assert torch.equal(xr, xg) and er == eg
    reasons = [e for b in got for e in b[2]]
    assert reasons[3] == "image_decode_error" and reasons[7] == "missing_file"
    assert sum(1 for e in reasons if e) == 2


def test_unknown_decode_backend_is_refused(tmp_path):
    with pytest.raises(ValueError, match="processes or threads"):
        image_loader([], _preprocess(8), 8, decode="gpu")


def test_jpeg_draft_decodes_large_photos_at_a_reduced_scale(tmp_path):
    """A 640 px JPEG for a 224 px model is decoded at 1/2 scale (still >= 224 on both sides)."""
    p = synthetic_jpegs(tmp_path, 1, size=640)[0]
    im = open_rgb(p, 224)
    assert im.mode == "RGB" and im.size == (320, 320)
    small = synthetic_jpegs(tmp_path / "s", 1, size=128) if (tmp_path / "s").mkdir() is None else None
    assert open_rgb(small[0], 224).size == (128, 128)          # never decoded below the model size
    png = tmp_path / "x.png"
    Image.new("RGB", (300, 200), (10, 20, 30)).save(png)
    assert open_rgb(png, 64).size == (300, 200)                # draft applies to JPEG only


# ----------------------------------------------------------------------------- uint8 pixel path

def _default_encoder(device: str = "cpu") -> Encoder:
    """The default architecture (mrqa-tiny-clip, 32 px, open_clip's preprocess), seeded weights."""
    torch.manual_seed(0)
    dev = torch.device(device)
    model, pre, tok = build_model("mrqa-tiny-clip", None, dev)
    return Encoder("tiny-test", "mrqa-tiny-clip", model, pre, tok, dev, 128)


def _mixed_files(folder):
    """JPEGs of two sizes, a non-square RGBA PNG, a greyscale JPEG, a truncated and a missing file."""
    (folder / "big").mkdir()
    jpegs = synthetic_jpegs(folder, 5, size=96, seed=1) + synthetic_jpegs(folder / "big", 3, size=250,
                                                                          seed=2)
    rng = np.random.default_rng(3)
    Image.fromarray(rng.integers(0, 256, (41, 77, 4), dtype=np.uint8), "RGBA").save(folder / "wide.png")
    Image.fromarray(rng.integers(0, 256, (60, 50), dtype=np.uint8), "L").save(folder / "grey.jpg")
    (folder / "broken.jpg").write_bytes(jpegs[0].read_bytes()[:150])
    return [*jpegs[:4], folder / "wide.png", folder / "broken.jpg", *jpegs[4:6],
            folder / "missing.jpg", folder / "grey.jpg", *jpegs[6:]]


def _all(loader):
    pos, xs, errs = [], [], []
    for p, x, e, _ in loader:
        pos += p.tolist()
        xs.append(x)
        errs += list(e)
    return pos, torch.cat(xs), errs


@pytest.mark.parametrize("decode", ["processes", "threads"])
def test_uint8_pixels_normalised_on_the_device_give_the_float_path_vectors(tmp_path, decode):
    enc = _default_encoder()
    files = _mixed_files(tmp_path)
    ref_pos, ref_x, ref_err = _all(image_loader(files, enc.preprocess, 32, 4, 0, pixels=False))
    pos, px, err = _all(image_loader(files, enc.preprocess, 32, 4, num_workers=2, decode=decode))
    assert pos == ref_pos == list(range(len(files)))
    assert err == ref_err and err[5] == "image_decode_error" and err[8] == "missing_file"
    assert sum(1 for e in err if e) == 2                     # the PNG and the greyscale JPEG decode
    assert px.dtype == torch.uint8 and px.shape == (len(files), 3, 32, 32)
    assert ref_x.dtype == torch.float32 and ref_x.shape == px.shape
    ok = [j for j, e in enumerate(err) if not e]
    _, mean, std = split_preprocess(enc.preprocess)[:3]
    # the same numbers as ToTensor + Normalize (resizing happens on uint8 in both paths)
    assert float((to_model_input(px[ok], mean, std) - ref_x[ok]).abs().max()) <= 1e-6
    v_float = enc.encode_image_tensors(ref_x[ok])
    v_pixels = enc.encode_image_tensors(px[ok])              # uint8 in, normalised by the encoder
    assert float(np.abs(v_pixels - v_float).max()) <= 1e-5
    assert float((v_pixels * v_float).sum(1).min()) >= 0.9999          # unit vectors: cosine
    assert not px[[5, 8]].any()                                         # rejects: zero pixels


def test_unsplittable_preprocess_keeps_the_float_path_and_says_so(tmp_path, caplog):
    """A tensor step after Normalize would be lost by the split: the whole preprocess runs instead."""
    from torchvision import transforms as T

    class FlipTensor:                      # a tensor transform the uint8 path cannot reproduce
        def __call__(self, x):
            return x.flip(-1)

        def __repr__(self):
            return "FlipTensor(test_unsplittable_preprocess)"

    pre = T.Compose([*_preprocess(16).transforms, FlipTensor()])
    files = synthetic_jpegs(tmp_path, 3, size=40, seed=6)
    with caplog.at_level(logging.WARNING, logger="features.embed.decode"):
        _, x, err = _all(image_loader(files, pre, 16, 2, num_workers=2, decode="threads"))
    assert "float path" in caplog.text and "FlipTensor" in caplog.text
    assert x.dtype == torch.float32 and err == ["", "", ""]
    assert torch.equal(x[1], pre(open_rgb(files[1], 16)))
    enc = _default_encoder()
    enc.preprocess = pre
    with pytest.raises(ValueError, match="ToTensor, Normalize"):
        enc.encode_image_tensors(torch.zeros(1, 3, 32, 32, dtype=torch.uint8))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (pinned memory, AMP)")
@pytest.mark.parametrize("decode", ["processes", "threads"])
def test_cuda_pinned_uint8_batches_give_the_cpu_float_vectors(tmp_path, decode):
    enc = _default_encoder("cuda")
    cpu = _default_encoder("cpu")
    files = synthetic_jpegs(tmp_path, 12, size=96, seed=8)
    batches = list(image_loader(files, enc.preprocess, 32, 8, num_workers=2, decode=decode))
    assert all(x.dtype == torch.uint8 and x.is_pinned() for _, x, _, _ in batches)
    v_pixels = np.concatenate([enc.encode_image_tensors(x) for _, x, _, _ in batches])
    _, ref_x, _ = _all(image_loader(files, cpu.preprocess, 32, 8, 0, pixels=False))
    v_ref = cpu.encode_image_tensors(ref_x)                            # float32 on the CPU
    assert float((v_pixels * v_ref).sum(1).min()) >= 0.999             # fp16 autocast on CUDA


def test_bench_embed_times_both_inputs(tmp_path):
    """`mrqa bench embed` runs the uint8 and the float path (tiny run: code path, not figures)."""
    res = bench_embed(_default_encoder(), synthetic_jpegs(tmp_path, 16, size=48), batch_size=8,
                      workers=0)
    assert res["input"].startswith("uint8") and res["images"] == 16
    for key in ("end_to_end_img_s", "end_to_end_float_img_s", "model_only_img_s",
                "model_from_host_img_s", "model_from_host_float_img_s", "decode_only_float_img_s",
                "decode_only_threads_img_s", "decode_only_float_threads_img_s"):
        assert res[key] > 0, key
    assert res["uint8_vs_float_best"] > 0 and res["pinned"] == torch.cuda.is_available()


def test_decode_workers_unpickle_the_pixel_steps_without_open_clip(tmp_path):
    """The PIL part sent to DataLoader workers swaps open_clip's convert step for ours: a worker then
    imports torchvision, not open_clip (seconds of start-up per worker), and the pixels are the same."""
    import pickle
    import subprocess
    import sys
    from pathlib import Path

    import open_clip

    from features.embed.decode import PixelArray
    pre = open_clip.image_transform(32, is_train=False)           # open_clip's eval preprocess
    pil_steps = pre.transforms[:-2]                                    # before ToTensor, Normalize
    assert any(type(t).__module__.startswith("open_clip") for t in pil_steps)
    pil = split_preprocess(pre)[0]
    assert not any(type(t).__module__.startswith("open_clip") for t in pil.transforms)
    grey = Image.fromarray((np.arange(40 * 56) % 251).astype(np.uint8).reshape(40, 56), "L")
    theirs = grey
    for step in pil_steps:
        theirs = step(theirs)
    assert theirs.mode == "RGB"
    assert np.array_equal(np.asarray(pil(grey)), np.asarray(theirs))
    assert np.asarray(theirs).shape == (32, 32, 3)
    blob = tmp_path / "pixel_steps.pkl"
    blob.write_bytes(pickle.dumps(PixelArray(pil, 32)))
    code = ("import pickle, sys; pickle.loads(open(sys.argv[1], 'rb').read()); "
            "print('open_clip' in sys.modules, 'torchvision' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(blob)], capture_output=True, text=True,
                         check=True, cwd=str(Path(__file__).parents[3]))
    assert out.stdout.split() == ["False", "True"], out.stderr


def test_bench_decode_times_every_decoder(tmp_path):
    """`mrqa bench decode` (tiny run: code path, not figures) and its argument checks."""
    from typer.testing import CliRunner

    from features.embed.bench import bench_decode
    from flows.cli import app
    res = bench_decode(synthetic_jpegs(tmp_path, 12, size=64), image_size=32, batch_size=4, workers=2)
    assert res["images"] == 12 and res["image_size"] == 32
    for key in ("threads_img_s", "processes_img_s", "in_process_img_s", "threads_vs_processes"):
        assert res[key] > 0, key
    r = CliRunner().invoke(app, ["bench", "decode", "--workers", "0"])
    assert r.exit_code == 2 and "--workers" in r.output
