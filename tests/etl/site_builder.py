"""Tiny instructables-shaped test sites (the sample site's layout), written into tmp_path by the tests.

`build_site(root)` writes a category page, paginated channel listings, recipe pages in the 2024
markup (with an avatar and "more by" thumbnails that are not step images), JPEG step images,
robots.txt and sitemap.xml, and plants failures: a listed page that does not exist (404), a page
without steps, a page disallowed by robots.txt, a missing image and a truncated (broken) image.
It returns the expected outcome per recipe and per image so tests compare against it.
"""
from __future__ import annotations

import html
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image


@dataclass
class SiteTruth:
    recipes_ok: dict[str, int] = field(default_factory=dict)        # slug -> number of steps
    recipes_rejected: dict[str, str] = field(default_factory=dict)  # slug -> ingest reason
    images: dict[str, str] = field(default_factory=dict)            # image_id -> ok|missing|broken
    step_images: dict[str, list[str]] = field(default_factory=dict)  # "slug/step" -> url paths


def jpeg_bytes(seed: int, size: int = 24) -> bytes:
    im = Image.new("RGB", (size, size), ((seed * 53) % 256, (seed * 97) % 256, (seed * 31) % 256))
    for x in range(size):
        im.putpixel((x, (x * seed) % size), (255, 255, 255))
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=90)
    return buf.getvalue()


def recipe_html(slug: str, title: str, channel: str, steps: list[tuple[str, str, list[str]]],
                video_step: int | None = None) -> str:
    """A page in the 2024 markup; `steps[i]` = (title, body, image url paths); steps[0] is the intro."""
    e = html.escape
    ld_steps = [{"@type": "HowToStep", "name": t, "text": b} for t, b, _ in steps[1:]]
    sections = []
    for i, (t, b, imgs) in enumerate(steps):
        sid = "intro" if i == 0 else f"step{i}"
        h2 = f"Introduction: {e(t)}" if i == 0 else f"Step {i}: {e(t)}"
        photos = "".join(f'<img loading="lazy" alt="{e(t)}" src="{e(u)}?auto=webp&amp;frame=1&amp;width=600">'
                         for u in imgs)
        media = (f'<div class="mediaset"></div><noscript><div class="no-js-photoset">{photos}</div></noscript>'
                 if imgs else "")
        promo = ""
        if i == 0:
            promo = ('<div class="author-promo"><a class="avatar" rel="author" href="/member/Tester/">'
                     '<img class="lazyload" data-src="/ORIG/AVA/TAR0/AVATAR.jpg?width=130" src="/assets/img/pixel.png">'
                     '<noscript><img src="/ORIG/AVA/TAR0/AVATAR.jpg?width=130"></noscript></a>'
                     '<div class="recent-ibles"><a href="/Other-Thing/"><noscript>'
                     '<img src="/ORIG/MOR/EBY0/MOREBY.jpg?crop=1"></noscript></a></div></div>')
        video = ('<iframe src="https://www.youtube.com/embed/xyz"></iframe>' if video_step == i else "")
        sections.append(f'<section id="{sid}" class="step"><h2 class="step-title">{h2}</h2>{media}{promo}'
                        f'{video}<div class="step-body"><p>{e(b)}</p></div></section>')
    ld = {"@context": "http://schema.org", "@type": "HowTo", "name": title, "step": ld_steps}
    return (f'<!DOCTYPE html><html><head><title>{e(title)} : {len(steps) - 1} Steps - Instructables</title>'
            f'<meta property="og:url" content="https://www.instructables.com/{slug}/">'
            f'<meta property="category" content="cooking"><meta property="channel" content="{channel}">'
            f'<script type="application/ld+json">{json.dumps(ld)}</script></head><body>'
            f'<h1 class="header-title">{e(title)}</h1><div class="header-byline">By '
            f'<a href="/member/Tester/" rel="author">Tester</a></div>'
            f'<div class="article-body">{"".join(sections)}</div></body></html>')


def _write(root: Path, url_path: str, data: bytes | str) -> None:
    rel = url_path.lstrip("/")
    p = root / (rel + "index.html" if url_path.endswith("/") else rel)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data.encode() if isinstance(data, str) else data)


