"""Build the sample kitchen: `build_sample(out_dir, n_recipes, seed, workers)`.

Writes OUT/site/ (etl/sample/site.py), OUT/ground_truth.jsonl (never served) and OUT/manifest.json (last:
its existence means the build finished), after OUT/.sample-build (first: it marks the folder as a build's,
so an interrupted build is replaced too; a folder holding other files is refused). Deterministic: plans
come from (seed, index), images and pages are rendered by a process pool but each recipe only from its
own plan, so the bytes do not depend on the number of workers; `content_sha256` hashes every file's path and bytes.
"""
from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing as mp
import os
import random
import shutil
import time
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from tqdm import tqdm

from etl.config import file_in_path
from etl.records import image_id
from etl.sample import site as W
from etl.sample import vocab as V
from etl.sample.noise import apply_noise, normalise_ws
from etl.sample.recipes import (
    RecipePlan,
    assign_authors,
    assign_defects,
    derive_seed,
    plan_recipe,
)
from etl.sample.render import KitchenRenderer, truncate_jpeg

log = logging.getLogger(__name__)
N_AVATARS = 16


# ------------------------------------------------------------------------------- planning

def plan_all(n: int, seed: int) -> list[RecipePlan]:
    """Every recipe's plan with unique slugs, noise and image URL paths (cheap; done in the parent)."""
    page_defects, image_defects = assign_defects(seed, n)
    authors, author_of = assign_authors(seed, n)
    plans = [plan_recipe(seed, i, authors[author_of[i]], page_defects.get(i), image_defects.get(i, ()))
             for i in range(n)]
    seen: Counter[str] = Counter()
    for p in plans:
        base = W.slugify(p.title)
        seen[base] += 1
        p.slug = base if seen[base] == 1 else f"{base}-{seen[base] - 1}"
    taken = {p.slug for p in plans}
    assert len(taken) == len(plans), "slug collision"
    for p in plans:
        apply_noise(p, seed)
        folder = W.image_dir(seed, p.slug)
        for s in p.steps:
            for im in s.images:
                im.url_path = folder + W.image_name(seed, p.slug, s.step_idx, im.ord) + ".jpg"
    return plans


def _more_by(plans: list[RecipePlan]) -> dict[int, list[tuple[str, str, str]]]:
    by_author: dict[str, list[RecipePlan]] = defaultdict(list)
    for p in plans:
        if p.defect != "http_404":
            by_author[p.author].append(p)
    out = {}
    for group in by_author.values():
        for k, p in enumerate(group):
            others = [group[(k + j) % len(group)] for j in range(1, min(4, len(group)))]
            out[p.index] = [(o.slug, o.title, _thumb(o)) for o in others if _thumb(o)]
    return out


def _thumb(p: RecipePlan) -> str:
    return next((im.url_path for s in p.steps for im in s.images if im.expected == "ok"), "")


def avatar_path(author: str) -> str:
    k = int(hashlib.sha256(author.encode()).hexdigest(), 16) % N_AVATARS
    return f"/ORIG/FAV/ATAR/FAVATAR{k:02d}.jpg"


# ------------------------------------------------------------------------------- rendering (workers)

def _write(site: Path, url_path: str, data: bytes) -> tuple[str, str, int]:
    rel = url_path.lstrip("/")
    if url_path.endswith("/"):
        rel += "index.html"
    f = site / rel
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(data)
    return rel, hashlib.sha256(data).hexdigest(), len(data)


def render_recipe(site: Path, seed: int, size: int, plan: RecipePlan, more_by) -> list[tuple[str, str, int]]:
    """Write one recipe's images and page; returns (relative path, sha256, bytes) per written file."""
    if plan.defect == "http_404":
        return []
    files = []
    # the counter's grain/speckle is seeded by the author: one physical counter per author
    r = KitchenRenderer(plan.kitchen_style, derive_seed("kitchen", seed, plan.author_id), size)
    for s in plan.steps:
        for im in s.images:
            if im.expected == "missing":
                continue
            data = r.render(im.depicts)
            if im.expected == "broken":
                data = truncate_jpeg(data, random.Random(derive_seed("broken", seed, im.url_path)))
            files.append(_write(site, im.url_path, data))
    page = W.recipe_page(plan, avatar_path(plan.author), more_by)
    files.append(_write(site, f"/{plan.slug}/", page.encode("utf-8")))
    return files


_CTX: dict = {}


def _init_worker(site: str, seed: int, size: int) -> None:
    _CTX.update(site=Path(site), seed=seed, size=size)


def _render_chunk(chunk: list[tuple[RecipePlan, list]]) -> tuple[list, int]:
    out, n_img = [], 0
    for plan, more in chunk:
        files = render_recipe(_CTX["site"], _CTX["seed"], _CTX["size"], plan, more)
        out.extend(files)
        n_img += sum(1 for f in files if f[0].endswith(".jpg"))
    return out, n_img


# ------------------------------------------------------------------------------- ground truth

