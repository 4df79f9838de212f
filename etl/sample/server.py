"""A static site server for the sample kitchen, with injectable transient faults.

Serves a directory laid out as etl/sample/site.py writes it: `/X/` from `ROOT/X/index.html`, `/a/b.ext` from
`ROOT/a/b.ext`, query strings ignored, missing files 404. Sends ETag and Last-Modified and answers
conditional GETs with 304. Faults (429 with Retry-After, 500/503, slow, truncated bodies) are a
deterministic function of (seed, path, attempt) and transient: a URL faults at most
`max_faults_per_url` times, so a patient crawler always gets every existing file in the end.

    with SiteServer(site_dir, faults=FaultConfig(rate_limit_rate=0.1)) as srv:
        requests.get(srv.url + "/cooking/")
"""
from __future__ import annotations

import hashlib
import logging
import socket
import sys
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass
from email.utils import formatdate, parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

log = logging.getLogger(__name__)

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8", ".htm": "text/html; charset=utf-8",
    ".xml": "application/xml", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".png": "image/png",
    ".txt": "text/plain; charset=utf-8", ".json": "application/json", ".css": "text/css",
}
REQUEST_LOG_MAX = 100_000       # requests a server keeps in its log (time, path)
STAT_KEYS = ("served", "not_found", "429", "5xx", "slow", "truncated", "not_modified", "client_hung_up")


@dataclass
class FaultConfig:
    fail_rate: float = 0.0        # share of requests answered 500 or 503
    rate_limit_rate: float = 0.0  # share answered 429 with Retry-After
    slow_rate: float = 0.0        # share delayed by slow_seconds
    slow_seconds: float = 1.0
    truncate_rate: float = 0.0    # share whose body is cut (Content-Length says more, then close)
    retry_after_seconds: float = 1.0
    max_faults_per_url: int = 2   # faults are transient: a URL faults at most this many times
    seed: int = 0                 # fault decisions are a deterministic function of (seed, path, attempt)

    def decide(self, path: str, attempt: int) -> str | None:
        """The fault for the `attempt`-th request (0-based) of `path`: None, '429', '5xx', 'slow', 'truncated'."""
        h = hashlib.sha256(f"{self.seed}\0{path}\0{attempt}".encode()).digest()
        u = int.from_bytes(h[:8], "big") / 2**64
        for kind, rate in (("429", self.rate_limit_rate), ("5xx", self.fail_rate),
                           ("slow", self.slow_rate), ("truncated", self.truncate_rate)):
            if u < rate:
                return kind
            u -= rate
        return None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"     # keep-alive: every response carries Content-Length
    disable_nagle_algorithm = True    # headers and body are separate writes: avoid 40 ms delayed-ACK stalls
    server: _Server

    def log_message(self, format, *args):
        log.debug("%s %s", self.address_string(), format % args)

    def do_HEAD(self):
        self._serve(head=True)

    def do_GET(self):
        self._serve(head=False)

    # ---------------------------------------------------------------- request handling
    def _serve(self, head: bool) -> None:
        site: SiteServer = self.server.site
        path = unquote(urlsplit(self.path).path) or "/"
        fault = site._next_fault(path)
        if fault == "429":
            site._count("429")
            return self._send_empty(429, {"Retry-After": _fmt_seconds(site.faults.retry_after_seconds)})
        if fault == "5xx":
            site._count("5xx")
            code = 500 if hashlib.sha256(path.encode()).digest()[0] % 2 == 0 else 503
            return self._send_empty(code, {"Retry-After": _fmt_seconds(site.faults.retry_after_seconds)}
                                    if code == 503 else {})
        if fault == "slow":
            site._count("slow")
            time.sleep(site.faults.slow_seconds)

        file = site.resolve(path)
        if file is None:
            site._count("not_found")
            return self._send_body(404, b"not found\n", "text/plain; charset=utf-8", {}, head)
        body, etag, mtime = site._read(file)
        headers = {"ETag": etag, "Last-Modified": formatdate(mtime, usegmt=True)}
        if self._not_modified(etag, mtime):
            site._count("not_modified")
            return self._send_empty(304, headers)
        ctype = CONTENT_TYPES.get(file.suffix.lower(), "application/octet-stream")
        if fault == "truncated" and not head and len(body) > 1:
            site._count("truncated")
            self.send_response(200)
            for k, v in {**headers, "Content-Type": ctype, "Content-Length": str(len(body))}.items():
                self.send_header(k, v)
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        site._count("served")
        self._send_body(200, body, ctype, headers, head)

    def _not_modified(self, etag: str, mtime: float) -> bool:
        inm = self.headers.get("If-None-Match")
        if inm is not None:
            return etag in [t.strip() for t in inm.split(",")] or inm.strip() == "*"
        ims = self.headers.get("If-Modified-Since")
        if ims:
            try:
                return int(mtime) <= parsedate_to_datetime(ims).timestamp()
            except (TypeError, ValueError):
                return False
        return False

    def _send_empty(self, code: int, headers: dict[str, str]) -> None:
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _send_body(self, code: int, body: bytes, ctype: str, headers: dict[str, str],
                   head: bool) -> None:
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    allow_reuse_address = True
    site: SiteServer

    def handle_error(self, request, client_address) -> None:
        """A client that hangs up mid-request (a crawler's timeout, a cancelled download) is one
        counted debug line, not a traceback on stderr; anything else keeps the default report."""
        err = sys.exc_info()[1]
        if isinstance(err, (ConnectionResetError, BrokenPipeError)):
            self.site._count("client_hung_up")
            log.debug("client %s hung up: %s", client_address, err)
            return
        super().handle_error(request, client_address)


