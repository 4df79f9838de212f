"""The page parser on the real instructables fixture page and on small markup variants."""
from __future__ import annotations

import json

import pytest
from bs4 import BeautifulSoup

from etl.parse import (
    MAX_DEPTH,
    MAX_PAGE_BYTES,
    ParseError,
    block_text,
    nesting_depth,
    normalise_image_url,
    parse_page,
    recipe_id_from_url,
    recipe_id_problem,
)

PAGE = "instructables/egg-drop-chicken-noodle-soup.html"
CDN = "https://content.instructables.com/"
EXPECTED_TITLES = ["Egg Drop Chicken Noodle Soup", "Ingredients", "Egg Drop", "Shred", "Boil",
                   "Corn Startch", "", "Egg Drop", "Garnish"]
EXPECTED_IMAGES = {
    0: ["FTV/TE0T/IHF6Q6ON/FTVTE0TIHF6Q6ON.jpg", "FHI/QT7A/IHF6Q4Q2/FHIQT7AIHF6Q4Q2.jpg"],
    1: [],
    2: ["FDG/1OWW/IHF6Q4P9/FDG1OWWIHF6Q4P9.jpg", "F2Q/5WNV/IHF6Q4PK/F2Q5WNVIHF6Q4PK.jpg"],
    3: ["FL0/S384/IHF6Q4PZ/FL0S384IHF6Q4PZ.jpg"],
    4: ["FL8/V8CW/IHF6Q4PN/FL8V8CWIHF6Q4PN.jpg"],
    5: ["FFL/F5D4/IHF6Q4PQ/FFLF5D4IHF6Q4PQ.jpg", "FF1/I0MH/IHF6Q4PR/FF1I0MHIHF6Q4PR.jpg"],
    6: ["FLP/7809/IHF6Q4PS/FLP7809IHF6Q4PS.jpg"],
    7: ["FIF/OY8L/IHF6Q4PY/FIFOY8LIHF6Q4PY.jpg", "FXW/YIWI/IHF6Q4PX/FXWYIWIIHF6Q4PX.jpg"],
    8: ["FAA/9VUA/IHF6Q4Q0/FAA9VUAIHF6Q4Q0.jpg", "FUG/KXRL/IHF6Q4Q1/FUGKXRLIHF6Q4Q1.jpg",
        "FVR/U9KU/IHF6Q4Q3/FVRU9KUIHF6Q4Q3.jpg"],
}
AVATAR_AND_MORE_BY = ["F0U/PGMH/IIXFCOE9/F0UPGMHIIXFCOE9.jpg", "FT2/80DE/L1RVD89A/FT280DEL1RVD89A.jpg",
                      "F7P/8KL7/L125G1FM/F7P8KL7L125G1FM.jpg", "FIH/R3KX/L06PXL18/FIHR3KXL06PXL18.jpg"]


@pytest.fixture
def fixture_html(shared_fixtures):
    return (shared_fixtures / PAGE).read_bytes()


@pytest.mark.parametrize("backend", ["lxml", "html.parser"])
def test_fixture_page_exact_fields(fixture_html, backend):
    rec = parse_page(fixture_html, backend=backend)
    assert rec.recipe_id == "Egg-Drop-Chicken-Noodle-Soup"
    assert rec.url == "https://www.instructables.com/Egg-Drop-Chicken-Noodle-Soup/"
    assert rec.title == "Egg Drop Chicken Noodle Soup"
    assert rec.author == "Passion Make"
    assert rec.category == "cooking"
    assert rec.channel == "soups-and-stews"
    assert rec.license == "https://creativecommons.org/licenses/by-nc-sa/4.0/"
    assert len(rec.steps) == 9
    assert [s.step_idx for s in rec.steps] == list(range(9))
    assert [s.title for s in rec.steps] == EXPECTED_TITLES
    assert {s.step_idx: s.images for s in rec.steps} == {
        k: [CDN + p for p in v] for k, v in EXPECTED_IMAGES.items()}
    assert all(s.n_videos == 0 for s in rec.steps)


