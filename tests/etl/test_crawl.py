"""The crawler against a real HTTP server on 127.0.0.1 that injects 429/5xx/slow/truncated faults."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from etl.config import Paths
from etl.crawl import CrawlConfig, Crawler
from etl.http_fetch import FetchConfig, Fetcher, HostPolicy
from etl.sample.server import FaultConfig, SiteServer
from etl.warehouse import connect, table_fingerprint

sys.path.insert(0, str(Path(__file__).resolve().parent))   # site_builder.py next to this file
from site_builder import build_site, recipe_html

REPO = Path(__file__).resolve().parents[2]
FAULTS = FaultConfig(fail_rate=0.1, rate_limit_rate=0.1, slow_rate=0.05, slow_seconds=0.2,
                     truncate_rate=0.1, retry_after_seconds=0.2, max_faults_per_url=2, seed=3)
TIMESTAMPS = {"recipes": ["fetched_at"], "pages": ["fetched_at"], "rejects": ["at"],
              "steps": [], "images": []}


def _config(**kw) -> CrawlConfig:
    fetch = dict(allow_loopback=True, delay_s=0.0, backoff_s=0.02, timeout_s=5)
    fetch.update(kw.pop("fetch", {}))
    kw = {"source": "sample", "workers": 3, "progress": False, **kw}
    return CrawlConfig(fetch=FetchConfig(**fetch), **kw)


def _crawl(con, paths, listing: str, **kw) -> dict:
    c = Crawler(con, paths, _config(**kw))
    try:
        c.crawl_pages(c.discover_listing(listing))
        c.download_images()
        return c.summary()
    finally:
        c.close()


def _fingerprints(con) -> dict:
    return {t: table_fingerprint(con, t, exclude=ex) for t, ex in TIMESTAMPS.items()}


def test_crawl_with_faults_ends_ingested_or_rejected(tmp_path, paths, con):
    truth = build_site(tmp_path / "site")
    with SiteServer(tmp_path / "site", faults=FAULTS) as srv:
        summary = _crawl(con, paths, srv.url + "/cooking/")
        stats = dict(srv.stats)
    assert all(stats[k] > 0 for k in ("429", "5xx", "truncated")), stats
    recipes = dict(con.execute("SELECT recipe_id, coalesce(status_reason, status) FROM recipes").fetchall())
    assert recipes == {**{r: "ok" for r in truth.recipes_ok}, **truth.recipes_rejected}
    steps = dict(con.execute("SELECT recipe_id, count(*) FROM steps GROUP BY 1").fetchall())
    assert steps == truth.recipes_ok
    rejects = set(con.execute("SELECT key, reason FROM rejects WHERE stage = 'ingest'").fetchall())
    assert rejects == set(truth.recipes_rejected.items())
    images = dict(con.execute("SELECT image_id, status FROM images").fetchall())
    assert images == truth.images
    bad = dict(con.execute("SELECT key, reason FROM rejects WHERE stage = 'images'").fetchall())
    assert bad == {i: ("http_404" if s == "missing" else "image_decode_error")
                   for i, s in truth.images.items() if s != "ok"}
    # step image URLs: path-only src resolved against the page, query string stripped, in order
    rows = con.execute("SELECT recipe_id, step_idx, url FROM images ORDER BY recipe_id, step_idx, ord").fetchall()
    for rid, step, url in rows:
        assert url.startswith(srv.url + "/ORIG/") and "?" not in url
        assert url[len(srv.url):] in truth.step_images[f"{rid}/{step}"]
    ok = con.execute("SELECT path, sha256, width FROM images WHERE status = 'ok'").fetchall()
    assert all((paths.home / p).is_file() and len(s) == 64 and w == 24 for p, s, w in ok)
    assert not any(paths.images.rglob(".part-*"))
    # every fetched page is in the crawl log and stored content-addressed
    pages = con.execute("SELECT body_sha256 FROM pages WHERE kind <> 'image' AND body_sha256 IS NOT NULL").fetchall()
    for sha, in pages:
        assert (paths.raw / sha[:2] / sha[2:]).is_file()
    assert summary["images_ok"] == sum(s == "ok" for s in truth.images.values())
    assert summary["rejected"]["ingest/http_404"] == 1


def test_second_run_is_cached_and_idempotent(tmp_path, paths, con):
    build_site(tmp_path / "site", n_recipes=3)
    with SiteServer(tmp_path / "site") as srv:
        _crawl(con, paths, srv.url + "/cooking/")
        before = _fingerprints(con)
        served = srv.stats["served"]
        again = _crawl(con, paths, srv.url + "/cooking/")
        # only robots.txt is fetched again; listings answer 304, pages and images are skipped
        assert srv.stats["served"] == served + 1 and srv.requests_by_path["/robots.txt"] == 2
        assert srv.stats["not_modified"] > 0
    assert again["fetched"] == 0 and again["cached"] == 6 and again["images_ok"] == 0
    assert _fingerprints(con) == before


KILLED_CRAWL = textwrap.dedent("""
    import sys
    sys.path.insert(0, {repo!r}); sys.path.insert(0, {tests!r})
    from test_crawl import _crawl
    from etl.config import Paths
    from etl.warehouse import connect
    paths = Paths.from_env({home!r}).ensure()
    _crawl(connect(paths), paths, {listing!r}, workers=1, fetch=dict(delay_s=0.03))