def _fmt_seconds(s: float) -> str:
    # Retry-After is delta-seconds (an integer) in RFC 9110; we also accept fractions for fast tests
    return str(int(s)) if float(s).is_integer() else f"{s:g}"


class SiteServer:
    """ThreadingHTTPServer in a background thread serving `root`; a context manager."""

    def __init__(self, root: Path, host: str = "127.0.0.1", port: int = 0,
                 faults: FaultConfig | None = None):
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise FileNotFoundError(f"site directory {self.root} does not exist")
        self.host, self.port = host, port
        self.faults = faults or FaultConfig()
        self.stats: dict[str, int] = {k: 0 for k in STAT_KEYS}
        self.requests_by_path: Counter[str] = Counter()
        # (time.monotonic(), path) of the latest requests, in turn (bounded: `mrqa sample serve` may run for days)
        self.request_log: deque[tuple[float, str]] = deque(maxlen=REQUEST_LOG_MAX)
        self._faults_by_path: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._cache: dict[Path, tuple[tuple[int, int], bytes, str, float]] = {}
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> SiteServer:
        httpd = _Server((self.host, self.port), _Handler)
        httpd.site = self
        self._httpd = httpd
        self.port = httpd.server_address[1]
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.url = f"http://{host}:{self.port}"
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                        name=f"SiteServer:{self.port}", daemon=True)
        self._thread.start()
        log.info("serving %s at %s", self.root, self.url)
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> SiteServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def serve_forever(self) -> None:
        """Start and block until interrupted (Ctrl-C)."""
        self.start()
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
        finally:
            self.stop()

    # ---------------------------------------------------------------- helpers
    def resolve(self, url_path: str) -> Path | None:
        """Map a URL path to a file under root (None when absent or outside root)."""
        rel = url_path.lstrip("/")
        if url_path.endswith("/") or rel == "":
            rel = rel + "index.html"
        file = (self.root / rel).resolve()
        if not file.is_relative_to(self.root) or not file.is_file():
            return None
        return file

    def _read(self, file: Path) -> tuple[bytes, str, float]:
        st = file.stat()
        key = (st.st_mtime_ns, st.st_size)
        with self._lock:
            hit = self._cache.get(file)
        if hit is not None and hit[0] == key:
            return hit[1], hit[2], hit[3]
        body = file.read_bytes()
        etag = '"' + hashlib.sha1(body).hexdigest()[:20] + '"'
        if len(body) <= 1 << 20:
            with self._lock:
                self._cache[file] = (key, body, etag, st.st_mtime)
        return body, etag, st.st_mtime

    def _next_fault(self, path: str) -> str | None:
        with self._lock:
            attempt = self.requests_by_path[path]
            self.requests_by_path[path] += 1
            self.request_log.append((time.monotonic(), path))
            if self._faults_by_path[path] >= self.faults.max_faults_per_url:
                return None
            fault = self.faults.decide(path, attempt)
            if fault is not None:
                self._faults_by_path[path] += 1
            return fault

    def _count(self, key: str) -> None:
        with self._lock:
            self.stats[key] += 1


def serve(root: Path, host: str = "127.0.0.1", port: int = 8000,
          faults: FaultConfig | None = None) -> None:
    """Serve `root` until Ctrl-C (used by `mrqa sample serve`)."""
    srv = SiteServer(root, host=host, port=port, faults=faults).start()
    print(f"serving {srv.root} at {srv.url} (Ctrl-C to stop)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        srv.stop()


class ProcessSiteServer:
    """A `SiteServer` (no faults) in a spawned process of its own; a context manager with `.url`.

    The pipeline serves the sample kitchen while it crawls it: in one process the server's request
    threads and the crawler's share one GIL, so the crawl ran on about one core (1,000 recipes: 58 s
    wall, 64 s CPU). In a process of its own the server has the other core (the same files, the same
    bytes). Any start failure is raised here with the child's error."""

    def __init__(self, root: Path, host: str = "127.0.0.1", start_timeout: float = 60.0):
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise FileNotFoundError(f"site directory {self.root} does not exist")
        self.host, self.start_timeout = host, start_timeout
        self.url = ""
        self._proc = None
        self._conn = None

    def start(self) -> ProcessSiteServer:
        import multiprocessing
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve_in_child, args=(str(self.root), self.host, child),
                                 name="sample-kitchen-server", daemon=True)
        self._proc.start()
        child.close()
        if not parent.poll(self.start_timeout):
            self.stop()
            raise RuntimeError(f"the site server for {self.root} did not start within {self.start_timeout:.0f} s")
        kind, value = parent.recv()
        if kind != "url":
            self.stop()
            raise RuntimeError(f"the site server for {self.root} failed to start: {value}")
        self.url, self._conn = value, parent
        log.info("serving %s at %s (process %d)", self.root, self.url, self._proc.pid)
        return self

    def stop(self) -> None:
        if self._conn is not None:
            try:
                self._conn.send("stop")
            except (BrokenPipeError, OSError):
                pass
            self._conn.close()
            self._conn = None
        if self._proc is not None:
            self._proc.join(timeout=10)
            if self._proc.is_alive():
                self._proc.terminate()
                self._proc.join(timeout=5)
            self._proc = None

    def __enter__(self) -> ProcessSiteServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _serve_in_child(root: str, host: str, conn) -> None:
    """A ProcessSiteServer's process: serve `root` until the parent says stop or goes away."""
    try:
        server = SiteServer(Path(root), host).start()
    except Exception as e:  # noqa: BLE001 -- reported to the parent, which raises it
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    conn.send(("url", server.url))
    try:
        conn.recv()
    except (EOFError, OSError):
        pass
    finally:
        server.stop()