def test_fixture_page_bodies(fixture_html):
    steps = parse_page(fixture_html).steps
    assert steps[0].body.startswith("This classic Asian one-dish recipe is filling enough")
    assert steps[0].body.endswith("light-tasting and satisfying both at once.")
    assert "More by the author" not in steps[0].body and "About:" not in steps[0].body
    # one line per paragraph, whitespace collapsed
    assert steps[1].body.split("\n")[:5] == ["Preparation Time: 10 minutes", "Cooking Time: 15 minutes",
                                             "Serves: 5", "4 cups chicken broth", "1 1/2 cups water"]
    assert steps[2].body == ("Beat the egg well.\nEgg drop soup is noted for its strands of shredded egg. "
                             "To achieve this characteristic look and texture, make sure you blend the "
                             "egg mixture well, and stir it slowly into the broth")
    assert steps[8].body == "Remove from the heat; stir in onion and chicken. Serve it hot."


def test_images_only_from_step_photosets(fixture_html):
    rec = parse_page(fixture_html)
    urls = [u for s in rec.steps for u in s.images]
    assert len(urls) == 14 == len(set(urls))
    assert not any("?" in u for u in urls)
    assert not set(CDN + p for p in AVATAR_AND_MORE_BY) & set(urls)
    # the raw page does contain those thumbnails: the parser excludes them, not the fixture
    text = fixture_html.decode()
    assert all(p in text for p in AVATAR_AND_MORE_BY)


def test_json_output_shape(fixture_html):
    d = json.loads(json.dumps(parse_page(fixture_html).to_json()))
    assert set(d) >= {"recipe_id", "url", "title", "author", "category", "channel", "license", "steps"}
    assert set(d["steps"][0]) >= {"step_idx", "title", "body", "images"}


def test_howto_fallback_when_no_sections(fixture_html):
    text = fixture_html.decode()
    start, end = text.index('<div class="article-body">'), text.index("</article>")
    rec = parse_page(text[:start] + text[end:])
    assert rec.title == "Egg Drop Chicken Noodle Soup"
    assert len(rec.steps) == 9
    assert [s.title for s in rec.steps[1:4]] == ["Ingredients", "Egg Drop", "Shred"]
    assert rec.steps[2].images == [CDN + "FDG/1OWW/IHF6Q4P9/FDG1OWWIHF6Q4P9.jpg"]


def test_relative_images_resolve_against_page_url_and_videos_count():
    html = ('<html><head><meta property="category" content="cooking"></head><body>'
            '<h1 class="header-title">T</h1><div class="article-body">'
            '<section id="intro" class="step"><h2 class="step-title">Introduction: T</h2>'
            '<noscript><div class="no-js-photoset"><img src="/ORIG/F3K/AB12/XYZ.jpg?auto=webp&frame=1&width=600">'
            '<img src="/ORIG/F3K/AB12/XYZ.jpg?width=300"></div></noscript>'
            '<div class="step-body"><p>Hi <b>there</b></p></div></section>'
            '<section id="step1" class="step"><h2 class="step-title">Step 1: Go</h2>'
            '<iframe src="https://www.youtube.com/embed/x"></iframe><video src="v.mp4"></video>'
            '<div class="step-body"><p>a<br>b</p></div></section></div></body></html>')
    rec = parse_page(html, url="http://127.0.0.1:8000/Some-Slug/")
    assert rec.recipe_id == "Some-Slug"
    assert rec.steps[0].images == ["http://127.0.0.1:8000/ORIG/F3K/AB12/XYZ.jpg"]
    assert rec.steps[0].body == "Hi there"
    assert rec.steps[1].title == "Go" and rec.steps[1].body == "a\nb" and rec.steps[1].n_videos == 2


def test_old_id_urls_and_normalisation():
    assert recipe_id_from_url("https://www.instructables.com/id/Bacon-Pancake-Poppers/") == "Bacon-Pancake-Poppers"
    assert recipe_id_from_url("/Egg-Drop/?x=1") == "Egg-Drop"
    assert normalise_image_url("/a/b.jpg?w=1#f", "http://h:1/X/") == "http://h:1/a/b.jpg"


