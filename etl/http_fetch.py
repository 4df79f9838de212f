"""Polite, bounded HTTP fetching: host allow-list, per-host rate limit, retries with backoff that honour
Retry-After, conditional GET, size and content-type limits, truncation detection.

`Fetcher.fetch()` never raises for network or HTTP trouble: it returns a `FetchResult` whose
`reason` is one of the reject reasons of COMMON.md (http_404, http_error, retries_exhausted,
too_large, bad_content_type, truncated, host_not_allowed) or None on success. Thread-safe: one
requests.Session per thread (keep-alive), one rate limiter shared by all threads.
"""
from __future__ import annotations

import ipaddress
import logging
import os
import random
import socket
import tempfile
import threading
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import requests
from requests.adapters import HTTPAdapter

log = logging.getLogger(__name__)

DEFAULT_HOSTS = ("www.instructables.com", "instructables.com", "content.instructables.com")
RETRY_STATUS = {429, 500, 502, 503, 504}
CONTENT_TYPES = {
    "page": ("text/html", "application/xhtml+xml"),
    "listing": ("text/html", "application/xhtml+xml"),
    "sitemap": ("application/xml", "text/xml", "application/rss+xml", "text/plain"),
    "robots": ("text/plain",),
    "image": ("image/",),
}


@dataclass
class FetchConfig:
    allow_hosts: tuple[str, ...] = ()       # extra hosts (host or host:port); explicit = private ok
    allow_private: bool = False             # allow private/loopback addresses (the local sample site)
    delay_s: float = 1.0                    # minimum seconds between requests to one host
    timeout_s: float = 20.0
    retries: int = 4                        # extra attempts after the first
    backoff_s: float = 0.5                  # first backoff; doubles each attempt, jittered
    backoff_max_s: float = 30.0
    retry_after_max_s: float = 120.0        # never wait longer than this for one Retry-After
    max_page_bytes: int = 5 << 20
    max_image_bytes: int = 15 << 20
    user_agent: str = "mrqa-crawler/0.1 (+https://github.com/meta-recipeqa; research crawler)"
    pool_size: int = 16


@dataclass
class FetchResult:
    url: str
    kind: str
    status: int | None = None               # last HTTP status (None: no response)
    body: bytes | None = None               # in-memory bodies (pages)
    path: Path | None = None                # streamed-to-disk bodies (images)
    n_bytes: int = 0
    etag: str | None = None
    last_modified: str | None = None
    content_type: str | None = None
    reason: str | None = None               # reject reason, None when OK
    detail: str | None = None
    attempts: int = 0

    @property
    def ok(self) -> bool:
        return self.reason is None

    @property
    def not_modified(self) -> bool:
        return self.status == 304


class _Failure(Exception):
    def __init__(self, reason: str, detail: str, retryable: bool, wait_s: float | None = None,
                 status: int | None = None):
        super().__init__(detail)
        self.reason, self.detail, self.retryable, self.wait_s, self.status = (
            reason, detail, retryable, wait_s, status)


# ----------------------------------------------------------------------------- allow-list

