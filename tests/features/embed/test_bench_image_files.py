"""`features.embed.bench.bench_image_files`: the images the decode and embed benchmarks time."""
from __future__ import annotations

import pytest


def test_bench_image_files_falls_back_to_synthetic_jpegs_and_cleans_up():
    """Without a warehouse the image benchmarks get `n` synthetic JPEGs of the asked size, in a folder
    removed afterwards; a size under 16 pixels is refused."""
    from PIL import Image

    from features.embed.bench import bench_image_files
    with bench_image_files(5, synthetic=False, synthetic_size=48) as (files, source):
        assert len(files) == 5 and source == "synthetic 48px JPEGs"
        assert all(Image.open(f).size == (48, 48) for f in files)
        folder = files[0].parent
    assert not folder.exists()
    with pytest.raises(ValueError, match=">= 16"):
        with bench_image_files(5, synthetic=True, synthetic_size=8):
            pass