def ground_truth(plan: RecipePlan) -> dict:
    steps = []
    if plan.defect != "http_404":
        for s in plan.steps:
            images = [{"image_id": image_id(plan.slug, s.step_idx, im.ord), "url_path": im.url_path,
                       "expected": im.expected,
                       "reason": {"ok": None, "missing": "http_404", "broken": "image_decode_error"}[im.expected],
                       "depicts": im.depicts} for im in s.images]
            steps.append({"step_idx": s.step_idx, "title_raw": s.title_raw, "body_raw": "\n".join(s.paragraphs_raw),
                          "title_clean": normalise_ws(s.title), "body_clean": "\n".join(s.paragraphs),
                          "labels": s.labels, "roles": s.roles, "n_videos": s.n_videos, "noise": s.noise,
                          "rare_words": sorted({w for w in V.RARE_WORDS if w in " ".join(s.paragraphs)}),
                          "images": images})
    return {"recipe_id": plan.slug, "url_path": f"/{plan.slug}/", "title": plan.title, "channel": plan.channel,
            "category": plan.category, "listed_in": plan.listed_in, "author": plan.author,
            "author_id": plan.author_id, "language": plan.language,
            "kind": plan.kind, "kitchen_style": plan.kitchen_style, "expected": plan.expected, "steps": steps}


# ------------------------------------------------------------------------------- site pages

