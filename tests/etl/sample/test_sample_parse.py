"""The real parser (etl.parse) reads every generated page back into the ground truth, over HTTP
from the real site server too (the lead's full crawl test builds on this)."""
from __future__ import annotations

import re
from urllib.parse import urljoin

import requests

from etl.parse import parse_page
from etl.sample.server import SiteServer


def _parsed_text(raw: str) -> str:
    """What a parser shows of raw text: whitespace collapsed per line, empty lines dropped."""
    lines = (" ".join(ln.split()) for ln in raw.split("\n"))
    return "\n".join(ln for ln in lines if ln)


def test_parser_reproduces_ground_truth_of_every_page(sample_build):
    out, _, gt = sample_build
    base = "http://127.0.0.1:8000"
    n_pages = n_steps = n_images = 0
    for g in gt:
        page = out / "site" / g["recipe_id"] / "index.html"
        if g["expected"]["reason"] == "http_404":
            continue
        rec = parse_page(page.read_bytes(), base + g["url_path"])
        assert rec.recipe_id == g["recipe_id"]
        assert (rec.title, rec.author, rec.category, rec.channel) == \
            (g["title"], g["author"], g["category"], g["channel"])
        assert [s.step_idx for s in rec.steps] == [s["step_idx"] for s in g["steps"]]
        for s, e in zip(rec.steps, g["steps"]):
            assert s.title == " ".join(e["title_raw"].split())
            assert s.body == _parsed_text(e["body_raw"])
            assert s.images == [base + im["url_path"] for im in e["images"]]
            assert s.n_videos == e["n_videos"]
            n_images += len(s.images)
        n_pages += 1
        n_steps += len(rec.steps)
    print(f"\nparsed {n_pages} pages, {n_steps} steps, {n_images} image URLs: all match the ground truth")


def test_served_site_is_crawlable(sample_build):
    out, _, gt = sample_build
    with SiteServer(out / "site") as srv:
        robots = requests.get(srv.url + "/robots.txt", timeout=5)
        assert robots.status_code == 200 and "Disallow: /member/" in robots.text
        sitemap = requests.get(srv.url + "/sitemap.xml", timeout=5)
        assert sitemap.headers["Content-Type"].startswith("application/xml")
        locs = re.findall(r"<loc>(.*?)</loc>", sitemap.text)
        assert sorted(locs) == sorted(g["url_path"] for g in gt)
        # follow every channel listing through its rel="next" pages
        cooking = requests.get(srv.url + "/cooking/", timeout=5).text
        linked = set()
        for ch in re.findall(r'href="(/cooking/[^"]+/projects/)"', cooking):
            url = srv.url + ch
            while url:
                html = requests.get(url, timeout=5).text
                linked |= set(re.findall(r'class="ible-title" href="([^"]+)"', html))
                nxt = re.search(r'rel="next"[^>]*href="([^"]+)"', html)
                url = urljoin(srv.url, nxt.group(1)) if nxt else None
        assert linked == {g["url_path"] for g in gt}
        for g in gt[:10]:
            r = requests.get(srv.url + g["url_path"], timeout=5)
            assert r.status_code == (404 if g["expected"]["reason"] == "http_404" else 200)
            for s in g["steps"]:
                for im in s["images"]:
                    r = requests.get(srv.url + im["url_path"] + "?auto=webp&frame=1&width=1024", timeout=5)
                    assert r.status_code == (404 if im["expected"] == "missing" else 200)
                    if r.status_code == 200:
                        assert r.headers["Content-Type"] == "image/jpeg"


def test_a_client_hanging_up_is_counted_not_a_traceback(sample_build, capfd):
    import socket
    import struct
    import time
    out, _, _ = sample_build
    with SiteServer(out / "site") as srv:
        host, port = srv.url.split("//")[1].split(":")
        for _ in range(3):
            s = socket.create_connection((host, int(port)))
            s.sendall(b"GET /robots.txt HTTP/1.1\r\nHost: x\r\n")      # headers not finished: still reading
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()                                                  # linger 0: a reset, not a FIN
        for _ in range(50):
            if srv.stats["client_hung_up"] == 3:
                break
            time.sleep(0.05)
        assert srv.stats["client_hung_up"] == 3
        assert requests.get(srv.url + "/robots.txt", timeout=5).status_code == 200
    assert "Traceback" not in capfd.readouterr().err