def build_site(root: Path, n_recipes: int = 6, n_steps: int = 3, images_per_step: int = 2,
               channels: tuple[str, ...] = ("soups-and-stews", "bread"), per_page: int = 2,
               plant_failures: bool = True) -> SiteTruth:
    truth = SiteTruth()
    root.mkdir(parents=True, exist_ok=True)
    slugs_by_channel: dict[str, list[str]] = {c: [] for c in channels}
    k = 0
    for r in range(n_recipes):
        ch = channels[r % len(channels)]
        slug = f"Test-Recipe-{r:03d}"
        steps = []
        for s in range(n_steps + 1):
            imgs = []
            for o in range(images_per_step):
                k += 1
                path = f"/ORIG/F{r:02d}/S{s:03d}/IMG{k:05d}.jpg"
                imgs.append(path)
                iid = f"{slug}_{s}_{o}.jpg"
                data = jpeg_bytes(k)
                if plant_failures and r == 0 and s == 1 and o == 0:
                    truth.images[iid] = "missing"          # referenced, never written
                    continue
                if plant_failures and r == 0 and s == 1 and o == 1:
                    data = data[: len(data) // 2]           # a truncated JPEG file
                    truth.images[iid] = "broken"
                else:
                    truth.images[iid] = "ok"
                _write(root, path, data)
            truth.step_images[f"{slug}/{s}"] = imgs
            steps.append((f"Part {s} of {slug}", f"Do thing {s} for recipe {r}. Stir well.", imgs))
        _write(root, f"/{slug}/", recipe_html(slug, f"Test Recipe {r}", ch, steps))
        truth.recipes_ok[slug] = n_steps + 1
        slugs_by_channel[ch].append(slug)
    if plant_failures:
        slugs_by_channel[channels[0]] += ["Gone-Recipe", "Stepless-Page", "Private-Stew"]
        truth.recipes_rejected.update({"Gone-Recipe": "http_404", "Stepless-Page": "no_steps",
                                       "Private-Stew": "robots_disallowed"})
        _write(root, "/Stepless-Page/", "<html><head><title>Nothing</title></head><body>"
                                        "<h1 class='header-title'>Nothing here</h1></body></html>")
        _write(root, "/Private-Stew/", recipe_html("Private-Stew", "Private", channels[0],
                                                   [("a", "b", []), ("c", "d", [])]))
    for ch, slugs in slugs_by_channel.items():
        pages = [slugs[i:i + per_page] for i in range(0, len(slugs), per_page)] or [[]]
        for n, chunk in enumerate(pages, start=1):
            base = f"/cooking/{ch}/projects/"
            here = base if n == 1 else f"{base}page/{n}/"
            nxt = f'<a rel="next" href="{base}page/{n + 1}/">Next</a>' if n < len(pages) else ""
            links = "".join(f'<div class="ible"><a class="ible-title" href="/{s}/">{s}</a>'
                            f'<a href="/member/Tester/">by Tester</a></div>' for s in chunk)
            _write(root, here, f"<html><body><h1>{ch}</h1>{links}{nxt}</body></html>")
    cat = "".join(f'<a href="/cooking/{c}/projects/">{c}</a>' for c in channels)
    _write(root, "/cooking/", f"<html><body><a href='/cooking/'>Cooking</a>{cat}"
                              "<a href='/member/Tester/'>member</a></body></html>")
    every = [s for v in slugs_by_channel.values() for s in v]
    locs = "".join(f"<url><loc>/{s}/</loc></url>" for s in every)
    _write(root, "/sitemap.xml", '<?xml version="1.0" encoding="UTF-8"?>'
                                 f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
                                 f'<url><loc>/cooking/</loc></url>{locs}</urlset>')
    _write(root, "/robots.txt", "User-agent: *\nDisallow: /member/\nDisallow: /search/\n"
                                + ("Disallow: /Private-Stew/\n" if plant_failures else "")
                                + "Sitemap: /sitemap.xml\n")
    return truth
