"""The instructables crawler: discovery, recipe pages, step images, crawl log, re-scrape.

Network IO runs in a thread pool (one keep-alive session per thread, one per-host rate limiter);
the DuckDB connection is used only from the calling thread. With `processes` > 1 the page and image
jobs (fetch, parse, decode: pure Python that holds the GIL) run in that many spawned processes, each
with its own thread pool and fetcher, and their outcomes come back to the calling thread, which still
does every warehouse write; each process then waits `processes` x `delay_s` between requests to one
host, so the crawl keeps its average per-host rate (two processes' requests may start closer together
than `delay_s`: the pipeline uses processes only for an unthrottled crawl, and one for a polite one).
Every URL's outcome lands in the `pages` crawl log; every failed recipe or image lands in `rejects`
with a reason, so a crawl killed at any point and restarted ends with the same warehouse:
- a recipe page with a 200 in `pages` and its raw body on disk is not fetched again (`cached`);
- a page that failed for good (404, robots, size, type...) is not retried; transient failures are;
- images still `pending` are downloaded (to a temp file, renamed when complete and decoded); their
  results are committed every `image_batch` images or `image_batch_seconds`, whichever comes first,
  so a killed crawl re-downloads at most one batch.

No single input stops a stage: any exception while fetching, parsing or loading one page, or
downloading one image, becomes a `rejects` row (reason, and the exception class in the detail) and
the crawl goes on. Recipe ids are checked before anything is fetched (`bad_recipe_id`), and every
file written goes through `contained_path`, which refuses paths that leave images/ or raw/.

Re-scrape (`rescrape_targets`) selects recipes with missing steps, images not ok, transient
failures, or pages older than `stale_days`, and refetches them with conditional GET.
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import logging
import multiprocessing
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import duckdb
from bs4 import BeautifulSoup
from PIL import Image
from tqdm import tqdm

from etl.bulk import load_recipes, reject_rows, update_rows, upsert_rows
from etl.config import Paths
from etl.http_fetch import FetchConfig, Fetcher, FetchResult
from etl.load import mark_recipe
from etl.parse import (
    DEFAULT_BACKEND,
    ParseError,
    parse_page,
    recipe_id_from_url,
    recipe_id_problem,
)
from etl.records import RecipeRecord
from etl.robots import RobotsCache
from etl.warehouse import clear_rejects, record_reject, transaction, trial, utcnow

log = logging.getLogger(__name__)

PERMANENT = {"http_404", "http_error", "too_large", "bad_content_type", "robots_disallowed",
             "host_not_allowed", "parse_error", "no_steps", "too_deep", "bad_recipe_id", "bad_url", "load_error"}
TRANSIENT = {"retries_exhausted", "truncated", "crawl_error"}
IMAGE_STATUS = {"http_404": "missing", "retries_exhausted": "missing", "http_error": "missing",
                "host_not_allowed": "missing", "robots_disallowed": "missing",
                "truncated": "broken", "too_large": "broken", "bad_content_type": "broken",
                "image_decode_error": "broken", "image_error": "broken", "bad_path": "broken"}
NOT_RECIPES = {"cooking", "craft", "workshop", "living", "outside", "teachers", "circuits",
               "member", "search", "about", "contact", "sitemap", "create", "contest", "projects",
               "tag", "how-to-write-a-great-instructable", "index.html"}
PAGE_BATCH = 50


class UnsafePath(ValueError):
    """A file path built from outside data that would leave its folder."""


@dataclass
class CrawlConfig:
    source: str = "instructables"
    workers: int = 4
    max_pages: int | None = None
    respect_robots: bool = True
    stale_days: float | None = None          # re-scrape: refresh pages older than this
    progress: bool = True
    image_batch: int = 50                    # commit image results after this many ...
    image_batch_seconds: float = 5.0         # ... or this many seconds, whichever comes first
    processes: int = 1                       # >1: page and image jobs in that many spawned processes,
    process_chunk: int = 50                  # ... handed out this many at a time
    fetch: FetchConfig = field(default_factory=FetchConfig)


@dataclass
class PageOutcome:
    url: str
    recipe_id: str
    fetch: FetchResult | None = None
    record: RecipeRecord | None = None
    reason: str | None = None
    detail: str | None = None
    body_sha256: str | None = None
    from_cache: bool = False


class Crawler:
    def __init__(self, con: duckdb.DuckDBPyConnection | None, paths: Paths | None = None,
                 config: CrawlConfig | None = None):
        """`con` None: a crawl process's job runner (`_process_init`), which never touches the warehouse."""
        if config is not None and config.processes < 1:
            raise ValueError(f"processes must be >= 1, got {config.processes}")
        self.con = con
        self.paths = (paths or Paths.from_env()).ensure()
        self.config = config or CrawlConfig()
        self.fetcher = Fetcher(self.config.fetch)
        self.robots = RobotsCache(self.fetcher)
        self.fetcher.hop_check = self._redirect_gate
        self.counts: Counter[str] = Counter()
        self.rejected: Counter[str] = Counter()

    def close(self) -> None:
        self.fetcher.close()

    def summary(self) -> dict:
        out = {k: self.counts.get(k, 0) for k in (
            "discovered", "fetched", "cached", "not_modified", "parsed", "loaded",
            "images_ok", "images_cached", "images_missing", "images_broken")}
        out["rejected"] = dict(sorted(self.rejected.items()))
        out["rejected_total"] = sum(self.rejected.values())
        return out

    # ------------------------------------------------------------------------ raw store
    def raw_path(self, sha: str) -> Path:
        return contained_path(self.paths.raw, sha[:2], sha[2:])

    def store_raw(self, body: bytes) -> str:
        sha = hashlib.sha256(body).hexdigest()
        p = self.raw_path(sha)
        if not p.exists():
            p.parent.mkdir(parents=True, exist_ok=True)
            tmp = p.with_name(f"{p.name}.part-{os.getpid()}-{threading.get_ident()}")   # one per writer
            tmp.write_bytes(body)
            tmp.replace(p)
        return sha

    def _cached_body(self, row) -> bytes | None:
        if row is None or not row[3]:
            return None
        try:
            p = self.raw_path(row[3])
        except UnsafePath:
            return None
        return p.read_bytes() if p.exists() else None

    def _page_row(self, url: str):
        rows = self.con.execute("SELECT http_status, etag, last_modified, body_sha256, error, fetched_at "
                                "FROM pages WHERE url = ?", [url]).fetchall()
        return rows[0] if rows else None

    def _log_pages(self, rows: list[dict]) -> None:
        upsert_rows(self.con, "pages", rows)

    @staticmethod
    def _page_log_row(url: str, kind: str, res: FetchResult | None, sha: str | None,
                      n_bytes: int | None, error: str | None, status: int | None = None) -> dict:
        return {"url": url, "kind": kind, "fetched_at": utcnow(),
                "http_status": status if status is not None else (res.status if res else None),
                "etag": res.etag if res else None, "last_modified": res.last_modified if res else None,
                "body_sha256": sha, "n_bytes": n_bytes, "error": error}

    # ------------------------------------------------------------------------ small fetch (discovery)
    def fetch_document(self, url: str, kind: str) -> bytes | None:
        """Fetch a listing/sitemap with conditional GET against the crawl log; None on failure."""
        gate = self._gate(url)
        if gate:
            self._reject("ingest", url, gate[0], gate[1])
            self._log_pages([self._page_log_row(url, kind, None, None, None, f"{gate[0]}: {gate[1]}")])
            return None
        row = self._page_row(url)
        cached = self._cached_body(row)
        res = self.fetcher.fetch(url, kind=kind, etag=row[1] if cached is not None else None,
                                 last_modified=row[2] if cached is not None else None)
        self._log_robots()
        if res.not_modified and cached is not None:
            self.counts["not_modified"] += 1
            self._log_pages([{**self._page_log_row(url, kind, res, row[3], len(cached), None), "http_status": 200}])
            return cached
        if not res.ok:
            self._reject("ingest", url, res.reason, res.detail)
            self._log_pages([self._page_log_row(url, kind, res, None, None, f"{res.reason}: {res.detail}")])
            return None
        self.counts["fetched"] += 1
        sha = self.store_raw(res.body)
        self._log_pages([self._page_log_row(url, kind, res, sha, res.n_bytes, None)])
        clear_rejects(self.con, "ingest", [url])
        return res.body

    def _gate(self, url: str) -> tuple[str, str] | None:
        """(reason, detail) when the URL must not be fetched: host allow-list first, then robots.txt."""
        why = self.fetcher.policy.check(url)
        if why:
            return "host_not_allowed", why
        if self.config.respect_robots and not self.robots.allowed(url):
            return "robots_disallowed", "robots.txt disallows this URL"
        return None

    def _redirect_gate(self, url: str, kind: str) -> tuple[str, str] | None:
        """The Fetcher's check of each redirect target (the host policy it applies itself)."""
        if kind == "robots" or not self.config.respect_robots or self.robots.allowed(url):
            return None
        return "robots_disallowed", "robots.txt disallows this URL"

    def _log_robots(self) -> None:
        while self.robots.fetched:
            res = self.robots.fetched.pop()
            sha = self.store_raw(res.body) if res.ok and res.body is not None else None
            self._log_pages([self._page_log_row(res.url, "robots", res, sha, res.n_bytes or None,
                                                None if res.ok else f"{res.reason}: {res.detail}")])

    # ------------------------------------------------------------------------ discovery
    def discover_listing(self, start_url: str, limit: int | None = None) -> list[str]:
        """Recipe URLs from a category page (-> channel listings) or a channel listing, following
        rel=next pagination. Order: as listed; duplicates dropped. A start URL that cannot be parsed is
        a `bad_url` reject (nothing fetched)."""
        try:
            parts = urlsplit(start_url)
            parts.hostname                 # noqa: B018 - raises ValueError for a malformed host or port
        except ValueError as e:
            self._reject("ingest", start_url, "bad_url", f"listing URL cannot be parsed: {e}")
            return []
        category = (parts.path.strip("/").split("/") or [""])[0]
        channel_re = re.compile(rf"^/{re.escape(category)}/[^/]+/projects/?$") if category else None
        queue, seen, recipes = [start_url], {start_url}, {}
        while queue and (limit is None or len(recipes) < limit):
            url = queue.pop(0)
            body = self.fetch_document(url, "listing")
            if body is None:
                continue
            soup = BeautifulSoup(body, DEFAULT_BACKEND)
            found = [u for a in soup.select("a.ible-title[href]") if (u := _join(url, a["href"]))]
            for u in found:
                rid = recipe_id_from_url(u)
                if rid and rid not in recipes:
                    recipes[rid] = _strip_query(u)
            more = []
            if not found and channel_re is not None:   # a category page: follow channel listings
                more = [u for a in soup.find_all("a", href=True)
                        if (u := _join(url, a["href"])) and channel_re.match(urlsplit(u).path)]
            nxt = soup.select_one("a[rel~=next][href], link[rel~=next][href]")
            if nxt is not None and _join(url, nxt["href"]):
                more.insert(0, _join(url, nxt["href"]))
            for u in more:
                if u not in seen:
                    seen.add(u)
                    queue.append(u)
        urls = list(recipes.values())
        self.counts["discovered"] += len(urls)
        log.info("listing %s: %d recipe URL(s)", start_url, len(urls))
        return urls[:limit] if limit else urls

    def discover_sitemap(self, sitemap_url: str, limit: int | None = None) -> list[str]:
        """Recipe URLs from a sitemap (or sitemap index), <loc>s resolved against the sitemap URL."""
        from lxml import etree
        todo, done, recipes = [sitemap_url], set(), {}
        parser = etree.XMLParser(resolve_entities=False, no_network=True, recover=True)
        while todo:
            url = todo.pop(0)
            if url in done:
                continue
            done.add(url)
            body = self.fetch_document(url, "sitemap")
            if body is None:
                continue
            try:
                root = etree.fromstring(body, parser)
            except etree.XMLSyntaxError as e:
                self._reject("ingest", url, "parse_error", f"sitemap XML: {e}")
                continue
            if root is None:
                self._reject("ingest", url, "parse_error", "sitemap is not XML")
                continue
            locs = [u for el in root.iter("{*}loc") if (el.text or "").strip()
                    and (u := _join(url, el.text.strip()))]
            if etree.QName(root).localname == "sitemapindex":
                todo.extend(locs)
                continue
            for u in locs:
                if is_recipe_url(u):
                    recipes.setdefault(recipe_id_from_url(u), _strip_query(u))
        urls = list(recipes.values())
        self.counts["discovered"] += len(urls)
        log.info("sitemap %s: %d recipe URL(s)", sitemap_url, len(urls))
        return urls[:limit] if limit else urls

    def read_url_file(self, path: Path, limit: int | None = None) -> list[str]:
        """One URL per line; blank lines and #comments ignored; duplicates (by slug) dropped. A line that
        is not a URL (`bad_url`) or names no recipe (`bad_recipe_id`) is a reject, with its line number."""
        recipes: dict[str, str] = {}
        for n, ln in enumerate(Path(path).read_text(errors="replace").splitlines(), 1):
            ln = ln.strip()
            if not ln or ln.startswith("#"):
                continue
            try:
                urlsplit(ln).hostname   # noqa: B018 - raises ValueError for a malformed host or port
            except ValueError as e:
                self._reject("ingest", ln, "bad_url", f"{path}:{n}: not a URL ({e})")
                continue
            rid = recipe_id_from_url(ln)
            if rid:
                recipes.setdefault(rid, ln)
            else:
                self._reject("ingest", ln, "bad_recipe_id", f"{path}:{n}: no recipe slug in the URL")
        urls = list(recipes.values())
        self.counts["discovered"] += len(urls)
        return urls[:limit] if limit else urls

    def rescrape_targets(self, source: str | None = None) -> list[str]:
        """URLs of recipes whose steps or images are missing/partial, transient failures, or stale pages."""
        stale = self.config.stale_days
        rows = self.con.execute(f"""
            SELECT r.url FROM recipes r LEFT JOIN pages p ON p.url = r.url
            WHERE r.url IS NOT NULL AND (? IS NULL OR r.source = ?) AND (
                  (r.status = 'rejected' AND r.status_reason IN ('retries_exhausted', 'truncated'))
               OR (r.status <> 'rejected' AND NOT EXISTS (SELECT 1 FROM steps s WHERE s.recipe_id = r.recipe_id))
               OR EXISTS (SELECT 1 FROM steps s WHERE s.recipe_id = r.recipe_id
                          AND coalesce(s.title_raw, '') = '' AND coalesce(s.body_raw, '') = '')
               OR EXISTS (SELECT 1 FROM images i WHERE i.recipe_id = r.recipe_id AND i.status <> 'ok')
               OR {'FALSE' if stale is None else
                   f"coalesce(p.fetched_at, TIMESTAMP '1970-01-01') < now()::TIMESTAMP "
                   f"- INTERVAL {float(stale) * 86400} SECOND"})
            ORDER BY r.recipe_id""", [source, source]).fetchall()
        urls = [r[0] for r in rows]
        self.counts["discovered"] += len(urls)
        return urls

    # ------------------------------------------------------------------------ recipe pages
    def crawl_pages(self, urls: Iterable[str], rescrape: bool = False) -> dict:
        """Fetch, parse and load recipe pages. Returns the running summary."""
        urls = list(dict.fromkeys(urls))
        if self.config.max_pages is not None:
            urls = urls[: self.config.max_pages]
        existing = {r[0]: (r[1], r[2]) for r in self.con.execute(
            "SELECT recipe_id, source, split FROM recipes").fetchall()}
        logged = {r[0]: r[1:] for r in self.con.execute(
            "SELECT url, http_status, etag, last_modified, body_sha256, error FROM pages "
            "WHERE list_contains(?, url)", [urls]).fetchall()}
        loaded = {r[0] for r in self.con.execute(
            "SELECT recipe_id FROM recipes WHERE content_sha256 IS NOT NULL AND status <> 'rejected'").fetchall()}
        todo: list[tuple[str, str, bytes | None, tuple | None]] = []
        slugs: set[str] = set()
        for url in urls:
            rid = recipe_id_from_url(url)
            problem = recipe_id_problem(rid)
            if problem:
                self._reject("ingest", url, "bad_recipe_id", f"recipe id {rid!r}: {problem}")
                continue
            if rid in slugs:
                continue
            slugs.add(rid)
            row = logged.get(url)
            if row is not None and not rescrape:
                err = (row[4] or "").split(":")[0]
                if row[0] == 200 and row[3] and err == "":
                    done = rid in loaded
                    body = None if done else self._cached_body(row)
                    if done or body is not None:
                        self.counts["cached"] += 1
                        if done:
                            continue
                        todo.append((url, rid, body, row))
                        continue
                elif err in PERMANENT:
                    self.counts["cached"] += 1
                    continue
            todo.append((url, rid, None, row if rescrape else None))
        bar = tqdm(self._outcomes("page", todo), total=len(todo), desc="pages", unit="page",
                   disable=not self.config.progress, leave=False)
        batch: list[PageOutcome] = []
        for out in bar:
            batch.append(out)
            if len(batch) >= PAGE_BATCH:
                self._flush_pages(batch, existing)
        self._flush_pages(batch, existing)
        self._log_robots()
        log.info("pages: %d loaded, %d rejected in all so far", self.counts["loaded"],
                 sum(self.rejected.values()))
        return self.summary()

    def _job(self, kind: str):
        return self._page_job if kind == "page" else self._image_job

    def _outcomes(self, kind: str, jobs: list[tuple]) -> Iterator:
        """The outcomes of `kind` jobs ("page": `_page_job` arguments, "image": `_image_job` arguments) in the
        order they finish: on this process's thread pool, or with `processes` > 1 (and jobs enough for
        two chunks) in chunks of `process_chunk` on spawned crawl processes. A chunk whose process fails
        (it died, or its outcome cannot come back) runs again here, so no job is lost. When the caller stops
        early (Ctrl-C, an error while writing) the jobs not yet started are cancelled: only the running ones
        finish, and a later run picks up the rest."""
        fn, n, size = self._job(kind), self.config.processes, max(1, self.config.process_chunk)
        if n <= 1 or len(jobs) < 2 * size:
            yield from self._threaded(fn, jobs)
            return
        chunks = [jobs[i:i + size] for i in range(0, len(jobs), size)]
        child = dataclasses.replace(self.config, processes=1, progress=False, fetch=dataclasses.replace(
            self.config.fetch, delay_s=self.config.fetch.delay_s * n))     # n processes, one per-host rate
        pool = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn"), initializer=_process_init,
                                   initargs=(self.paths, child))
        try:
            futs = {pool.submit(_process_chunk, kind, chunk): chunk for chunk in chunks}
            here = 0
            for fut in as_completed(futs):
                try:
                    outs, robots = fut.result()
                except Exception as e:  # noqa: BLE001 - a crawl process died: its chunk runs here instead
                    if not here:
                        log.warning("a crawl process failed (%s: %s); its %s jobs, and those of any process "
                                    "that cannot go on, run in this process", type(e).__name__, e, kind)
                    here += len(futs[fut])
                    outs, robots = list(self._threaded(fn, futs[fut])), []
                self.robots.fetched.extend(robots)
                yield from outs
            if here:
                log.warning("%d of %d %s job(s) ran in this process after a crawl process failed", here, len(jobs),
                            kind)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _threaded(self, fn, jobs: list[tuple]) -> Iterator:
        """fn(*job) of every job on this process's thread pool, in the order they finish; the jobs not yet
        started are cancelled when the caller stops early."""
        pool = ThreadPoolExecutor(self.config.workers, thread_name_prefix="crawl")
        try:
            for fut in as_completed([pool.submit(fn, *j) for j in jobs]):
                yield fut.result()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _page_job(self, url: str, rid: str, cached: bytes | None, row) -> PageOutcome:
        """Worker thread: fetch (or take the cached body), store raw, parse. No DB access.
        Never raises: an unexpected exception becomes the page's reject reason."""
        try:
            return self._page_job_unguarded(url, rid, cached, row)
        except Exception as e:  # noqa: BLE001 - one page must never stop the crawl
            log.warning("page %s failed: %s: %s", url, type(e).__name__, e)
            return PageOutcome(url=url, recipe_id=rid, reason="crawl_error",
                               detail=f"{type(e).__name__}: {e}")

    def _page_job_unguarded(self, url: str, rid: str, cached: bytes | None, row) -> PageOutcome:
        out = PageOutcome(url=url, recipe_id=rid)
        body = cached
        if body is not None:
            out.from_cache = True
        else:
            gate = self._gate(url)
            if gate:
                out.reason, out.detail = gate
                return out
            old = self._cached_body(row) if row is not None else None
            res = self.fetcher.fetch(url, kind="page", etag=row[1] if old is not None else None,
                                     last_modified=row[2] if old is not None else None)
            out.fetch = res
            if res.not_modified and old is not None:
                body, out.from_cache = old, True
            elif not res.ok:
                out.reason, out.detail = res.reason, res.detail
                return out
            else:
                body = res.body
        out.body_sha256 = self.store_raw(body)
        try:
            out.record = parse_page(body, url=url)
        except ParseError as e:
            out.reason, out.detail = e.reason, e.detail
        except Exception as e:  # noqa: BLE001 - e.g. RecursionError, MemoryError from odd markup
            out.reason, out.detail = "parse_error", f"{type(e).__name__}: {e}"
        return out

    def _flush_pages(self, outs: list[PageOutcome], existing: dict) -> None:
        """Main thread: write a batch of outcomes in one transaction (recipes and crawl log together,
        so a kill leaves either both or neither). When the warehouse refuses the batch, each record
        is tried alone (rolled back) and the ones it refuses become `load_error` rejects, so one bad
        record cannot take its batch down."""
        if not outs:
            return
        try:
            self._write_pages(outs, existing)
        except Exception as e:   # find the record(s) the warehouse refuses
            if not any(o.record is not None for o in outs):
                raise
            log.warning("a page batch failed to load (%s: %s); trying its records one by one",
                        type(e).__name__, e)
            self._isolate_load_errors(outs, existing)
            self._write_pages(outs, existing)
        for out in outs:
            res = out.fetch
            if res is not None and res.ok:
                self.counts["not_modified" if res.not_modified else "fetched"] += 1
            if out.record is not None:
                self.counts["parsed"] += 1
                self.counts["loaded"] += 1
            else:
                self.rejected[f"ingest/{out.reason}"] += 1
        outs.clear()

    def _write_pages(self, outs: list[PageOutcome], existing: dict) -> None:
        loaded, rejected, log_rows = [], [], []
        for out in outs:
            src, split = existing.get(out.recipe_id, (self.config.source, None))
            if out.record is not None:
                loaded.append((out.record, src, split))
            else:
                rejected.append((out, src))
            res = out.fetch
            if out.from_cache and res is None:
                continue   # resumed from the crawl log: its row is already there
            ok_fetch = out.body_sha256 is not None
            log_rows.append(self._page_log_row(
                out.url, "page", res, out.body_sha256,
                self.raw_path(out.body_sha256).stat().st_size if ok_fetch else None,
                None if ok_fetch else f"{out.reason}: {out.detail}", status=200 if ok_fetch else None))
        with transaction(self.con):
            load_recipes(self.con, loaded)
            clear_rejects(self.con, "ingest", [rec.recipe_id for rec, _, _ in loaded])
            for out, src in rejected:
                mark_recipe(self.con, out.recipe_id, src, out.url, "rejected", out.reason)
            upsert_rows(self.con, "rejects", reject_rows("ingest", [
                (out.recipe_id, out.reason, f"{out.url}: {out.detail}") for out, _ in rejected]))
            upsert_rows(self.con, "pages", log_rows)

    def _isolate_load_errors(self, outs: list[PageOutcome], existing: dict) -> None:
        for out in outs:
            if out.record is None:
                continue
            src, split = existing.get(out.recipe_id, (self.config.source, None))
            try:
                with trial(self.con):
                    load_recipes(self.con, [(out.record, src, split)])
            except Exception as e:  # noqa: BLE001 - whatever the warehouse refuses
                log.warning("recipe %s cannot be loaded: %s: %s", out.recipe_id, type(e).__name__, e)
                out.record, out.reason, out.detail = None, "load_error", f"{type(e).__name__}: {e}"

    # ------------------------------------------------------------------------ images
    def download_images(self, recipe_ids: Iterable[str] | None = None, retry_failed: bool = False) -> dict:
        """Download pending (and, with retry_failed, missing/broken) images of this source's recipes."""
        statuses = ["pending"] + (["missing", "broken"] if retry_failed else [])
        ids = None if recipe_ids is None else list(recipe_ids)
        rows = self.con.execute("""
            SELECT i.image_id, i.recipe_id, i.url FROM images i JOIN recipes r USING (recipe_id)
            WHERE list_contains(?, i.status) AND i.url IS NOT NULL AND r.source = ?
              AND (? IS NULL OR list_contains(?, i.recipe_id))
            ORDER BY i.image_id""", [statuses, self.config.source, ids, ids]).fetchall()
        if not rows:
            return self.summary()
        updates, page_rows = [], []
        cfg = self.config
        bar = tqdm(self._outcomes("image", [tuple(r) for r in rows]), total=len(rows), desc="images", unit="img",
                   disable=not cfg.progress, leave=False)
        flushed_at = time.monotonic()
        for upd, page_row in bar:
            updates.append(upd)
            page_rows.append(page_row)
            if (len(updates) >= cfg.image_batch
                    or time.monotonic() - flushed_at >= cfg.image_batch_seconds):
                self._flush_images(updates, page_rows)
                flushed_at = time.monotonic()
        self._flush_images(updates, page_rows)
        self._log_robots()
        log.info("images: %d ok, %d rejected in all so far", self.counts["images_ok"],
                 sum(self.rejected.values()))
        return self.summary()

    def _image_job(self, iid: str, rid: str, url: str) -> tuple[dict, dict]:
        """Worker thread: download, decode-check. Never raises: an unexpected exception becomes
        the image's reject reason (`image_error`)."""
        try:
            return self._image_job_unguarded(iid, rid, url)
        except Exception as e:  # noqa: BLE001 - one image must never stop the crawl
            log.warning("image %s failed: %s: %s", url, type(e).__name__, e)
            reason = "bad_path" if isinstance(e, UnsafePath) else "image_error"
            upd = {"image_id": iid, "path": None, "sha256": None, "width": None, "height": None,
                   "status": "broken", "status_reason": reason, "detail": f"{type(e).__name__}: {e}"}
            return upd, self._page_log_row(url, "image", None, None, None, f"{reason}: {upd['detail']}")

    def _image_job_unguarded(self, iid: str, rid: str, url: str) -> tuple[dict, dict]:
        dest = contained_path(self.paths.images, rid, iid)
        upd = {"image_id": iid, "path": None, "sha256": None, "width": None, "height": None,
               "status": "ok", "status_reason": None}
        gate = self._gate(url)
        if gate:
            upd.update(status="missing", status_reason=gate[0])
            upd["detail"] = gate[1]
            return upd, self._page_log_row(url, "image", None, None, None, f"{gate[0]}: {gate[1]}")
        res = self.fetcher.fetch(url, kind="image", dest=dest)
        if res.ok:
            data = dest.read_bytes()
            sha = hashlib.sha256(data).hexdigest()
            try:
                upd["width"], upd["height"] = decode_check(data)
            except Exception as e:  # noqa: BLE001 - any decoder failure means a broken image
                dest.unlink(missing_ok=True)
                upd.update(status="broken", status_reason="image_decode_error")
                upd["detail"] = f"{type(e).__name__}: {e}"
                return upd, self._page_log_row(url, "image", res, sha, len(data), f"image_decode_error: {e}")
            upd.update(path=_rel(dest, self.paths.home), sha256=sha)
            return upd, self._page_log_row(url, "image", res, sha, len(data), None)
        upd.update(status=IMAGE_STATUS.get(res.reason, "missing"), status_reason=res.reason)
        upd["detail"] = res.detail
        return upd, self._page_log_row(url, "image", res, None, None, f"{res.reason}: {res.detail}")

    def _flush_images(self, updates: list[dict], page_rows: list[dict]) -> None:
        if not updates:
            return
        cols = ("image_id", "path", "sha256", "width", "height", "status", "status_reason")
        bad = [u for u in updates if u["status"] != "ok"]
        with transaction(self.con):
            update_rows(self.con, "images", "image_id", [{c: u[c] for c in cols} for u in updates])
            clear_rejects(self.con, "images", [u["image_id"] for u in updates if u["status"] == "ok"])
            upsert_rows(self.con, "rejects", reject_rows("images", [
                (u["image_id"], u["status_reason"], u.get("detail")) for u in bad]))
            upsert_rows(self.con, "pages", page_rows)
        for u in updates:
            self.counts[f"images_{u['status']}"] += 1
        for u in bad:
            self.rejected[f"images/{u['status_reason']}"] += 1
        updates.clear()
        page_rows.clear()

    def _reject(self, stage: str, key: str, reason: str, detail: str | None) -> None:
        record_reject(self.con, stage, key, reason, detail)
        self.rejected[f"{stage}/{reason}"] += 1


