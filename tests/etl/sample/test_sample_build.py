"""Determinism, site layout and ground-truth shape of the sample kitchen."""
from __future__ import annotations

import json
from pathlib import Path

from etl.sample import vocab as V
from etl.sample.generate import build_sample


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_same_seed_gives_identical_bytes_whatever_the_worker_count(tmp_path):
    a = build_sample(tmp_path / "a", 14, seed=5, workers=1, progress=False)
    b = build_sample(tmp_path / "b", 14, seed=5, workers=2, progress=False)
    c = build_sample(tmp_path / "c", 14, seed=6, workers=2, progress=False)
    print(f"hash seed 5: {a['content_sha256']} (1 worker) / {b['content_sha256']} (2 workers)")
    assert a["content_sha256"] == b["content_sha256"]
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b")
    assert c["content_sha256"] != a["content_sha256"]
    # a rebuild into the same folder replaces the old build and gives the same hash again
    again = build_sample(tmp_path / "a", 14, seed=5, workers=2, progress=False)
    assert again["content_sha256"] == a["content_sha256"]


def test_vocabulary_is_big_enough():
    assert len(V.INGREDIENTS) >= 50
    state_changing = [a for a in V.ACTIONS.values() if a.verb not in ("gather", "serve")]
    assert len(state_changing) >= 20
    assert len(V.CHANNELS) == 24 and len({c.slug for c in V.CHANNELS}) == 24
    assert {"maraschinos", "gnocchi", "tzatziki", "Bärenjäger"} <= set(V.RARE_WORDS)


def test_manifest_and_site_layout(sample_build):
    out, summary, gt = sample_build
    site = out / "site"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["content_sha256"] == summary["content_sha256"]
    assert manifest["n_recipes"] == len(gt) == summary["counts"]["recipes"]
    robots = (site / "robots.txt").read_text()
    assert "Disallow: /member/" in robots and "Disallow: /search/" in robots and "Sitemap: /sitemap.xml" in robots
    sitemap = (site / "sitemap.xml").read_text()
    assert all(f"<loc>{g['url_path']}</loc>" in sitemap for g in gt)
    cooking = (site / "cooking" / "index.html").read_text()
    assert all(f'href="/cooking/{c.slug}/projects/"' in cooking for c in V.CHANNELS)
    listed = "".join(p.read_text() for p in (site / "cooking").rglob("index.html"))
    for g in gt:
        assert f'class="ible-title" href="{g["url_path"]}"' in listed
        page = site / g["recipe_id"] / "index.html"
        assert page.exists() == (g["expected"]["reason"] != "http_404")
    assert not list(site.rglob("ground_truth*")), "ground truth must never be served"


def test_ground_truth_shape_and_realistic_rates(sample_build):
    out, summary, gt = sample_build
    assert [g["recipe_id"] for g in gt] == sorted(g["recipe_id"] for g in gt)
    assert len({g["recipe_id"] for g in gt}) == len(gt)
    reasons = [g["expected"]["reason"] for g in gt]
    for r in ("http_404", "non_food", "non_english", "too_few_steps", "too_many_steps", "video_only"):
        assert r in reasons, r
    assert reasons.count(None) / len(gt) > 0.8, "most recipes must be usable"
    for g in gt:
        if g["expected"]["reason"] in (None, "non_english"):
            assert 6 <= len(g["steps"]) <= 13 or g["language"] != "en", g["recipe_id"]   # intro + 5..12
            assert g["category"] == "cooking" and g["channel"] in V.CHANNEL_BY_SLUG
        if g["expected"]["reason"] == "too_few_steps":
            assert len(g["steps"]) < 3
        if g["expected"]["reason"] == "too_many_steps":
            assert len(g["steps"]) > 26
        for s in g["steps"]:
            assert set(s["labels"]) == {"ingredients", "action", "state", "vessel", "tool"}
            for im in s["images"]:
                assert im["image_id"] == f"{g['recipe_id']}_{s['step_idx']}_{im['depicts']['ord']}.jpg"
                assert im["url_path"].startswith("/ORIG/") and im["url_path"].endswith(".jpg")
    n_img = sum(len(s["images"]) for g in gt for s in g["steps"])
    assert 8 <= n_img / len(gt) <= 20, "RecipeQA has about 12.5 images per recipe"