class HostPolicy:
    """Which URLs may be fetched. Explicit allow_hosts pass; default instructables hosts pass unless
    they resolve to a private address; any other host passes only with allow_private when it is a
    private/loopback address (the local sample site)."""

    def __init__(self, allow_hosts=(), allow_private: bool = False,
                 default_hosts=DEFAULT_HOSTS):
        self.explicit = {h.lower() for h in allow_hosts}
        self.defaults = {h.lower() for h in default_hosts}
        self.allow_private = allow_private
        self._private: dict[str, bool] = {}
        self._lock = threading.Lock()

    def check(self, url: str) -> str | None:
        """None when allowed, else a human-readable reason."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            return f"scheme {parts.scheme!r} not allowed"
        host = (parts.hostname or "").lower()
        if not host:
            return "no host"
        if host in self.explicit or parts.netloc.lower() in self.explicit:
            return None
        private = self._is_private(host)
        if private and not self.allow_private:
            return f"{host} is a private/loopback address (use allow_private or allow_hosts)"
        if host in self.defaults or (private and self.allow_private):
            return None
        return f"host {host} is not in the allow-list (add it with allow_hosts)"

    def _is_private(self, host: str) -> bool:
        with self._lock:
            if host in self._private:
                return self._private[host]
        try:
            addrs = [ipaddress.ip_address(host)]
        except ValueError:
            try:
                addrs = [ipaddress.ip_address(ai[4][0].split("%")[0])
                         for ai in socket.getaddrinfo(host, None)]
            except (socket.gaierror, UnicodeError, ValueError):
                addrs = []   # unresolvable: the request itself will fail and be retried/rejected
        private = any(a.is_private or a.is_loopback or a.is_link_local or a.is_reserved
                      or a.is_unspecified for a in addrs)
        with self._lock:
            self._private[host] = private
        return private


# ----------------------------------------------------------------------------- rate limit

class HostRateLimiter:
    """At most one request start per `delay_s` per host, shared by all threads; a 429/503 with
    Retry-After pushes the host's next slot back for every thread."""

    def __init__(self, delay_s: float):
        self.delay_s = delay_s
        self._next: dict[str, float] = {}
        self._lock = threading.Lock()

    def acquire(self, host: str) -> None:
        with self._lock:
            now = time.monotonic()
            slot = max(now, self._next.get(host, 0.0))
            self._next[host] = slot + self.delay_s
        if slot > now:
            time.sleep(slot - now)

    def push_back(self, host: str, seconds: float) -> None:
        with self._lock:
            self._next[host] = max(self._next.get(host, 0.0), time.monotonic() + seconds)


# ----------------------------------------------------------------------------- fetcher

