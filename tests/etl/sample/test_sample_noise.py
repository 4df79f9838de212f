"""Every planted defect is in the served site exactly where the ground truth says."""
from __future__ import annotations

import io
from collections import Counter

import pytest
from bs4 import BeautifulSoup
from PIL import Image

from etl.sample import vocab as V
from etl.sample.noise import normalise_ws, repair

KINDS = {"fused_word", "number_unit", "html", "office", "css", "url", "unicode", "step_number", "control_char"}


def _sections(out, g):
    soup = BeautifulSoup((out / "site" / g["recipe_id"] / "index.html").read_text(encoding="utf-8"), "lxml")
    return soup, soup.find("div", class_="article-body").find_all("section", class_="step", recursive=False)


def test_every_noise_instance_is_in_its_step_of_the_served_html(sample_build):
    out, _, gt = sample_build
    seen = Counter()
    for g in gt:
        if g["expected"]["reason"] == "http_404":
            continue
        _, sections = _sections(out, g)
        assert len(sections) == len(g["steps"])
        for sec, s in zip(sections, g["steps"]):
            title = sec.find("h2", class_="step-title").get_text()
            body = "\n".join(p.get_text() for p in sec.find("div", class_="step-body").find_all("p"))
            assert body == s["body_raw"]
            for n in s["noise"]:
                assert n["kind"] in KINDS
                assert n["raw"] in (title if n["field"] == "title" else body), (g["recipe_id"], s["step_idx"], n)
                seen[n["kind"]] += 1
            # the perfect cleaner: undoing the noise gives the clean text
            t = [n for n in s["noise"] if n["field"] == "title"]
            b = [n for n in s["noise"] if n["field"] == "body"]
            assert repair(s["title_raw"], t) == normalise_ws(s["title_clean"])
            assert repair(s["body_raw"], b) == normalise_ws(s["body_clean"])
    print("\nnoise instances by kind:", dict(seen))
    assert set(seen) == KINDS


def test_rare_words_are_served_unbroken(sample_build):
    out, _, gt = sample_build
    words = Counter(w for g in gt for s in g["steps"] for w in s["rare_words"])
    assert len(words) >= 3, words
    for g in gt:
        for s in g["steps"]:
            for w in s["rare_words"]:
                assert w in s["body_clean"]
                assert all(w not in n["raw"] or n["kind"] != "fused_word" for n in s["noise"])


def test_page_level_defects_are_where_the_ground_truth_says(sample_build):
    out, _, gt = sample_build
    # "walnut" is a food and a wood: words of the workshop materials do not count as food
    material_words = {w for m in V.NONFOOD_MATERIALS for w in m.split()}
    food_words = {i.name for i in V.INGREDIENTS} - material_words
    for g in gt:
        reason = g["expected"]["reason"]
        page = out / "site" / g["recipe_id"] / "index.html"
        if reason == "http_404":
            assert g["expected"]["stage"] == "ingest" and not page.exists()
            continue
        soup, sections = _sections(out, g)
        text = soup.find("div", class_="article-body").get_text(" ")
        if reason == "video_only":
            assert soup.select("section.step iframe") and not soup.select(".no-js-photoset img")
            assert all(s["n_videos"] >= 1 and not s["images"] for s in g["steps"])
        if reason == "non_english":
            assert soup.html["lang"] == g["language"] != "en"
            assert any(w in text for w in ("minutos", "Minuten", "minutes", "Servir", "servieren"))
        if reason == "non_food":
            assert g["kind"] == "non_food"
            assert not any(f" {w} " in f" {normalise_ws(s['body_clean'])} " for s in g["steps"] for w in food_words)
        if reason == "too_few_steps":
            assert len(sections) < 3
        if reason == "too_many_steps":
            assert len(sections) > 26
        if reason is None:
            assert g["kind"] == "recipe" and g["language"] == "en"


def test_missing_and_broken_images(sample_build):
    out, _, gt = sample_build
    expected = Counter()
    for g in gt:
        for s in g["steps"]:
            for im in s["images"]:
                f = out / "site" / im["url_path"].lstrip("/")
                expected[im["expected"]] += 1
                if im["expected"] == "missing":
                    assert not f.exists() and im["reason"] == "http_404"
                    continue
                data = f.read_bytes()
                if im["expected"] == "broken":
                    assert im["reason"] == "image_decode_error"
                    with pytest.raises(OSError):
                        Image.open(io.BytesIO(data)).load()
                elif expected["ok"] % 7 == 0:   # decode a share of the good ones
                    with Image.open(io.BytesIO(data)) as img:
                        img.load()
                        assert img.size == (128, 128)
    assert expected["missing"] >= 1 and expected["broken"] >= 1
    assert expected["ok"] > 50 * (expected["missing"] + expected["broken"]) / 3
