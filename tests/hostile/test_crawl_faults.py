"""Hostile input for the crawler, served by real HTTP servers on 127.0.0.1: no single page stops a
crawl, redirects are checked hop by hop (host policy and robots.txt), slugs cannot write outside
images/, and arbitrary markup makes the parser raise ParseError or nothing."""
from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from site_builder import build_site, recipe_html

from etl.crawl import CrawlConfig, Crawler, UnsafePath, contained_path
from etl.http_fetch import FetchConfig
from etl.parse import (
    MAX_DEPTH,
    MAX_PAGE_BYTES,
    ParseError,
    parse_page,
    recipe_id_problem,
)
from etl.records import RecipeRecord
from etl.sample.server import SiteServer

DEEP = 2000


def _crawler(con, paths, **fetch) -> Crawler:
    cfg = {"allow_loopback": True, "delay_s": 0.0, "backoff_s": 0.01, "timeout_s": 5, "retries": 1}
    return Crawler(con, paths, CrawlConfig(source="sample", workers=2, progress=False,
                                           fetch=FetchConfig(**{**cfg, **fetch})))


def _deep_page(slug: str) -> str:
    """A recipe page whose first step body sits inside DEEP nested divs."""
    html = recipe_html(slug, "Deep", "bread", [("intro", "Hello", []), ("one", "Stir well", [])])
    return html.replace('<div class="step-body"><p>Hello</p></div>',
                        '<div class="step-body">' + "<div>" * DEEP + "<p>Hello</p>" + "</div>" * DEEP + "</div>")


def _files_outside(home: Path, allowed: tuple[str, ...]) -> list[Path]:
    return [f for f in home.rglob("*") if f.is_file() and f.relative_to(home).parts[0] not in allowed]


# ----------------------------------------------------------------------------- one page cannot stop a crawl

def test_deeply_nested_page_is_a_reject_and_the_crawl_goes_on(tmp_path, paths, con):
    site = tmp_path / "site"
    truth = build_site(site, n_recipes=4, plant_failures=False)
    (site / "Deep-Nest").mkdir()
    (site / "Deep-Nest" / "index.html").write_text(_deep_page("Deep-Nest"))
    with SiteServer(site) as srv:
        urls = tmp_path / "urls.txt"
        urls.write_text("".join(f"{srv.url}/{s}/\n" for s in [*truth.recipes_ok, "Deep-Nest"]))
        c = _crawler(con, paths)
        c.crawl_pages(c.read_url_file(urls))
        summary = c.download_images()
        c.close()
    rejects = con.execute("SELECT key, reason, detail FROM rejects WHERE stage = 'ingest'").fetchall()
    assert [(k, r) for k, r, _ in rejects] == [("Deep-Nest", "too_deep")]
    assert str(MAX_DEPTH) in rejects[0][2]
    loaded = {r for r, in con.execute("SELECT recipe_id FROM recipes WHERE status = 'ok'").fetchall()}
    assert loaded == set(truth.recipes_ok)
    assert summary["images_ok"] == len(truth.images) and summary["rejected_total"] == 1
    assert con.execute("SELECT status, status_reason FROM recipes WHERE recipe_id = 'Deep-Nest'"
                       ).fetchone() == ("rejected", "too_deep")


def test_a_record_the_warehouse_refuses_is_a_load_error_and_its_batch_loads(tmp_path, paths, con):
    """A batch holding one record that cannot be stored (a lone surrogate cannot be UTF-8 encoded)
    loads every other record; the bad one becomes a `load_error` reject with the exception class."""
    from etl.crawl import PageOutcome
    from etl.records import StepRecord
    c = _crawler(con, paths)
    good = [PageOutcome(url=f"http://h/R{i}/", recipe_id=f"R{i}",
                        record=RecipeRecord(f"R{i}", f"http://h/R{i}/", f"Title {i}",
                                            steps=[StepRecord(0, "t", "b", [])])) for i in range(3)]
    bad = PageOutcome(url="http://h/Bad/", recipe_id="Bad",
                      record=RecipeRecord("Bad", "http://h/Bad/", "Title \ud800",
                                          steps=[StepRecord(0, "t", "b", [])]))
    c._flush_pages([*good, bad], {})
    c.close()
    assert {r for r, in con.execute("SELECT recipe_id FROM recipes WHERE status = 'ok'").fetchall()} == \
        {"R0", "R1", "R2"}
    (reason, detail), = con.execute("SELECT reason, detail FROM rejects WHERE key = 'Bad'").fetchall()
    assert reason == "load_error" and "UnicodeEncodeError: " in detail