""")


@pytest.mark.slow      # a crawl killed and run again (~12 s)
def test_killed_crawl_restarts_to_the_same_warehouse(tmp_path):
    build_site(tmp_path / "site", n_recipes=8)
    ref_paths = Paths.from_env(tmp_path / "ref").ensure()
    run_paths = Paths.from_env(tmp_path / "run").ensure()
    with SiteServer(tmp_path / "site", faults=FAULTS) as srv:
        listing = srv.url + "/cooking/"
        ref = connect(ref_paths)
        _crawl(ref, ref_paths, listing)
        total = sum(srv.requests_by_path.values())
        start = total
        script = KILLED_CRAWL.format(repo=str(REPO), tests=str(Path(__file__).parent),
                                     home=str(run_paths.home), listing=listing)
        proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        deadline = time.time() + 60
        while sum(srv.requests_by_path.values()) - start < total // 2 and time.time() < deadline:
            assert proc.poll() is None, "the crawl finished before it could be killed"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        con = connect(run_paths)
        partial = con.execute("SELECT count(*) FROM images WHERE status = 'ok'").fetchone()[0]
        n_ok = ref.execute("SELECT count(*) FROM images WHERE status = 'ok'").fetchone()[0]
        assert partial < n_ok                                       # it really stopped mid-way
        resumed = _crawl(con, run_paths, listing)
        assert resumed["cached"] > 0
        assert _fingerprints(con) == _fingerprints(ref)
        raw = lambda p: sorted(str(f.relative_to(p.raw)) for f in p.raw.rglob("*") if f.is_file())
        assert raw(run_paths) == raw(ref_paths)


KILLED_IMAGES = textwrap.dedent("""
    import sys
    sys.path.insert(0, {repo!r}); sys.path.insert(0, {tests!r})
    from test_crawl import _crawl
    from etl.config import Paths
    from etl.warehouse import connect
    paths = Paths.from_env({home!r}).ensure()
    _crawl(connect(paths), paths, {listing!r}, workers=1, image_batch=4, image_batch_seconds=60,
           fetch=dict(delay_s=0.02))
