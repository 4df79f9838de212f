"""The sample kitchen under MRQA_HOME: build it once per (size, seed) and serve it on loopback.

    with served_sample(paths, recipes=50, seed=0) as (sample, url):
        ...crawl f"{url}/cooking/"...

`sample_dir_for` is where a build lives (MRQA_HOME/sample/n<recipes>-seed<seed>); `ensure_sample`
builds it unless a finished build (its manifest, written last) is already there.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from etl.config import Paths

log = logging.getLogger(__name__)


def sample_dir_for(paths: Paths, recipes: int, seed: int) -> Path:
    """Where the sample kitchen of `recipes` recipes and `seed` is built."""
    return paths.home / "sample" / f"n{recipes}-seed{seed}"


def ensure_sample(paths: Paths, recipes: int, seed: int, workers: int | None = None) -> dict:
    """Build the sample kitchen unless a finished build is already there; returns
    {out, reused, n_recipes, content_sha256, ...}."""
    from etl.sample.generate import build_sample
    out = sample_dir_for(paths, recipes, seed)
    manifest = out / "manifest.json"
    if manifest.exists():
        m = json.loads(manifest.read_text())
        log.info("sample kitchen already built at %s (content %s)", out, m.get("content_sha256"))
        return {"out": str(out), "reused": True, **{k: m[k] for k in ("n_recipes", "content_sha256") if k in m}}
    return {"out": str(out), "reused": False, **build_sample(out, recipes, seed, workers=workers)}


@contextmanager
def served_sample(paths: Paths, recipes: int, seed: int, workers: int | None = None
                  ) -> Iterator[tuple[dict, str]]:
    """Build (or reuse) the sample kitchen and serve its site on a free loopback port, from a process of
    its own (`ProcessSiteServer`), while the block runs; yields (the `ensure_sample` summary, the
    server's base URL)."""
    from etl.sample.server import ProcessSiteServer
    sample = ensure_sample(paths, recipes, seed, workers)
    with ProcessSiteServer(Path(sample["out"]) / "site") as server:   # its own process: no GIL shared with the crawl
        log.info("sample kitchen served at %s", server.url)
        yield sample, server.url