# ----------------------------------------------------------------------------- redirects

class _Redirects:
    """A server that answers 302 for the paths it is given (Location as given), 404 otherwise."""

    def __init__(self, targets: dict[str, str]):
        self.targets = targets
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                loc = outer.targets.get(self.path)
                self.send_response(302 if loc else 404)
                if loc:
                    self.send_header("Location", loc)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def site_and_redirects(tmp_path):
    site = tmp_path / "site"
    build_site(site, n_recipes=1)   # robots.txt disallows /Private-Stew/
    with SiteServer(site) as srv, _Redirects({
            "/Redirect-Ok/": f"{srv.url}/Test-Recipe-000/", "/Redirect-Robots/": f"{srv.url}/Private-Stew/",
            "/Redirect-Private/": "http://10.0.0.5/Stew/",
            "/Redirect-Metadata/": "http://169.254.169.254/latest/meta-data/"}) as red:
        yield srv, red


def _crawl_one(con, paths, url: str, **fetch) -> tuple[str, str]:
    c = _crawler(con, paths, **fetch)
    c.crawl_pages([url])
    c.close()
    row = con.execute("SELECT coalesce(status_reason, status) FROM recipes WHERE url = ?", [url]).fetchone()
    detail = con.execute("SELECT detail FROM rejects WHERE stage = 'ingest' AND detail LIKE ?",
                         [url + "%"]).fetchone()
    return row[0], detail[0] if detail else ""


def test_redirect_to_an_allowed_page_is_followed(site_and_redirects, paths, con):
    srv, red = site_and_redirects
    assert _crawl_one(con, paths, f"{red.url}/Redirect-Ok/")[0] == "ok"
    assert srv.requests_by_path["/Test-Recipe-000/"] == 1


def test_redirect_to_a_robots_disallowed_path_is_not_fetched(site_and_redirects, paths, con):
    srv, red = site_and_redirects
    reason, detail = _crawl_one(con, paths, f"{red.url}/Redirect-Robots/")
    assert reason == "robots_disallowed" and "redirect to" in detail
    assert srv.requests_by_path["/Private-Stew/"] == 0 and srv.requests_by_path["/robots.txt"] == 1
    assert con.execute("SELECT count(*) FROM pages WHERE url LIKE '%Private-Stew%'").fetchone()[0] == 0


def test_redirect_into_a_private_network_needs_allow_private_network(site_and_redirects, paths, con):
    _, red = site_and_redirects
    reason, detail = _crawl_one(con, paths, f"{red.url}/Redirect-Private/")
    assert reason == "host_not_allowed" and "10.0.0.5" in detail and "private-network" in detail


@pytest.mark.parametrize("flags", [{}, {"allow_private_network": True},
                                   {"allow_private_network": True, "allow_hosts": ("169.254.169.254",)}])
def test_redirect_to_cloud_metadata_is_always_refused(site_and_redirects, paths, con, flags):
    _, red = site_and_redirects
    reason, detail = _crawl_one(con, paths, f"{red.url}/Redirect-Metadata/", **flags)
    assert reason == "host_not_allowed" and "169.254.169.254" in detail and "never" in detail


# ----------------------------------------------------------------------------- paths

def test_dot_dot_url_is_a_reject_and_nothing_is_written_outside_images(tmp_path, paths, con):
    site = tmp_path / "site"
    build_site(site, n_recipes=1, plant_failures=False)
    with SiteServer(site) as srv:
        urls = tmp_path / "urls.txt"
        urls.write_text(f"{srv.url}/../\n{srv.url}/./\n{srv.url}/Test-Recipe-000/\n")
        c = _crawler(con, paths)
        c.crawl_pages(c.read_url_file(urls))
        summary = c.download_images()
        c.close()
        assert sum(n for p, n in srv.requests_by_path.items() if p != "/robots.txt") == 1 + summary["images_ok"]
    rejects = dict(con.execute("SELECT key, reason FROM rejects WHERE stage = 'ingest'").fetchall())
    assert rejects == {f"{srv.url}/../": "bad_recipe_id", f"{srv.url}/./": "bad_recipe_id"}
    assert con.execute("SELECT count(*) FROM recipes WHERE recipe_id IN ('.', '..')").fetchone()[0] == 0
    assert summary["images_ok"] > 0
    assert _files_outside(paths.home, ("images", "raw", "warehouse.duckdb", "warehouse.duckdb.wal")) == []
    assert not list(tmp_path.glob("*.jpg")) and not list(paths.home.glob("*.jpg"))