""")


def test_killed_image_downloads_resume_without_refetching_stored_images(tmp_path):
    """Image results are committed every batch: after a SIGKILL mid-images, the restart fetches only
    the images not committed yet, each once, and none of the committed ones."""
    truth = build_site(tmp_path / "site", n_recipes=6, plant_failures=False)
    paths = Paths.from_env(tmp_path / "run").ensure()
    with SiteServer(tmp_path / "site") as srv:
        listing = srv.url + "/cooking/"
        script = KILLED_IMAGES.format(repo=str(REPO), tests=str(Path(__file__).parent),
                                      home=str(paths.home), listing=listing)
        proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        images = lambda: sum(n for p, n in srv.requests_by_path.items() if p.startswith("/ORIG/"))
        deadline = time.time() + 60
        while images() < 20 and time.time() < deadline:
            assert proc.poll() is None, "the crawl finished before it could be killed"
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        con = connect(paths)
        stored = {u[len(srv.url):] for u, in con.execute(
            "SELECT url FROM images WHERE status = 'ok'").fetchall()}
        assert 8 <= len(stored) < len(truth.images)                    # batches of 4 survived the kill
        before = dict(srv.requests_by_path)
        _crawl(con, paths, listing)
        again = {p: n - before.get(p, 0) for p, n in srv.requests_by_path.items() if p.startswith("/ORIG/")}
    assert all(again.get(p, 0) == 0 for p in stored)                  # nothing stored is downloaded again
    assert sum(again.values()) == len(truth.images) - len(stored)      # the rest once each
    assert con.execute("SELECT count(*) FROM images WHERE status = 'ok'").fetchone()[0] == len(truth.images)


def test_loopback_refused_by_default_allowed_explicitly(tmp_path, paths, con):
    build_site(tmp_path / "site", n_recipes=1, plant_failures=False)
    with SiteServer(tmp_path / "site") as srv:
        summary = _crawl(con, paths, srv.url + "/cooking/", fetch=dict(allow_loopback=False))
        assert summary["rejected"] == {"ingest/host_not_allowed": 1}   # robots + listing never fetched
        assert sum(srv.requests_by_path.values()) == 0
        host = srv.url.split("//")[1]
        summary = _crawl(con, paths, srv.url + "/cooking/", fetch=dict(allow_loopback=False,
                                                                     allow_hosts=(host,)))
        assert summary["loaded"] == 1


def test_host_policy():
    p = HostPolicy()
    assert p.check("https://www.instructables.com/X/") is None
    assert "loopback" in p.check("http://127.0.0.1:8000/X/")
    assert "private-network" in p.check("http://10.1.2.3/X/")
    assert "allow-list" in p.check("https://example.com/X/")
    assert "scheme" in p.check("file:///etc/passwd")
    assert "scheme" in p.check("ftp://127.0.0.1/x")
    assert HostPolicy(allow_loopback=True).check("http://localhost:1/") is None
    assert HostPolicy(allow_hosts=["127.0.0.1"]).check("http://127.0.0.1:5/") is None


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/", "http://127.9.9.9/", "http://[::1]:80/",
                                 "http://localhost/"])
def test_loopback_needs_allow_loopback_only(url):
    assert HostPolicy().check(url) is not None
    assert HostPolicy(allow_loopback=True).check(url) is None
    assert HostPolicy(allow_private_network=True).check(url) is not None


@pytest.mark.parametrize("url", ["http://10.0.0.5/", "http://172.16.3.4/", "http://192.168.1.1/",
                                 "http://100.64.0.1/", "http://[fd12::1]/", "http://[::ffff:10.0.0.5]/"])
def test_private_networks_need_their_own_flag(url):
    assert "private-network" in HostPolicy(allow_loopback=True).check(url)
    assert HostPolicy(allow_private_network=True).check(url) is None


@pytest.mark.parametrize("url", ["http://169.254.169.254/latest/meta-data/", "http://169.254.1.2/",
                                 "http://[fe80::1]/", "http://[fd00:ec2::254]/", "http://100.100.100.200/",
                                 "http://[::ffff:169.254.169.254]/", "http://[64:ff9b::a9fe:a9fe]/",
                                 "http://0.0.0.0/", "http://224.0.0.1/"])
def test_link_local_and_metadata_are_never_allowed(url):
    host = url.split("//")[1].split("/")[0]
    everything = HostPolicy(allow_hosts=[host, host.strip("[]")], allow_loopback=True,
                            allow_private_network=True)
    assert "never" in everything.check(url)


def test_retry_after_is_honoured_and_retries_exhaust(tmp_path):
    site = tmp_path / "site"
    build_site(site, n_recipes=1, plant_failures=False)
    cfg = FetchConfig(allow_loopback=True, delay_s=0, backoff_s=0.01, retries=3)
    with SiteServer(site, faults=FaultConfig(rate_limit_rate=1.0, retry_after_seconds=0.3,
                                             max_faults_per_url=1)) as srv:
        t = time.monotonic()
        res = Fetcher(cfg).fetch(srv.url + "/Test-Recipe-000/")
        assert res.ok and res.attempts == 2 and time.monotonic() - t >= 0.3
    with SiteServer(site, faults=FaultConfig(fail_rate=1.0, max_faults_per_url=99,
                                             retry_after_seconds=0.05)) as srv:
        res = Fetcher(cfg).fetch(srv.url + "/Test-Recipe-000/")
        assert res.reason == "retries_exhausted" and res.attempts == 4 and srv.stats["5xx"] == 4
    with SiteServer(site, faults=FaultConfig(truncate_rate=1.0, max_faults_per_url=99)) as srv:
        res = Fetcher(cfg).fetch(srv.url + "/Test-Recipe-000/")
        assert res.reason == "truncated" and res.body is None


def test_size_and_content_type_limits(tmp_path, paths, con):
    site = tmp_path / "site"
    build_site(site, n_recipes=2, plant_failures=False)
    (site / "Plain-Text").mkdir()
    (site / "notes.txt").write_text("not a page")
    big = recipe_html("Big-One", "Big", "bread", [("i", "x" * 50_000, []), ("s", "y", [])])
    (site / "Big-One").mkdir()
    (site / "Big-One" / "index.html").write_text(big)
    with SiteServer(site) as srv:
        urls = tmp_path / "urls.txt"
        urls.write_text(f"# test list\n{srv.url}/Test-Recipe-000/\n\n{srv.url}/Big-One/\n{srv.url}/notes.txt\n")
        c = Crawler(con, paths, _config(fetch=dict(max_page_bytes=20_000, max_image_bytes=400)))
        c.crawl_pages(c.read_url_file(urls))
        c.download_images()
        c.close()
    rej = dict(con.execute("SELECT key, reason FROM rejects WHERE stage = 'ingest'").fetchall())
    assert rej == {"Big-One": "too_large", "notes.txt": "bad_content_type"}
    statuses = {r for r, in con.execute("SELECT status_reason FROM images WHERE status <> 'ok'").fetchall()}
    assert statuses <= {"too_large"} and con.execute(
        "SELECT count(*) FROM images WHERE status = 'broken'").fetchone()[0] > 0


def test_sitemap_discovery_and_robots(tmp_path, paths, con):
    truth = build_site(tmp_path / "site")
    with SiteServer(tmp_path / "site") as srv:
        c = Crawler(con, paths, _config())
        urls = c.discover_sitemap(srv.url + "/sitemap.xml")
        assert {u[len(srv.url) + 1:-1] for u in urls} == set(truth.recipes_ok) | set(truth.recipes_rejected)
        assert c.robots.sitemaps(srv.url + "/") == [srv.url + "/sitemap.xml"]
        assert not c.robots.allowed(srv.url + "/member/Tester/")
        c.close()


def test_rescrape_fills_missing_images_with_conditional_get(tmp_path, paths, con):
    site = tmp_path / "site"
    truth = build_site(site, n_recipes=2)
    missing = [i for i, s in truth.images.items() if s != "ok"]
    with SiteServer(site) as srv:
        _crawl(con, paths, srv.url + "/cooking/")
        assert con.execute("SELECT count(*) FROM images WHERE status <> 'ok'").fetchone()[0] == 2
        # the site owner fixes the two images; a re-scrape refetches only the affected recipe
        for iid in missing:
            url = con.execute("SELECT url FROM images WHERE image_id = ?", [iid]).fetchone()[0]
            dest = site / url[len(srv.url) + 1:]
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes((site / con.execute(
                "SELECT url FROM images WHERE status = 'ok' LIMIT 1").fetchone()[0][len(srv.url) + 1:]).read_bytes())
        c = Crawler(con, paths, _config())
        targets = c.rescrape_targets(source="sample")
        assert targets == [srv.url + "/Test-Recipe-000/"]
        not_modified = srv.stats["not_modified"]
        c.crawl_pages(targets, rescrape=True)
        c.download_images(retry_failed=True)
        c.close()
        assert srv.stats["not_modified"] == not_modified + 1     # page revalidated, not re-downloaded
    assert con.execute("SELECT count(*) FROM images WHERE status <> 'ok'").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM rejects WHERE stage = 'images'").fetchone()[0] == 0
    assert Crawler(con, paths, _config()).rescrape_targets(source="sample") == []


def test_delay_is_a_per_host_rate_limit(tmp_path):
    build_site(tmp_path / "site", n_recipes=1, plant_failures=False)
    with SiteServer(tmp_path / "site") as srv:
        f = Fetcher(FetchConfig(allow_loopback=True, delay_s=0.1))
        t = time.monotonic()
        for _ in range(4):
            assert f.fetch(srv.url + "/Test-Recipe-000/").ok
        assert time.monotonic() - t >= 0.3


def _crawl_into(root: Path, listing: str, **kw) -> tuple[dict, dict, list[str]]:
    """A crawl into a fresh home under `root`: its summary, table fingerprints and raw files."""
    paths = Paths.from_env(root).ensure()
    con = connect(paths)
    try:
        summary = _crawl(con, paths, listing, **kw)
        raw = sorted(str(f.relative_to(paths.raw)) for f in paths.raw.rglob("*") if f.is_file())
        return summary, _fingerprints(con), raw
    finally:
        con.close()


def test_crawl_in_processes_loads_what_one_process_loads(tmp_path):
    """`processes=2` (chunks of 2 jobs, so pages and images both go to the crawl processes) against a server
    that injects 429s, 5xx, slow and truncated answers: the same rows, rejects and raw files as one process,
    and the crawl processes really fetched (each asks for robots.txt itself)."""
    build_site(tmp_path / "site", n_recipes=6)
    with SiteServer(tmp_path / "site", faults=FAULTS) as srv:
        listing = srv.url + "/cooking/"
        one = _crawl_into(tmp_path / "one", listing)
        robots = srv.requests_by_path["/robots.txt"]
        two = _crawl_into(tmp_path / "two", listing, processes=2, process_chunk=2)
        # the writer's discovery, then each of the 2 processes of the page pool and of the image pool (and
        # the retries of the injected faults): one process asks once
        assert srv.requests_by_path["/robots.txt"] - robots >= 5
    assert two[0] == one[0] and two[0]["loaded"] > 0 and two[0]["rejected_total"] > 0
    assert two[1] == one[1]
    assert two[2] == one[2]


def test_a_crawl_process_killed_mid_crawl_loses_no_job(tmp_path):
    """One crawl process SIGKILLed while it downloads images: its chunks and every chunk still waiting run
    in the writing process instead, and the warehouse ends as a one-process crawl's."""
    import multiprocessing
    import threading

    build_site(tmp_path / "site", n_recipes=6, plant_failures=False)
    with SiteServer(tmp_path / "site") as srv:
        listing = srv.url + "/cooking/"
        one = _crawl_into(tmp_path / "one", listing)
        images = lambda: sum(n for p, n in srv.requests_by_path.items() if p.startswith("/ORIG/"))
        start = images()
        out: dict = {}
        job = threading.Thread(target=lambda: out.update(r=_crawl_into(
            tmp_path / "two", listing, processes=2, process_chunk=2, workers=1, fetch=dict(delay_s=0.01))))
        job.start()
        deadline = time.time() + 60
        while images() - start < 4 and time.time() < deadline:
            time.sleep(0.01)
        kids = multiprocessing.active_children()
        assert kids, "no crawl process to kill"
        os.kill(kids[0].pid, signal.SIGKILL)
        job.join(120)
        assert not job.is_alive()
    assert out["r"][0]["images_ok"] == one[0]["images_ok"] > 0
    assert out["r"][1] == one[1]