@pytest.mark.parametrize("html,reason", [
    ("", "parse_error"),
    ("<html><body><h1 class='header-title'>No steps</h1></body></html>", "no_steps"),
])
def test_parse_errors_carry_a_reason(html, reason):
    with pytest.raises(ParseError) as e:
        parse_page(html, url="https://www.instructables.com/X/")
    assert e.value.reason == reason


def test_no_url_and_no_canonical_is_a_parse_error():
    with pytest.raises(ParseError) as e:
        parse_page("<html><body><section class='step'></section></body></html>")
    assert e.value.reason == "parse_error"


def _page_with_body(body_html: str) -> str:
    return ('<html><body><div class="article-body"><section id="intro" class="step">'
            '<h2 class="step-title">Introduction: T</h2>'
            f'<div class="step-body">{body_html}</div></section></div></body></html>')


def test_block_text_walks_deep_markup_without_recursion():
    # 2,000 nested divs: the old recursive walker raised RecursionError here
    deep = "<div>" * 2000 + "<p>Stir <b>well</b></p>" + "</div>" * 2000
    soup = BeautifulSoup(f'<div class="step-body">{deep}<p>Serve</p></div>', "lxml")
    assert nesting_depth(soup, 10_000) > 2000
    assert block_text(soup.find("div", class_="step-body"), max_depth=10_000) == "Stir well\nServe"
    with pytest.raises(ParseError) as e:
        block_text(soup.find("div", class_="step-body"))
    assert e.value.reason == "too_deep"


@pytest.mark.parametrize("backend", ["lxml", "html.parser"])
def test_deeply_nested_page_is_too_deep(backend):
    html = _page_with_body("<div>" * 2000 + "x" + "</div>" * 2000)
    with pytest.raises(ParseError) as e:
        parse_page(html, url="http://127.0.0.1:8000/Deep/", backend=backend)
    assert e.value.reason == "too_deep" and str(MAX_DEPTH) in e.value.detail
    # just under the limit still parses, with the same text as flat markup
    n = MAX_DEPTH - 10
    rec = parse_page(_page_with_body("<div>" * n + "<p>a</p><p>b</p>" + "</div>" * n),
                     url="http://127.0.0.1:8000/Deep/", backend=backend)
    assert rec.steps[0].body == "a\nb"


def test_oversize_page_is_too_large():
    html = _page_with_body("<p>" + "x" * MAX_PAGE_BYTES + "</p>")
    with pytest.raises(ParseError) as e:
        parse_page(html, url="http://127.0.0.1:8000/Big/")
    assert e.value.reason == "too_large"


@pytest.mark.parametrize("rid,ok", [("Egg-Drop", True), ("..", False), (".", False), ("", False),
                                    (None, False), ("a\\b", False), ("a/b", False), ("x\x00y", False),
                                    ("..a", True), ("%2e%2e", True)])
def test_recipe_id_problem(rid, ok):
    assert (recipe_id_problem(rid) is None) == ok


def test_dot_dot_slug_is_a_bad_recipe_id():
    with pytest.raises(ParseError) as e:
        parse_page(_page_with_body("<p>a</p>"), url="http://127.0.0.1:8000/../")
    assert e.value.reason == "bad_recipe_id"


def test_malformed_links_and_json_ld_are_skipped():
    html = ('<html><head><script type="application/ld+json">' + "[" * 5000 + "]" * 5000 + '</script>'
            '<script type="application/ld+json">{"@type": "HowTo", "name": 5, "step": 7, "@graph": 3}</script>'
            '</head><body><div class="article-body"><section class="step"><h2 class="step-title">T</h2>'
            '<noscript><div class="no-js-photoset"><img src="http://[oops/a.jpg"><img src="/ok.jpg"></div>'
            '</noscript><div class="step-body"><p>a</p></div></section></div></body></html>')
    rec = parse_page(html, url="http://127.0.0.1:8000/Odd/")
    assert rec.steps[0].images == ["http://127.0.0.1:8000/ok.jpg"]
    assert recipe_id_from_url("http://[oops/X/") is None
