"""HTML/XML writers for the sample site, in instructables' 2024 server markup.

Mirrors a real instructables recipe page (the parser tests' fixture page): `h1.header-title`,
`a[rel=author]`, `meta[property=category|channel]`, JSON-LD Article/BreadcrumbList/HowTo,
`div.article-body > section.step#intro|#stepN`, `h2.step-title` ("Introduction: ..." / "Step N: ..."),
images only inside `<noscript><div class="no-js-photoset">`, and in the intro section the author
promo (avatar + "more by the author" thumbnails) that are NOT step images. Raw text (with its
planted noise) is HTML-escaped, so a parser's visible text is exactly the ground-truth raw text.
"""
from __future__ import annotations

import base64
import hashlib
import html
import json
import re
import unicodedata

from etl.sample import vocab as V
from etl.sample.recipes import RecipePlan

HOST = "https://www.instructables.com"   # only in og:/canonical metadata, as on the real site
IMG_QUERY = "?auto=webp&amp;fit=bounds&amp;frame=1&amp;width=1024"
THUMB_QUERY = "?auto=webp&amp;crop=1%3A1&amp;frame=1&amp;width=130"
PER_PAGE = 30


def esc(s: str) -> str:
    return html.escape(s, quote=False)


def attr(s: str) -> str:
    return html.escape(s, quote=True)


def slugify(title: str) -> str:
    """'Grandma's Easy Soup' -> 'Grandmas-Easy-Soup' (ASCII, as instructables URLs)."""
    a = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
    words = re.findall(r"[A-Za-z0-9]+", a.replace("'", ""))
    return "-".join(w[:1].upper() + w[1:] for w in words) or "Recipe"


def image_name(*parts) -> str:
    """An instructables-like image id ('F' + 14 base32 chars)."""
    h = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return "F" + base64.b32encode(h).decode()[:14]


def image_dir(seed: int, slug: str) -> str:
    """One upload folder per recipe: /ORIG/<AAA>/<BBBB>/."""
    n = image_name("dir", seed, slug)
    return f"/ORIG/{n[:3]}/{n[3:7]}/"


def member_path(author: str) -> str:
    return "/member/" + author.replace(" ", "+") + "/"


def _ld(obj) -> str:
    return json.dumps(obj, ensure_ascii=False).replace("<", "\\u003c")


def _photoset(alt: str, urls: list[str]) -> str:
    if not urls:
        return ""
    imgs = "".join(f'<img loading="lazy" alt="{attr(alt)}" src="{u}{IMG_QUERY}">' for u in urls)
    return f'<noscript><div class="no-js-photoset">{imgs}</div></noscript>'


def _video(seed_text: str) -> str:
    vid = image_name("video", seed_text)[1:12]
    return (f'<div class="video-container"><iframe class="video-embed" src="https://www.youtube.com/embed/{vid}?rel=0" '
            f'width="620" height="349" frameborder="0" allowfullscreen></iframe></div>')


def _author_promo(plan: RecipePlan, avatar: str, more_by: list[tuple[str, str, str]]) -> str:
    member = member_path(plan.author)
    thumbs = "".join(
        f'<div data-id="" class="promoted-item-thumbnail thumbnail instructable-thumbnail"><div class="image-wrapper">'
        f'<a href="/{slug}/"><img class="lazyload" data-src="{thumb}{THUMB_QUERY}" src="/assets/img/pixel.png" '
        f'alt="{attr(title)}"><noscript><img  src="{thumb}{THUMB_QUERY}" alt="{attr(title)}"/></noscript></a></div></div>'
        for slug, title, thumb in more_by)
    return (f'<div class="author-promo clearfix"><div class="author-promo-row"><div class="byline">'
            f'<a class="avatar" rel="author" href="{member}"><img class="lazyload" data-src="{avatar}{THUMB_QUERY}" '
            f'src="/assets/img/pixel.png" alt="{attr(plan.author)}"><noscript><img  src="{avatar}{THUMB_QUERY}" '
            f'alt="{attr(plan.author)}"/></noscript></a><span class="author-name">By <a class="author" rel="author" '
            f'href="{member}">{esc(plan.author)}</a></span><span class="author-follow"><button class="btn btn-yellow '
            f'follow-btn">Follow</button></span></div></div><div class="recent-ibles promoted-content clearfix ">'
            f'<span class="promoted-items-label">More by the author:</span><div class="promoted-items list-unstyled '
            f'pull-right">{thumbs}</div></div><div class="about about-full">About: I love cooking for friends and family. '
            f'<span class="author-link"><a class="more-link" rel="author" href="{member}">More About '
            f'{esc(plan.author)} &raquo;</a></span></div></div>')