def test_crawl_processes_are_checked():
    with pytest.raises(ValueError, match="processes must be >= 1"):
        Crawler(None, None, CrawlConfig(processes=0))
    from flows.pipeline import crawl_process_count as crawl_processes
    assert crawl_processes(3, 1.0) == 3                           # as asked, even for a polite crawl
    assert crawl_processes(None, 1.0) == 1                        # a polite crawl waits on its delay
    assert 1 <= crawl_processes(None, 0.0) <= 4                   # an unthrottled one: the cores, at most 4
    with pytest.raises(ValueError, match="crawl_processes"):
        crawl_processes(0, 0.0)
    from flows.pipeline import pipeline_flow
    with pytest.raises(ValueError, match="crawl_processes must be >= 1"):      # before any stage runs
        pipeline_flow.fn(sample_recipes=5, crawl_processes=0)


def test_crawl_processes_share_one_per_host_rate(tmp_path):
    """With 2 crawl processes each waits 2 x delay between its requests to the host, so the crawl keeps the
    per-host rate of one process: the image requests (the server's log, after the processes started) span at
    least about (images - 2) x delay, where 2 processes each waiting the delay alone would take half that."""
    build_site(tmp_path / "site", n_recipes=4, plant_failures=False)
    delay = 0.04
    with SiteServer(tmp_path / "site") as srv:
        _crawl_into(tmp_path / "two", srv.url + "/cooking/", processes=2, process_chunk=2, fetch=dict(delay_s=delay))
        times = [t for t, path in srv.request_log if path.startswith("/ORIG/")]
    assert len(times) > 30
    assert times[-1] - times[0] >= 0.8 * (len(times) - 2) * delay, (times[-1] - times[0], len(times))


