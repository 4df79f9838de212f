"""Image decoding for the embed stage: the thread-pool decoder gives exactly the DataLoader's
batches (same order, same tensors, same reject reasons for broken and missing files)."""
from __future__ import annotations

import pytest
import torch
from PIL import Image

from features.bench import synthetic_jpegs
from features.image_data import image_loader, open_rgb


def _preprocess(size: int):
    from torchvision import transforms as T
    return T.Compose([T.Resize(size), T.CenterCrop(size), T.ToTensor(),
                      T.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))])


def _batches(loader):
    return [(pos.tolist(), x, list(err)) for pos, x, err, _ in loader]


def test_threaded_decode_equals_dataloader(tmp_path):
    files = synthetic_jpegs(tmp_path, 11, size=96, seed=4)
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    files[3] = tmp_path / "broken.jpg"
    files[7] = tmp_path / "missing.jpg"
    pre = _preprocess(32)
    ref = _batches(image_loader(files, pre, 32, batch_size=4, num_workers=0))
    got = _batches(image_loader(files, pre, 32, batch_size=4, num_workers=3, decode="threads"))
    assert [b[0] for b in got] == [b[0] for b in ref] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10]]
    for (_, xr, er), (_, xg, eg) in zip(ref, got):
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