def recipe_page(plan: RecipePlan, avatar: str, more_by: list[tuple[str, str, str]]) -> str:
    """The recipe page. `more_by`: (slug, title, thumbnail url path) of other recipes by the author."""
    slug, title = plan.slug, plan.title
    ch = V.CHANNEL_BY_SLUG.get(plan.channel)
    ch_name = ch.name if ch else plan.channel.replace("-", " ").title()
    cat_name = plan.category.title()
    url = f"{HOST}/{slug}/"
    ch_url = f"/{plan.category}/{plan.channel}/projects/"
    n = len(plan.steps) - 1
    intro = plan.steps[0]
    desc = " ".join(intro.paragraphs_raw)[:300]
    first_img = next((im.url_path for s in plan.steps for im in s.images), "")
    head_img = f"{HOST.replace('www', 'content')}{first_img}" if first_img else ""
    ld_article = {"@context": "https://schema.org", "@type": "Article", "headline": title, "name": title,
                  "description": f"{title}: {desc}", "mainEntityOfPage": {"@type": "WebPage", "@id": url},
                  "author": {"@type": "Organization", "name": "Instructables", "url": HOST},
                  "contributor": {"@type": "Person", "name": plan.author}}
    ld_crumbs = {"@context": "http://schema.org", "@type": "BreadcrumbList", "itemListElement": [
        {"@type": "ListItem", "position": 1, "name": cat_name, "item": {"@type": "WebPage", "@id": f"{HOST}/{plan.category}/"}},
        {"@type": "ListItem", "position": 2, "name": ch_name, "item": {"@type": "WebPage", "@id": HOST + ch_url}}]}
    ld_howto = {"@context": "http://schema.org", "@type": "HowTo", "name": title, "description": f"{title}: {desc}",
                "step": [{"@type": "HowToStep", "name": s.title_raw or f"Step {s.step_idx}",
                          "text": "\n".join(s.paragraphs_raw),
                          "image": (HOST.replace("www", "content") + s.images[0].url_path) if s.images else "",
                          "url": f"{url}#step{s.step_idx}"} for s in plan.steps[1:]]}
    sections = []
    for s in plan.steps:
        urls = [im.url_path for im in s.images]
        media = "".join(_video(f"{slug}:{s.step_idx}:{k}") for k in range(s.n_videos))
        body = "".join(f"<p>{esc(p)}</p>" for p in s.paragraphs_raw)
        if s.step_idx == 0:
            sections.append(
                f'<section id="intro" class="step" data-stepid="S{image_name(slug, 0)[1:14]}"><h2 class="step-title sr-only">'
                f'Introduction: {esc(title)}</h2><div class="mediaset">{media}</div>{_photoset(title, urls)}'
                f'{_author_promo(plan, avatar, more_by)}<div class="step-body">{body}</div></section>')
        else:
            sections.append(
                f'<section id="step{s.step_idx}" class="step" data-stepid="S{image_name(slug, s.step_idx)[1:14]}">'
                f'<h2 class="step-title">Step {s.step_idx}: {esc(s.title_raw)}</h2><div class="mediaset">{media}</div>'
                f'{_photoset(s.title_raw, urls)}<div class="step-body">{body}</div></section>')
    member = member_path(plan.author)
    lang = plan.language
    return (
        f'<!DOCTYPE html><html lang="{lang}" class="no-js is-desktop "><head prefix="og: http://ogp.me/ns# fb: '
        f'http://ogp.me/ns/fb#"><meta charset="utf-8"><title>{esc(title)} : {n} Steps (with Pictures) - Instructables</title>'
        f'<meta property="og:site_name" content="Instructables"/><meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="description" content="{attr(title + ": " + desc)}"/><meta property="og:type" content="article"/>'
        f'<meta property="og:url" content="{url}"/><meta property="og:image" content="{head_img}?auto=webp&amp;frame=1"/>'
        f'<meta property="og:title" content="{attr(title)}"/><meta property="category" content="{plan.category}"/>'
        f'<meta property="channel" content="{plan.channel}"/><meta name="twitter:card" content="summary_large_image">'
        f'<link rel="canonical" href="{url}"/><link rel="shortcut icon" type="image/x-icon" href="/assets/img/siteassets/favicon.ico"/>'
        f'<script type="application/ld+json">{_ld(ld_article)}</script><script type="application/ld+json">{_ld(ld_crumbs)}</script>'
        f'<script type="application/ld+json">{_ld(ld_howto)}</script>'
        f'<link href="/assets/BUNDLES/ible_desktop_css.min.css" rel="stylesheet" type="text/css" media="screen" /></head>'
        f'<body class=""><header id="site-header" class="instructables-header"><div class="logo-nav"><a class="instructables-logo" '
        f'href="/"><img src="/assets/img/instructables-logo-2023.svg" /></a><div class="main-links"><a href="/projects/">Projects</a>'
        f'<a href="/contest/">Contests</a><a href="/search/?q=recipes">Search</a></div></div></header><main>'
        f'<div id="react-container" class=""></div><div class="instructable"><div class="instructable-content">'
        f'<article id="article" class="full-wrapper category-content-{plan.category}"><header class="article-header" '
        f'data-location="header"><h1 class="header-title">{esc(title)}</h1><div class="sub-header"><div class="header-byline">\n'
        f'            By <a href="{member}" rel="author">{esc(plan.author)}</a>\n            \n                in '
        f'<a class="category" href="/{plan.category}/">{esc(cat_name)}</a><a class="channel" href="{ch_url}">{esc(ch_name)}</a>'
        f'</div><div class="header-stats"><p class="svg-views view-count">{(plan.index * 7919) % 90000 + 120:,}</p></div></div>'
        f'<div class="sub-header header-meta-actions"><div class="header-meta"><span class="posted-date"></span>'
        f'<button class="license-btn" data-url="https://creativecommons.org/licenses/by-nc-sa/4.0/"><img alt="license" '
        f'src="/assets/img/license/by-nc-sa_small.png"/></button></div><div id="ible-actions-portal" data-urlstring="{slug}">'
        f'</div></div></header><div class="article-body">{"".join(sections)}</div></article></div>'
        f'<div id="ible-footer-portal" data-urlstring="{slug}"></div></div></main><footer id="footer" class="footer '
        f'footer-desktop footer-cooking"><div class="footer-resources"><span class="title">Resources</span><ul><li>'
        f'<a href="/sitemap/">Sitemap</a></li><li><a href="/contact/">Contact</a></li></ul></div><div class="footer-links">'
        f'<p>\u00a9 2024 Autodesk, Inc.</p></div></footer></body></html>\n')