def test_contained_path_refuses_escapes(tmp_path):
    base = tmp_path / "images"
    base.mkdir()
    assert contained_path(base, "Egg-Drop", "Egg-Drop_0_0.jpg") == base / "Egg-Drop" / "Egg-Drop_0_0.jpg"
    for parts in [("..", "x.jpg"), (".", "x.jpg"), ("a/../..", "x"), ("", "x"), ("a\\b", "x")]:
        with pytest.raises(UnsafePath):
            contained_path(base, *parts)
    (base / "link").symlink_to(tmp_path)           # a symlink planted inside points outside
    with pytest.raises(UnsafePath):
        contained_path(base, "link", "x.jpg")
    (base / "Egg-Drop").mkdir()
    (base / "Egg-Drop" / "leaf.jpg").symlink_to(tmp_path / "outside.jpg")    # the file itself a link out
    with pytest.raises(UnsafePath):
        contained_path(base, "Egg-Drop", "leaf.jpg")
    (base / "inner").symlink_to(base / "Egg-Drop")   # a link that stays inside is a path like any other
    assert contained_path(base, "inner", "x.jpg") == base / "inner" / "x.jpg"
    (tmp_path / "alias").symlink_to(base)            # base reached through a link: its plain names are inside
    assert contained_path(tmp_path / "alias", "Egg-Drop", "y.jpg") == tmp_path / "alias" / "Egg-Drop" / "y.jpg"


# ----------------------------------------------------------------------------- property-based fuzz

TAGS = ["div", "p", "span", "b", "section", "h2", "ul", "li", "noscript", "script", "br", "img", "a",
        "table", "tr", "td", "iframe", "meta", "link", "template"]
ATTRS = ['class="step"', 'class="step-body"', 'class="step-title"', 'class="article-body"',
         'class="no-js-photoset"', 'class="photoset"', 'class="header-title"', 'rel="author"',
         'rel="canonical" href="http://127.0.0.1:1/Fuzz/"', 'src="/a.jpg?x=1"', 'src="http://[bad/x.jpg"',
         'data-src="data:image/png;base64,AA"', 'property="og:url" content="/../"',
         'type="application/ld+json"', 'href="javascript:x"', 'class="license-btn" data-url=""']
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20) | st.sampled_from(
    ["&amp;", "&#0;", "&#xD800;", "<!--", "]]>", "<![CDATA[x", '{"@type": "HowTo", "step": [{"text": 1}]}',
     "[" * 50, "</", "\x00", "Step 1: ", "\r\n"])


def _element(children):
    return st.tuples(st.sampled_from(TAGS), st.lists(st.sampled_from(ATTRS), max_size=2),
                     st.lists(children, max_size=4), st.booleans()).map(
        lambda t: f"<{t[0]} {' '.join(t[1])}>" + "".join(t[2]) + (f"</{t[0]}>" if t[3] else ""))


HTML = st.recursive(TEXT, _element, max_leaves=40)
DOCS = st.one_of(
    st.tuples(HTML, st.integers(0, 10_000)).map(lambda t: t[0][: t[1]]),   # random markup, cut anywhere
    st.integers(1, 5000).map(lambda n: _page_wrapper("<div>" * n + "x")),   # deep (unclosed) markup
    st.binary(max_size=200),
)
URLS = st.sampled_from([None, "http://127.0.0.1:1/Fuzz/", "http://127.0.0.1:1/../", "http://[x/",
                        "http://127.0.0.1:1/", "https://www.instructables.com/id/Fuzz/"])


def _page_wrapper(body: str) -> str:
    return ('<html><body><div class="article-body"><section class="step"><h2 class="step-title">T</h2>'
            f'<div class="step-body">{body}</div></section></div></body></html>')


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=DOCS, url=URLS, backend=st.sampled_from(["lxml", "html.parser"]))
def test_parse_page_raises_nothing_but_parse_error(doc, url, backend):
    try:
        rec = parse_page(doc, url, backend=backend)
    except ParseError as e:
        assert e.reason in {"parse_error", "no_steps", "too_large", "too_deep", "bad_recipe_id"}
        return
    assert recipe_id_problem(rec.recipe_id) is None
    assert [s.step_idx for s in rec.steps] == list(range(len(rec.steps)))
    assert all(isinstance(s.body, str) and isinstance(s.title, str) for s in rec.steps)
    assert all(isinstance(u, str) for s in rec.steps for u in s.images)
    assert rec.author is None or isinstance(rec.author, str)


# ----------------------------------------------------------------------------- the CLI

MRQA = str(Path(sys.executable).parent / "mrqa")
REPO = Path(__file__).resolve().parents[2]