# ----------------------------------------------------------------------------- crawl processes

_PROCESS: dict = {}         # a crawl process's job runner (a Crawler without a warehouse) and its threads


def _process_init(paths: Paths, config: CrawlConfig) -> None:
    """Start of a spawned crawl process: its own fetcher, robots cache and thread pool."""
    crawler = Crawler(None, paths, config)
    _PROCESS.update(crawler=crawler, pool=ThreadPoolExecutor(config.workers, thread_name_prefix="crawl"))


def _process_chunk(kind: str, jobs: list[tuple]) -> tuple[list, list[FetchResult]]:
    """One chunk of jobs in a crawl process: their outcomes in the chunk's order, without the page bodies
    (stored in raw/ already; the writer reads status and validators only), and the robots.txt fetches
    made meanwhile (the writer logs them)."""
    crawler, pool = _PROCESS["crawler"], _PROCESS["pool"]
    fn = crawler._job(kind)
    outs = list(pool.map(lambda j: fn(*j), jobs))
    if kind == "page":
        for out in outs:
            if out.fetch is not None:
                out.fetch = dataclasses.replace(out.fetch, body=None)
    robots = list(crawler.robots.fetched)
    crawler.robots.fetched.clear()
    return outs, robots


# ----------------------------------------------------------------------------- helpers

