"""robots.txt rules where RFC 9309 and the standard library's urllib.robotparser disagree, decided by
etl/robots.py on a file served by the test HTTP server: longest match over file order, Allow on a tie,
the `*` wildcard and the `$` end anchor. Each case also asserts urllib.robotparser's other answer."""
from __future__ import annotations

import urllib.robotparser

import pytest

from etl.http_fetch import FetchConfig, Fetcher
from etl.robots import AGENT, RobotsCache
from etl.sample.server import SiteServer

ROBOTS = """User-agent: *
Disallow: /private
Allow: /private/ok
Disallow: /tie
Allow: /tie
Disallow: /*.pdf
Disallow: /exact$
Allow: /
"""

# (path, RFC 9309 decision, the rule that decides it)
CASES = [
    ("/private/ok/page.html", True, "longest match: Allow /private/ok (11) beats the earlier Disallow /private (8)"),
    ("/private/secret.html", False, "only Disallow /private matches"),
    ("/tie/page.html", True, "Allow /tie and Disallow /tie are equally long: Allow wins the tie"),
    ("/docs/manual.pdf", False, "Disallow /*.pdf: `*` matches any characters"),
    ("/docs/manual.pdf.html", False, "no `$`: /*.pdf matches a prefix too"),
    ("/exact", False, "Disallow /exact$: `$` anchors the end of the path"),
    ("/exact/more.html", True, "Disallow /exact$ does not match a longer path"),
    ("/cooking/", True, "Allow /"),
]
# the cases where urllib.robotparser (first matching rule in file order, `*` and `$` literal) differs
STDLIB_DIFFERS = {"/private/ok/page.html", "/tie/page.html", "/docs/manual.pdf", "/docs/manual.pdf.html",
                  "/exact"}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    site = tmp_path_factory.mktemp("robots_site")
    (site / "robots.txt").write_text(ROBOTS)
    with SiteServer(site) as srv:
        cache = RobotsCache(Fetcher(FetchConfig(allow_loopback=True, delay_s=0.0)))
        yield srv, cache


@pytest.mark.parametrize("path,expected,why", CASES, ids=[c[0] for c in CASES])
def test_rfc9309_decisions_on_a_served_robots_txt(served, path, expected, why):
    srv, cache = served
    assert cache.allowed(srv.url + path) is expected, why
    stdlib = urllib.robotparser.RobotFileParser()
    stdlib.parse(ROBOTS.splitlines())
    differs = stdlib.can_fetch(AGENT, srv.url + path) != expected
    assert differs == (path in STDLIB_DIFFERS), f"{path}: urllib.robotparser {'differs' if differs else 'agrees'}"


def test_robots_txt_fetched_once_per_host(served):
    srv, cache = served
    for path, _, _ in CASES:
        cache.allowed(srv.url + path)
    assert srv.requests_by_path["/robots.txt"] == 1
    assert [r.ok for r in cache.fetched] == [True]
