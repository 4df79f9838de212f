"""The sample-site server: layout mapping, validators, 304s, deterministic faults."""
from __future__ import annotations

import requests

from etl.sample.server import FaultConfig, SiteServer


def _site(tmp_path):
    (tmp_path / "Soup").mkdir()
    (tmp_path / "Soup" / "index.html").write_text("<html>soup</html>")
    (tmp_path / "ORIG" / "A").mkdir(parents=True)
    (tmp_path / "ORIG" / "A" / "x.jpg").write_bytes(b"\xff\xd8jpegish")
    (tmp_path / "robots.txt").write_text("User-agent: *\nDisallow: /member/\n")
    (tmp_path / "sitemap.xml").write_text("<urlset/>")
    return tmp_path


def test_layout_types_and_conditional_get(tmp_path):
    with SiteServer(_site(tmp_path)) as srv:
        assert srv.url.startswith("http://127.0.0.1:")
        r = requests.get(srv.url + "/Soup/?utm=1")
        assert r.status_code == 200 and r.text == "<html>soup</html>"
        assert r.headers["Content-Type"].startswith("text/html")
        assert requests.get(srv.url + "/ORIG/A/x.jpg").headers["Content-Type"] == "image/jpeg"
        assert requests.get(srv.url + "/robots.txt").headers["Content-Type"].startswith("text/plain")
        assert requests.get(srv.url + "/sitemap.xml").headers["Content-Type"] == "application/xml"
        assert requests.get(srv.url + "/Nope/").status_code == 404
        assert requests.get(srv.url + "/%2e%2e/%2e%2e/etc/passwd").status_code == 404
        etag, lm = r.headers["ETag"], r.headers["Last-Modified"]
        assert requests.get(srv.url + "/Soup/", headers={"If-None-Match": etag}).status_code == 304
        assert requests.get(srv.url + "/Soup/", headers={"If-Modified-Since": lm}).status_code == 304
        assert requests.get(srv.url + "/Soup/", headers={"If-None-Match": '"other"'}).status_code == 200
        assert srv.stats["not_modified"] == 2 and srv.stats["not_found"] == 2


def test_faults_are_deterministic_and_transient(tmp_path):
    cfg = FaultConfig(fail_rate=0.25, rate_limit_rate=0.25, truncate_rate=0.25,
                      retry_after_seconds=0.5, max_faults_per_url=2, seed=7)
    assert [cfg.decide("/Soup/", a) for a in range(20)] == [cfg.decide("/Soup/", a) for a in range(20)]
    with SiteServer(_site(tmp_path), faults=cfg) as srv:
        codes = []
        for _ in range(6):
            try:
                r = requests.get(srv.url + "/Soup/", timeout=5)
                codes.append(r.status_code)
                if r.status_code == 429:
                    assert r.headers["Retry-After"] == "0.5"
            except requests.exceptions.RequestException:
                codes.append("cut")
        faults = [c for c in codes if c != 200]
        assert len(faults) <= 2 and codes[-1] == 200      # at most max_faults_per_url, then healthy
        assert srv.stats["429"] + srv.stats["5xx"] + srv.stats["truncated"] == len(faults)


def test_every_fault_kind_fires(tmp_path):
    cfg = FaultConfig(fail_rate=0.2, rate_limit_rate=0.2, slow_rate=0.2, slow_seconds=0.05,
                      truncate_rate=0.2, max_faults_per_url=1, seed=1)
    site = _site(tmp_path)
    for i in range(40):
        (site / f"p{i}.html").write_text("x" * 100)
    with SiteServer(site, faults=cfg) as srv:
        for i in range(40):
            try:
                requests.get(f"{srv.url}/p{i}.html", timeout=5)
            except requests.exceptions.RequestException:
                pass
        assert all(srv.stats[k] > 0 for k in ("429", "5xx", "slow", "truncated", "served"))


def test_the_server_in_a_process_of_its_own_serves_the_same_bytes_and_stops(tmp_path):
    """ProcessSiteServer (the pipeline's sample kitchen): the same answers as the in-process server,
    its process gone after the block, and a missing site raised in the caller."""
    import pytest

    from etl.sample.server import ProcessSiteServer
    site = _site(tmp_path)
    with SiteServer(site) as a:
        want = [(r.status_code, r.content, r.headers.get("ETag"))
                for r in (requests.get(a.url + p) for p in ("/Soup/", "/ORIG/A/x.jpg", "/Nope/"))]
    srv = ProcessSiteServer(site)
    with srv:
        assert srv.url.startswith("http://127.0.0.1:")
        proc = srv._proc
        assert proc.is_alive() and proc.pid != __import__("os").getpid()
        got = [(r.status_code, r.content, r.headers.get("ETag"))
               for r in (requests.get(srv.url + p) for p in ("/Soup/", "/ORIG/A/x.jpg", "/Nope/"))]
        assert got == want and got[0][0] == 200 and got[2][0] == 404
        url = srv.url
    assert not proc.is_alive() and srv._proc is None
    with pytest.raises(requests.ConnectionError):
        requests.get(url + "/Soup/", timeout=2)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        ProcessSiteServer(tmp_path / "no_site")