def decode_check(data: bytes) -> tuple[int, int]:
    """Pillow verify() then a full decode (verify alone misses truncated JPEG data). Returns size."""
    with Image.open(io.BytesIO(data)) as im:
        im.verify()
    with Image.open(io.BytesIO(data)) as im:
        im.load()
        return im.size


def contained_path(base: Path, *parts: str) -> Path:
    """`base / parts...` for file names that come from outside data (recipe ids, image ids,
    hashes). Raises UnsafePath for an empty, `.`/`..` or separator-bearing part, or a path that
    does not resolve inside `base` (a symlink pointing out included). Every crawler writer uses it."""
    for part in parts:
        if not part or part in (".", "..") or "/" in part or "\\" in part or "\0" in part:
            raise UnsafePath(f"unsafe path component {part!r} under {base}")
    path = base.joinpath(*parts)
    # plain names (checked above) that are no symbolic links stay under base whatever base resolves to, so
    # the full resolution (a realpath, a dozen lstat calls: a tenth of the crawl's time per image) is needed
    # only when one of them is a link, which the crawler never makes
    below = base
    for part in parts:
        below = below / part
        if below.is_symlink():
            if not path.resolve().is_relative_to(base.resolve()):
                raise UnsafePath(f"{path} resolves outside {base}")
            break
    return path


def is_recipe_url(url: str) -> bool:
    try:
        path = urlsplit(url).path
    except ValueError:
        return False
    parts = [p for p in path.split("/") if p]
    if parts and parts[0] == "id":
        parts = parts[1:]
    return len(parts) == 1 and parts[0].lower() not in NOT_RECIPES and "." not in parts[0]


def _join(base: str, href: str) -> str | None:
    """`href` resolved against `base`; None for a link that cannot be parsed."""
    try:
        url = urljoin(base, href)
        urlsplit(url).hostname   # noqa: B018 - raises ValueError for a malformed host
        return url
    except ValueError:
        return None


def _strip_query(url: str) -> str:
    p = urlsplit(url)
    return f"{p.scheme}://{p.netloc}{p.path}"


def _rel(path: Path, home: Path) -> str:
    try:
        return str(path.relative_to(home))
    except ValueError:
        return str(path)
