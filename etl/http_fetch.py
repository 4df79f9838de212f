"""Polite, bounded HTTP fetching: host allow-list, per-host rate limit, retries with backoff that honour
Retry-After, conditional GET, size and content-type limits, truncation detection.

`Fetcher.fetch()` never raises for network or HTTP trouble: it returns a `FetchResult` whose
`reason` is one of the reject reasons (http_404, http_error, retries_exhausted, too_large,
bad_content_type, truncated, host_not_allowed, robots_disallowed) or None on success. Thread-safe:
one requests.Session per thread (keep-alive), one rate limiter shared by all threads.

Redirects are followed by hand (at most MAX_REDIRECTS hops): every hop passes the host policy and,
when the caller sets `Fetcher.hop_check` (the crawler does: robots.txt), that check too, before
it is requested.
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
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import requests
from requests.adapters import HTTPAdapter

from etl.parse import MAX_PAGE_BYTES

log = logging.getLogger(__name__)

MAX_REDIRECTS = 5
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
    allow_hosts: tuple[str, ...] = ()       # extra hosts (host or host:port); may be loopback/private
    allow_loopback: bool = False            # 127.0.0.0/8 and ::1 (the local sample site)
    allow_private_network: bool = False     # RFC 1918, fc00::/7, CGNAT 100.64.0.0/10
    delay_s: float = 1.0                    # minimum seconds between requests to one host
    timeout_s: float = 20.0
    retries: int = 4                        # extra attempts after the first
    backoff_s: float = 0.5                  # first backoff; doubles each attempt, jittered
    backoff_max_s: float = 30.0
    retry_after_max_s: float = 120.0        # never wait longer than this for one Retry-After
    max_page_bytes: int = MAX_PAGE_BYTES
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

# cloud instance-metadata endpoints (AWS/GCP/Azure/OpenStack, AWS ECS, AWS IPv6, Alibaba, Oracle)
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200", "192.0.0.192"))
CGNAT = ipaddress.ip_network("100.64.0.0/10")
NAT64 = ipaddress.ip_network("64:ff9b::/96")


def address_class(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """`never` (link-local, metadata, multicast, unspecified, reserved), `loopback`, `private`
    (RFC 1918, unique-local, CGNAT and other non-global ranges) or `public`. IPv6 forms that
    embed an IPv4 address (mapped, NAT64, 6to4) are judged by that address."""
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:
            addr = addr.ipv4_mapped
        elif addr in NAT64:
            addr = ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
        elif addr.sixtofour is not None:
            addr = addr.sixtofour
    if addr in METADATA_ADDRESSES or addr.is_link_local or addr.is_multicast or addr.is_unspecified:
        return "never"
    if addr.is_loopback:   # before is_reserved: ::1 lies in the reserved ::/8
        return "loopback"
    if addr.is_reserved:
        return "never"
    if addr.is_private or addr in CGNAT or not addr.is_global:
        return "private"
    return "public"


class HostPolicy:
    """Which URLs may be fetched, judged on the addresses the host resolves to.

    - link-local (169.254.0.0/16, fe80::/10) and cloud metadata addresses: never, whatever the flags;
    - loopback (127.0.0.0/8, ::1): only with `allow_loopback` (the local sample site);
    - private networks (RFC 1918, fc00::/7, CGNAT): only with `allow_private_network`;
    - public addresses: the default instructables hosts, and hosts named in `allow_hosts`.
    A host named in `allow_hosts` (host or host:port) may also be loopback or private: naming it is
    the permission. Every address a name resolves to must pass."""

    def __init__(self, allow_hosts=(), allow_loopback: bool = False,
                 allow_private_network: bool = False, default_hosts=DEFAULT_HOSTS):
        self.explicit = {h.lower() for h in allow_hosts}
        self.defaults = {h.lower() for h in default_hosts}
        self.allow_loopback = allow_loopback
        self.allow_private_network = allow_private_network
        self._classes: dict[str, frozenset[str]] = {}
        self._lock = threading.Lock()

    def check(self, url: str) -> str | None:
        """None when allowed, else a human-readable reason."""
        try:
            parts = urlsplit(url)
            host = (parts.hostname or "").lower()
        except ValueError as e:
            return f"unparseable URL: {e}"
        if parts.scheme not in ("http", "https"):
            return f"scheme {parts.scheme!r} not allowed"
        if not host:
            return "no host"
        classes = self._address_classes(host)
        if "never" in classes:
            return f"{host} is a link-local or cloud metadata address (never allowed)"
        if host in self.explicit or parts.netloc.lower() in self.explicit:
            return None
        if "loopback" in classes and not self.allow_loopback:
            return f"{host} is a loopback address (use allow_loopback or allow_hosts)"
        if "private" in classes and not self.allow_private_network:
            return f"{host} is a private-network address (use allow_private_network or allow_hosts)"
        if host in self.defaults or (classes and "public" not in classes):
            return None
        return f"host {host} is not in the allow-list (add it with allow_hosts)"

    def _address_classes(self, host: str) -> frozenset[str]:
        with self._lock:
            if host in self._classes:
                return self._classes[host]
        try:
            addrs = [ipaddress.ip_address(host)]
        except ValueError:
            try:
                addrs = [ipaddress.ip_address(ai[4][0].split("%")[0])
                         for ai in socket.getaddrinfo(host, None)]
            except (socket.gaierror, UnicodeError, ValueError, OSError):
                addrs = []   # unresolvable: the request itself will fail and be retried/rejected
        classes = frozenset(address_class(a) for a in addrs)
        with self._lock:
            self._classes[host] = classes
        return classes


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
        self.policy = HostPolicy(self.config.allow_hosts, self.config.allow_loopback,
                                 self.config.allow_private_network)
        # extra check for every redirect target: (url, kind) -> (reason, detail) or None to allow
        self.hop_check: Callable[[str, str], tuple[str, str] | None] | None = None
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
        for hop in range(MAX_REDIRECTS + 1):  # follow redirects ourselves: each hop is checked
            why = self.policy.check(current)
            if why:
                raise _Failure("host_not_allowed", why if hop == 0 else f"redirect to {current}: {why}",
                               retryable=False)
            gate = self.hop_check(current, kind) if hop and self.hop_check is not None else None
            if gate:
                raise _Failure(gate[0], f"redirect to {current}: {gate[1]}", retryable=False)
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
                r.close()
                try:
                    current = urljoin(current, r.headers["Location"])
                except ValueError as e:
                    raise _Failure("http_error", f"bad redirect Location: {e}", retryable=False) from e
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