def _site_pages(site: Path, plans: list[RecipePlan]) -> list[tuple[str, str, int]]:
    files = []
    by_channel: dict[str, list[RecipePlan]] = defaultdict(list)
    for p in plans:
        by_channel[p.listed_in].append(p)
    for ch in V.CHANNELS:
        group = by_channel.get(ch.slug, [])
        n_pages = max(1, -(-len(group) // W.PER_PAGE))
        for page in range(1, n_pages + 1):
            cards = [(p.slug, p.title, p.author, _thumb(p) if p.defect != "http_404" else "")
                     for p in group[(page - 1) * W.PER_PAGE: page * W.PER_PAGE]]
            path = f"/cooking/{ch.slug}/projects/" + ("" if page == 1 else f"page/{page}/")
            files.append(_write(site, path, W.listing_page(ch, page, n_pages, cards).encode()))
    files.append(_write(site, "/cooking/", W.category_page(V.CHANNELS).encode()))
    files.append(_write(site, "/", W.home_page().encode()))
    files.append(_write(site, "/sitemap.xml", W.sitemap(sorted(f"/{p.slug}/" for p in plans)).encode()))
    files.append(_write(site, "/robots.txt", W.robots().encode()))
    for k in range(N_AVATARS):
        style = {"counter_rgb": [60 + 11 * k, 120, 200 - 9 * k], "texture": "plain",
                 "light": {"brightness": 1.0, "warmth": 0.0, "direction": "centre"},
                 "framing": {"zoom": 1.0, "dx": 0, "dy": 0, "tilt": 1.0}}
        data = KitchenRenderer(style, k, 64).render({"kind": "layout", "vessel": "counter", "items": []})
        files.append(_write(site, f"/ORIG/FAV/ATAR/FAVATAR{k:02d}.jpg", data))
    return files


# ------------------------------------------------------------------------------- entry point

BUILD_MARK = ".sample-build"          # written before anything else of a build: the folder is a sample build
BUILD_MARK_TEXT = "a sample kitchen build (mrqa sample build); its site/, ground_truth.jsonl and manifest.json " \
                  "are replaced by the next build here\n"
MANIFEST_KEYS = ("content_sha256", "counts", "image_size", "n_recipes", "seed")


def is_sample_manifest(path: Path) -> bool:
    """Whether `path` is the manifest.json a sample build writes (a JSON object with its keys)."""
    try:
        m = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(m, dict) and all(k in m for k in MANIFEST_KEYS)


def check_build_dir(out_dir: Path) -> None:
    """Raise ValueError unless a build may write (and replace its site/, ground_truth.jsonl and
    manifest.json) in `out_dir`: it does not exist, is an empty folder, or holds an earlier sample
    build (its manifest.json, or the mark an unfinished build leaves)."""
    out_dir = Path(out_dir)
    blocked = file_in_path(out_dir)
    if blocked is not None:
        raise ValueError(f"{blocked} is a file, not a folder")
    if not out_dir.exists() or not any(out_dir.iterdir()):
        return
    if (out_dir / BUILD_MARK).is_file() or is_sample_manifest(out_dir / "manifest.json"):
        return
    raise ValueError(f"{out_dir} holds other files and no earlier sample build (no manifest.json of one); "
                     "give an empty or new folder")


def build_sample(out_dir: Path, n_recipes: int, seed: int, workers: int | None = None,
                 image_size: int = 128, progress: bool = True, chunk: int = 16) -> dict:
    """Build the sample kitchen into out_dir (replacing an earlier build there; a folder holding other
    files is refused with a ValueError, `check_build_dir`); returns a summary with counts,
    content_sha256 and timings (recipes/s, images/s)."""
    if n_recipes < 1:
        raise ValueError("n_recipes must be >= 1")
    out_dir = Path(out_dir)
    check_build_dir(out_dir)
    site = out_dir / "site"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / BUILD_MARK).write_text(BUILD_MARK_TEXT)    # first: an interrupted build is still ours to replace
    for old in (site, out_dir / "ground_truth.jsonl", out_dir / "manifest.json"):
        if old.is_dir():
            shutil.rmtree(old)
        elif old.exists():
            old.unlink()
    site.mkdir(parents=True)
    workers = max(1, workers or os.cpu_count() or 1)
    t0 = time.perf_counter()
    plans = plan_all(n_recipes, seed)
    more = _more_by(plans)
    t_plan = time.perf_counter() - t0
    jobs = [(p, more.get(p.index, [])) for p in plans]
    chunks = [jobs[i:i + chunk] for i in range(0, len(jobs), chunk)]
    files: list[tuple[str, str, int]] = []
    n_images = 0
    bar = tqdm(total=n_recipes, desc="sample build", unit="recipe", disable=not progress)
    if workers == 1:
        _init_worker(str(site), seed, image_size)
        results = map(_render_chunk, chunks)
        pool = None
    else:
        # forkserver, not fork: the caller may run threads; a dead worker raises BrokenProcessPool at once
        pool = ProcessPoolExecutor(workers, mp_context=mp.get_context("forkserver"), initializer=_init_worker,
                                   initargs=(str(site), seed, image_size))
        results = pool.map(_render_chunk, chunks)
    try:
        for c, (fs, n_img) in zip(chunks, results):
            files.extend(fs)
            n_images += n_img
            bar.update(len(c))
    finally:
        bar.close()
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    t_render = time.perf_counter() - t0 - t_plan
    files.extend(_site_pages(site, plans))
    gt = "".join(json.dumps(ground_truth(p), ensure_ascii=False, sort_keys=True) + "\n"
                 for p in sorted(plans, key=lambda p: p.slug)).encode("utf-8")
    (out_dir / "ground_truth.jsonl").write_bytes(gt)
    files.append(("../ground_truth.jsonl", hashlib.sha256(gt).hexdigest(), len(gt)))
    digest = hashlib.sha256()
    for rel, sha, _ in sorted(files):
        digest.update(f"{rel}\0{sha}\n".encode())
    counts = _counts(plans)
    counts.update(files=len(files), bytes=sum(f[2] for f in files), image_files=n_images)
    manifest = {"n_recipes": n_recipes, "seed": seed, "image_size": image_size, "counts": counts,
                "content_sha256": digest.hexdigest()}
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    seconds = time.perf_counter() - t0
    log.info("sample kitchen: %d recipes, %d images in %.1fs (%s)", n_recipes, n_images, seconds, out_dir)
    return dict(manifest, out_dir=str(out_dir), workers=workers, seconds=round(seconds, 3),
                plan_seconds=round(t_plan, 3), render_seconds=round(t_render, 3),
                recipes_per_s=round(n_recipes / seconds, 1), images_per_s=round(n_images / seconds, 1))


def _counts(plans: list[RecipePlan]) -> dict:
    c: Counter[str] = Counter()
    for p in plans:
        c["recipes"] += 1
        c[f"expected_{p.defect or 'ok'}"] += 1
        if p.defect == "http_404":
            continue
        c["pages"] += 1
        for s in p.steps:
            c["steps"] += 1
            c["noise"] += len(s.noise)
            for im in s.images:
                c[f"images_{im.expected}"] += 1
    c.update(author_stats(plans))
    return dict(sorted(c.items()))


def author_stats(plans: list[RecipePlan]) -> dict:
    """How recipes spread over authors: number of authors, share with 1-2 recipes, the most
    recipes of one author and how many authors have 20 or more."""
    per = Counter(p.author for p in plans)
    return {"authors": len(per), "authors_1_2_share": round(sum(v <= 2 for v in per.values()) / len(per), 3),
            "authors_max_recipes": max(per.values()), "authors_20_plus": sum(v >= 20 for v in per.values())}


def bench_sample(n_recipes: int = 300, seed: int = 0, workers: tuple[int, ...] = (1, 2),
                 root: Path | None = None) -> dict:
    """Build the same sample with each worker count (into temporary folders, deleted after);
    returns {workers: summary} plus the speed-up of the last over the first and whether the
    content hashes agree (they must: the output does not depend on the worker count)."""
    import tempfile
    results = {}
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        for w in workers:
            r = build_sample(Path(tmp) / f"w{w}", n_recipes, seed, workers=w, progress=False)
            results[w] = {k: r[k] for k in ("seconds", "recipes_per_s", "images_per_s", "content_sha256")}
            results[w]["images"] = r["counts"]["image_files"]
            shutil.rmtree(Path(tmp) / f"w{w}")
    first, last = results[workers[0]], results[workers[-1]]
    return {"n_recipes": n_recipes, "runs": results,
            "speedup": round(first["seconds"] / last["seconds"], 2),
            "same_hash": len({r["content_sha256"] for r in results.values()}) == 1}