class Fetcher:
    def __init__(self, config: FetchConfig | None = None):
        self.config = config or FetchConfig()
        self.policy = HostPolicy(self.config.allow_hosts, self.config.allow_private)
        self.limiter = HostRateLimiter(self.config.delay_s)
        self._local = threading.local()
        self._sessions: list[requests.Session] = []
        self._lock = threading.Lock()
        self.rng = random.Random(0)

    def close(self) -> None:
        with self._lock:
            for s in self._sessions:
                s.close()
            self._sessions.clear()

    def _session(self) -> requests.Session:
        s = getattr(self._local, "session", None)
        if s is None:
            s = requests.Session()
            adapter = HTTPAdapter(pool_connections=4, pool_maxsize=self.config.pool_size, max_retries=0)
            s.mount("http://", adapter)
            s.mount("https://", adapter)
            s.headers["User-Agent"] = self.config.user_agent
            self._local.session = s
            with self._lock:
                self._sessions.append(s)
        return s

    def fetch(self, url: str, kind: str = "page", etag: str | None = None,
              last_modified: str | None = None, dest: Path | None = None) -> FetchResult:
        """GET `url` with retries. With `dest`, the body streams to that file (atomically renamed)."""
        res = FetchResult(url=url, kind=kind)
        cfg = self.config
        last: _Failure | None = None
        for attempt in range(cfg.retries + 1):
            res.attempts = attempt + 1
            try:
                self._attempt(url, kind, etag, last_modified, dest, res)
                res.reason = res.detail = None
                return res
            except _Failure as f:
                last = f
                res.status = f.status
                if not f.retryable or attempt == cfg.retries:
                    break
                wait = f.wait_s if f.wait_s is not None else min(
                    cfg.backoff_max_s, cfg.backoff_s * 2 ** attempt) * (0.5 + self.rng.random())
                wait = min(wait, cfg.retry_after_max_s)
                if f.wait_s is not None:
                    self.limiter.push_back(urlsplit(url).hostname or "", wait)
                log.debug("retry %s in %.2fs after %s (%s)", url, wait, f.reason, f.detail)
                time.sleep(wait)
        assert last is not None
        res.body = None
        res.path = None
        if last.retryable and last.reason != "truncated":
            res.reason, res.detail = "retries_exhausted", f"{res.attempts} attempts; last: {last.detail}"
        else:
            res.reason, res.detail = last.reason, last.detail
        return res

    # one attempt: raises _Failure, fills `res` on success -------------------------------
    def _attempt(self, url, kind, etag, last_modified, dest, res: FetchResult) -> None:
        cfg = self.config
        headers = {"Accept": "image/*" if kind == "image" else "text/html,application/xml;q=0.9,*/*;q=0.5"}
        if etag:
            headers["If-None-Match"] = etag
        if last_modified:
            headers["If-Modified-Since"] = last_modified
        current = url
        for _hop in range(6):                 # follow redirects ourselves: each hop is allow-checked
            why = self.policy.check(current)
            if why:
                raise _Failure("host_not_allowed", why, retryable=False)
            self.limiter.acquire(urlsplit(current).hostname or "")
            try:
                r = self._session().get(current, headers=headers, stream=True, allow_redirects=False,
                                        timeout=cfg.timeout_s)
            except requests.exceptions.ConnectionError as e:
                raise _Failure("retries_exhausted", f"connection error: {e}", retryable=True) from e
            except requests.exceptions.Timeout as e:
                raise _Failure("retries_exhausted", f"timeout: {e}", retryable=True) from e
            except requests.exceptions.RequestException as e:
                raise _Failure("http_error", f"{type(e).__name__}: {e}", retryable=False) from e
            if r.is_redirect and r.headers.get("Location"):
                current = urljoin(current, r.headers["Location"])
                r.close()
                continue
            break
        else:
            raise _Failure("http_error", "too many redirects", retryable=False)
        with r:
            self._check_status(r)
            res.status = r.status_code
            res.etag = r.headers.get("ETag")
            res.last_modified = r.headers.get("Last-Modified")
            res.content_type = r.headers.get("Content-Type")
            if r.status_code == 304:
                return
            self._check_type(kind, res.content_type)
            limit = cfg.max_image_bytes if kind == "image" else cfg.max_page_bytes
            declared = r.headers.get("Content-Length")
            if declared and declared.isdigit() and int(declared) > limit:
                raise _Failure("too_large", f"Content-Length {declared} > {limit}", retryable=False,
                               status=r.status_code)
            if dest is None:
                res.body = self._read_body(r, limit)
                res.n_bytes = len(res.body)
            else:
                res.n_bytes = self._stream_to(r, limit, dest)
                res.path = dest

    def _check_status(self, r: requests.Response) -> None:
        code = r.status_code
        if code in (200, 304):
            return
        if code == 404 or code == 410:
            raise _Failure("http_404", f"HTTP {code}", retryable=False, status=code)
        if code in RETRY_STATUS:
            raise _Failure("retries_exhausted", f"HTTP {code}", retryable=True,
                           wait_s=parse_retry_after(r.headers.get("Retry-After")), status=code)
        raise _Failure("http_error", f"HTTP {code}", retryable=False, status=code)

    @staticmethod
    def _check_type(kind: str, content_type: str | None) -> None:
        ctype = (content_type or "").split(";")[0].strip().lower()
        allowed = CONTENT_TYPES.get(kind)
        if allowed and not any(ctype.startswith(a) for a in allowed):
            if kind == "robots":
                return   # robots.txt served with an odd type is still parsed
            raise _Failure("bad_content_type", f"{content_type!r} for a {kind}", retryable=False)

    @staticmethod
    def _read_body(r: requests.Response, limit: int) -> bytes:
        chunks, n = [], 0
        try:
            for chunk in r.iter_content(64 << 10):
                n += len(chunk)
                if n > limit:
                    raise _Failure("too_large", f"body over {limit} bytes", retryable=False)
                chunks.append(chunk)
        except (requests.exceptions.ChunkedEncodingError, requests.exceptions.ConnectionError) as e:
            raise _Failure("truncated", f"body cut after {n} bytes: {type(e).__name__}", retryable=True) from e
        return b"".join(chunks)

    @staticmethod
    def _stream_to(r: requests.Response, limit: int, dest: Path) -> int:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".part-")
        n = 0
        try:
            with os.fdopen(fd, "wb") as f:
                try:
                    for chunk in r.iter_content(64 << 10):
                        n += len(chunk)
                        if n > limit:
                            raise _Failure("too_large", f"body over {limit} bytes", retryable=False)
                        f.write(chunk)
                except (requests.exceptions.ChunkedEncodingError,
                        requests.exceptions.ConnectionError) as e:
                    raise _Failure("truncated", f"body cut after {n} bytes: {type(e).__name__}",
                                   retryable=True) from e
            os.replace(tmp, dest)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return n


def parse_retry_after(value: str | None) -> float | None:
    """Retry-After as seconds: delta-seconds (fractions accepted) or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None
