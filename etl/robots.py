"""robots.txt per host (RFC 9309): fetched once per crawl through the polite Fetcher.

404/410 -> everything allowed; unreachable after retries (5xx, connection) -> everything
disallowed for that host (the RFC's "complete disallow"); a parsed file -> its rules for our agent.
Rules are matched by protego as RFC 9309 says: the longest matching path wins (Allow on a tie),
`*` and `$` wildcards work. The standard library's urllib.robotparser takes the first matching
rule in file order and treats `*` literally, so `Disallow: /private` before `Allow: /private/ok`
would block /private/ok/x there, and `Disallow: /*.pdf$` would block nothing.
"""
from __future__ import annotations

import threading
from urllib.parse import urljoin, urlsplit

from protego import Protego

from etl.http_fetch import Fetcher

AGENT = "mrqa-crawler"


class RobotsCache:
    def __init__(self, fetcher: Fetcher, agent: str = AGENT):
        self.fetcher, self.agent = fetcher, agent
        self._parsers: dict[str, Protego | bool] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self.fetched: list = []   # FetchResults of robots.txt files (for the crawl log)

    def allowed(self, url: str) -> bool:
        rp = self._get(url)
        if isinstance(rp, bool):
            return rp
        return rp.can_fetch(url, self.agent)

    def sitemaps(self, url: str) -> list[str]:
        rp = self._get(url)
        base = self._root(url)
        return [urljoin(base, s) for s in rp.sitemaps] if not isinstance(rp, bool) else []

    @staticmethod
    def _root(url: str) -> str:
        p = urlsplit(url)
        return f"{p.scheme}://{p.netloc}/"

    def _get(self, url: str) -> Protego | bool:
        root = self._root(url)
        with self._lock:
            if root in self._parsers:
                return self._parsers[root]
            lock = self._locks.setdefault(root, threading.Lock())
        with lock:   # one fetch per host even with many threads asking at once
            with self._lock:
                if root in self._parsers:
                    return self._parsers[root]
            res = self.fetcher.fetch(root + "robots.txt", kind="robots")
            self.fetched.append(res)
            value: Protego | bool
            if res.ok and res.body is not None:
                value = Protego.parse(res.body.decode("utf-8", "replace"))
            elif res.reason in ("http_404", "http_error") and res.status and 400 <= res.status < 500:
                value = True
            else:   # unreachable, or a host we may not contact
                value = False
            with self._lock:
                self._parsers[root] = value
            return value