def test_mrqa_parse_deep_and_oversize_pages_are_clean_errors(tmp_path, run_mrqa):
    deep = tmp_path / "deep.html"
    deep.write_text(_deep_page("Deep-Nest"))
    error = run_mrqa("parse", deep, "--url", "http://127.0.0.1:1/Deep-Nest/", home=tmp_path / "home").assert_refused()
    assert "too_deep" in error
    big = tmp_path / "big.html"
    with big.open("wb") as f:
        f.truncate(MAX_PAGE_BYTES + 1)   # sparse: nothing is read past the size check
    error = run_mrqa("parse", big, home=tmp_path / "home").assert_refused()
    assert "too_large" in error and str(MAX_PAGE_BYTES) in error


@pytest.mark.parametrize("args", [["--max-pages", "-1"], ["--max-pages", "0"], ["--workers", "0"],
                                  ["--delay", "-1"]])
def test_mrqa_ingest_refuses_negative_counts(tmp_path, run_mrqa, args):
    r = run_mrqa("ingest", "instructables", "--listing", "http://127.0.0.1:1/cooking/", *args,
                 home=tmp_path / "home")
    assert r.rc == 2 and "Traceback" not in r.stderr and args[0] in r.stderr, r.stderr[-2000:]


def test_mrqa_embed_unknown_encoder_is_one_clean_error(tmp_path, run_mrqa):
    r = run_mrqa("embed", "--encoder", "no-such-encoder", "--no-train", home=tmp_path / "home")
    assert "no-such-encoder" in r.assert_refused()


@pytest.mark.slow      # two CLI processes (~14 s)
def test_mrqa_embed_with_no_photos_to_train_on_says_what_to_do(tmp_path, run_mrqa, recipeqa_doc):
    """RecipeQA records imported without their images leave the default encoder nothing to train on: one
    line naming the ways out (photos, or real weights), not a traceback."""
    import json
    f = tmp_path / "train.json"
    f.write_text(json.dumps(recipeqa_doc("toy-soup", split="train")))
    home = tmp_path / "home"
    assert run_mrqa("ingest", "recipeqa", f, home=home).rc == 0
    error = run_mrqa("embed", home=home).assert_refused()
    assert "0 train step(s) with a readable image" in error and "--images" in error and "encoder add" in error


# with a temporary Prefect server (~19 s and ~27 s) the two cases are slow; the direct run is not
@pytest.mark.parametrize("mode", [pytest.param("--prefect", marks=pytest.mark.slow), "--no-prefect",
                                  pytest.param("stalled", marks=pytest.mark.slow)])
def test_sigterm_ends_the_cli_and_its_prefect_server(tmp_path, mode):
    """A long `mrqa ingest` gets SIGTERM: it exits 143 and no child process (with `--prefect` the
    temporary Prefect server, uvicorn; pool workers) outlives it. Run directly, it starts no server.
    "stalled": `--prefect` with the API server stopped (SIGSTOP) just before the signal. Prefect's engine
    handles SIGTERM first and reports the crash to that server, which never answers; the CLI still ends,
    by its backstop, 10 s after the signal (it waited for minutes before the backstop)."""
    import psutil
    build_site(tmp_path / "site", n_recipes=6, plant_failures=False)
    with SiteServer(tmp_path / "site") as srv:
        proc = subprocess.Popen([MRQA, "--home", str(tmp_path / "home"),
                                 "--no-prefect" if mode == "--no-prefect" else "--prefect", "ingest", "instructables",
                                 "--listing", srv.url + "/cooking/", "--allow-loopback", "--delay", "0.5",
                                 "--source", "sample", "--no-progress"],
                                cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 240
        while srv.requests_by_path["/cooking/"] == 0 and time.time() < deadline:   # the flow is crawling
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            time.sleep(0.1)
        kids = psutil.Process(proc.pid).children(recursive=True)
        servers = [k for k in kids if "uvicorn" in " ".join(k.cmdline())]
        assert bool(servers) == (mode != "--no-prefect")
        if mode == "stalled":
            for k in servers:
                k.suspend()
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(timeout=30) == 143
        finally:
            for k in servers:           # never leave a stopped server (or the CLI) behind, whatever failed
                if k.is_running():
                    k.kill()
            if proc.poll() is None:
                proc.kill()
        took = time.monotonic() - t0
        _, alive = psutil.wait_procs(kids, timeout=10)
        assert [k for k in alive if k.status() != psutil.STATUS_ZOMBIE] == []
        err = proc.stderr.read()
        assert "Traceback" not in err
        if mode == "stalled":
            assert "10 s later: the flow engine had not let the process end" in err and took >= 10, (took, err[-500:])