def listing_page(channel: V.Channel, page: int, n_pages: int, cards: list[tuple[str, str, str, str]]) -> str:
    """Channel listing page `page` (1-based). cards: (slug, title, author, thumbnail url path or '')."""
    base = f"/cooking/{channel.slug}/projects/"
    items = []
    for slug, title, author, thumb in cards:
        img = (f'<a class="ible-thumb" href="/{slug}/"><img src="{thumb}?auto=webp&amp;crop=1%3A1&amp;frame=1&amp;width=320" '
               f'alt="{attr(title)}"></a>') if thumb else ""
        items.append(f'<div class="ible-card"><div class="thumbnail">{img}</div><div class="ible-info">'
                     f'<a class="ible-title" href="/{slug}/">{esc(title)}</a><span class="ible-author">by '
                     f'<a href="{member_path(author)}">{esc(author)}</a></span></div></div>')
    nav = []
    if page > 1:
        prev = base if page == 2 else f"{base}page/{page - 1}/"
        nav.append(f'<a rel="prev" class="prev" href="{prev}">&laquo; Previous</a>')
    nav.append(f'<span class="current">Page {page} of {n_pages}</span>')
    if page < n_pages:
        nav.append(f'<a rel="next" class="next" href="{base}page/{page + 1}/">Next &raquo;</a>')
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{esc(channel.name)} Projects - '
            f'Instructables</title><link rel="canonical" href="{HOST}{base}"/></head><body><header id="site-header">'
            f'<a href="/">Instructables</a> <a href="/search/?q={channel.slug}">Search</a> <a href="/member/login/">Log in</a>'
            f'</header><main><h1 class="category-title">{esc(channel.name)}</h1><div class="category-projects">'
            f'{"".join(items)}</div><div class="pagination">{"".join(nav)}</div></main></body></html>\n')


def category_page(channels: list[V.Channel]) -> str:
    links = "".join(f'<li><a class="channel-link" href="/cooking/{c.slug}/projects/">{esc(c.name)}</a></li>' for c in channels)
    return ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Cooking - Instructables</title></head><body>'
            f'<main><h1>Cooking</h1><ul class="channel-list">{links}</ul></main></body></html>\n')


def home_page() -> str:
    return ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Instructables sample kitchen</title></head>'
            '<body><a href="/cooking/">Cooking</a> <a href="/sitemap.xml">Sitemap</a></body></html>\n')


def sitemap(paths: list[str]) -> str:
    locs = "".join(f"<url><loc>{attr(p)}</loc></url>" for p in paths)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            f"{locs}</urlset>\n")


def robots() -> str:
    return ("User-agent: *\nDisallow: /member/\nDisallow: /search/\nDisallow: /account/\nDisallow: /json-api/\n"
            "\nSitemap: /sitemap.xml\n")