INTERRUPTED_PROCESSES = textwrap.dedent("""
    import sys
    sys.path.insert(0, {repo!r}); sys.path.insert(0, {tests!r})
    from test_crawl import _crawl
    from etl.config import Paths
    from etl.warehouse import connect
    if __name__ == "__main__":        # the crawl processes are spawned: they import this file again
        paths = Paths.from_env({home!r}).ensure()
        _crawl(connect(paths), paths, {listing!r}, workers=1, processes=2, process_chunk=2,
               fetch=dict(delay_s=0.03))
""")


def test_ctrl_c_during_a_process_crawl_stops_it_and_a_rerun_finishes(tmp_path):
    """SIGINT to a crawl on 2 processes (no CLI handler ending its children): the chunks not yet started are
    cancelled, so it stops after the running ones (a few images, not the rest of the crawl); a rerun fetches
    the rest and the warehouse ends complete."""
    truth = build_site(tmp_path / "site", n_recipes=6, plant_failures=False)
    paths = Paths.from_env(tmp_path / "run").ensure()
    with SiteServer(tmp_path / "site") as srv:
        listing = srv.url + "/cooking/"
        script = tmp_path / "crawl.py"
        script.write_text(INTERRUPTED_PROCESSES.format(repo=str(REPO), tests=str(Path(__file__).parent),
                                                       home=str(paths.home), listing=listing))
        proc = subprocess.Popen([sys.executable, str(script)], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                                stderr=subprocess.DEVNULL)
        images = lambda: sum(n for p, n in srv.requests_by_path.items() if p.startswith("/ORIG/"))
        deadline = time.time() + 60
        while images() < 10 and time.time() < deadline:
            assert proc.poll() is None, "the crawl finished before it could be interrupted"
            time.sleep(0.01)
        at = images()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) != 0
        after = images()
        assert after - at <= 12 and after < len(truth.images), (at, after, len(truth.images))
        con = connect(paths)
        _crawl(con, paths, listing, processes=2, process_chunk=2)
    assert con.execute("SELECT count(*) FROM images WHERE status = 'ok'").fetchone()[0] == len(truth.images)
