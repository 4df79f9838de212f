"""Prefect flow: crawl instructables-shaped sites into the warehouse.

discover (listing / sitemap / URL file / re-scrape targets) -> recipe pages -> step images.
Only the network tasks retry; the crawl is resumable, so a retried task skips finished work.
Plain logic lives in etl/crawl.py; this file only wires it.

Scale-out (flows/scale.py): ingest stays in the flow process even when MRQA_DASK_ADDRESS is set.
Politeness is per host and per process (etl/http_fetch.HostRateLimiter: one request start per
`delay_s` per host), so fetching from several Dask workers would multiply the request rate to a
host; and parsing (~8 ms per page measured on the demo corpus) is < 1% of a page's 1 s fetch slot,
so shipping bodies to workers to parse them cannot speed the stage up. Page fetches already overlap
in `workers` threads under the shared per-host limiter. An unthrottled crawl of a local site (the sample
kitchen, a mirror) is bound by the crawler's own Python instead (requests, BeautifulSoup, the image
checks under one GIL): `processes` runs its page and image jobs in that many local processes
(etl/crawl.py), each at `processes` x `delay_s` per host, the warehouse written by the flow process alone.
"""
from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from etl.config import Paths
from etl.crawl import CrawlConfig, Crawler
from etl.http_fetch import FetchConfig
from etl.splits import set_split_unit
from etl.warehouse import connect
from flows import scale
from flows.params import SplitBy
from flows.tasks import run_task

log = logging.getLogger(__name__)


def _crawler(config: CrawlConfig) -> Crawler:
    paths = Paths.from_env().ensure()
    return Crawler(connect(paths), paths, config)


def _finish(c: Crawler) -> dict:
    s = c.summary()
    c.close()
    c.con.close()
    return s


# ----------------------------------------------------------------------------- extract (network IO)

@task(name="set-split-unit", cache_policy=NO_CACHE)
def set_splits(split_by: str) -> dict:
    """Store how splits are drawn (etl/splits.py `set_split_unit`) before the crawl loads a recipe."""
    con = connect(Paths.from_env().ensure())
    try:
        return set_split_unit(con, split_by)
    finally:
        con.close()


@task(name="discover-recipe-urls", retries=2, retry_delay_seconds=5, cache_policy=NO_CACHE)
def discover_urls(config: CrawlConfig, listing: str | None, urls_file: str | None,
                  sitemap: str | None, rescrape: bool) -> tuple[list[str], dict]:
    c = _crawler(config)
    try:
        urls: list[str] = []
        if listing:
            urls += c.discover_listing(listing, limit=config.max_pages)
        if sitemap:
            urls += c.discover_sitemap(sitemap, limit=config.max_pages)
        if urls_file:
            urls += c.read_url_file(Path(urls_file), limit=config.max_pages)
        if rescrape:
            urls += c.rescrape_targets(source=config.source)
        return list(dict.fromkeys(urls)), c.summary()
    finally:
        _finish(c)


@task(name="crawl-recipe-pages", retries=1, retry_delay_seconds=10, cache_policy=NO_CACHE)
def crawl_pages(config: CrawlConfig, urls: list[str], rescrape: bool) -> dict:
    c = _crawler(config)
    try:
        c.crawl_pages(urls, rescrape=rescrape)
    finally:
        summary = _finish(c)
    return summary


@task(name="download-step-images", retries=1, retry_delay_seconds=10, cache_policy=NO_CACHE)
def download_images(config: CrawlConfig, rescrape: bool) -> dict:
    c = _crawler(config)
    try:
        c.download_images(retry_failed=rescrape)
    finally:
        summary = _finish(c)
    return summary


def merge_summaries(*parts: dict) -> dict:
    total: Counter = Counter()
    rejected: Counter = Counter()
    for p in parts:
        rejected.update(p.get("rejected", {}))
        total.update({k: v for k, v in p.items() if k not in ("rejected", "rejected_total")})
    return {**dict(total), "rejected": dict(sorted(rejected.items())),
            "rejected_total": sum(rejected.values())}


# ----------------------------------------------------------------------------- flow

@flow(name="ingest-instructables", log_prints=True)
def ingest_instructables(listing: str | None = None, urls_file: Path | None = None,
                         sitemap: str | None = None, rescrape: bool = False,
                         allow_hosts: list[str] = (), allow_loopback: bool = False,
                         allow_private_network: bool = False, allow_private: bool = False,
                         source: str = "instructables", delay_s: float = 1.0, workers: int = 4,
                         max_pages: int | None = None, stale_days: float | None = None,
                         progress: bool = True, processes: int = 1, split_by: SplitBy | None = None) -> dict:
    """Discover recipe URLs, fetch and load their pages, download their step images.

    `allow_loopback` lets the crawl reach 127.0.0.0/8 and ::1 (the local sample site),
    `allow_private_network` RFC 1918/unique-local/CGNAT addresses; link-local and cloud metadata
    addresses are never fetched. `allow_private` is the old name of `allow_loopback` (saved
    deployment parameters still use it) and opens loopback only.

    `processes` > 1: the page and image jobs in that many spawned processes of `workers` threads each,
    each waiting `processes` x `delay_s` between requests to one host (the same rows as one process).

    `split_by`: draw the splits of this and every later crawl per `recipe` or per `author` (every recipe of
    an author in one split; etl/splits.py), stored in the warehouse and applied to its recipes at once;
    None keeps the warehouse's setting (`recipe` until set).

    Returns a summary: discovered, fetched, cached, not_modified, parsed, loaded, images_* and
    rejected counts by `stage/reason` for this run, and rejected_total.
    """
    if not (listing or urls_file or sitemap or rescrape):
        raise ValueError("give a listing URL, a sitemap URL, a URL file, or rescrape=True")
    if workers < 1 or processes < 1 or delay_s < 0 or (max_pages is not None and max_pages < 1):
        raise ValueError("workers, processes and max_pages must be >= 1 and delay_s >= 0")
    config = CrawlConfig(source=source, workers=workers, max_pages=max_pages, stale_days=stale_days,
                         progress=progress, processes=processes,
                         fetch=FetchConfig(allow_hosts=tuple(allow_hosts),
                                           allow_loopback=allow_loopback or allow_private,
                                           allow_private_network=allow_private_network,
                                           delay_s=delay_s))
    resplit = run_task(set_splits, split_by) if split_by is not None else None
    if scale.dask_address():
        log.info("ingest runs in the flow process (per-host rate limit %.1fs); %s is used by the "
                 "embed stage only", delay_s, scale.describe())
    urls, s_discover = run_task(discover_urls, config, listing, str(urls_file) if urls_file else None,
                                     sitemap, rescrape)
    s_pages = run_task(crawl_pages, config, urls, rescrape)
    s_images = run_task(download_images, config, rescrape)
    summary = merge_summaries(s_discover, s_pages, s_images)
    summary["discovered"] = len(urls)
    if resplit is not None:
        summary["splits"] = resplit
    log.info("ingest summary: %s", summary)
    log.info("ingest: %d loaded, %d rejected (see `mrqa status` / the rejects table)",
             summary.get("loaded", 0), summary["rejected_total"])
    return summary


def bench_crawl(n_recipes: int = 300, seed: int = 0, repeats: int = 2, crawl_workers: int = 8,
                root: Path | None = None, compare: str = "processes", processes: int = 2) -> dict:
    """Crawl one built sample kitchen into fresh warehouses in two ways, `repeats` times each in
    alternating order (this machine's speed drifts); returns each run's wall seconds, the medians, their
    ratio (`speedup`: the first way's median over the second's), and whether every run loaded the same
    rows (a hash over the recipes, steps and images tables). `compare` "processes": one crawl process
    against `processes` (`ingest_instructables(processes=...)`), the server in a process of its own;
    "server": the server in the crawler's process (`SiteServer`, a thread) against a process of its own
    (`ProcessSiteServer`, what the pipeline uses), one crawl process."""
    import hashlib
    import os
    import statistics
    import tempfile
    import time

    from etl.sample.generate import build_sample
    from etl.sample.server import ProcessSiteServer, SiteServer
    from etl.warehouse import connect

    if compare not in ("processes", "server"):
        raise ValueError(f"compare must be processes or server, got {compare!r}")
    if processes < 2 and compare == "processes":
        raise ValueError(f"compare processes needs processes >= 2, got {processes}")

    def content(con) -> str:
        h = hashlib.sha256()
        for q in ("SELECT recipe_id, title, author FROM recipes ORDER BY recipe_id",
                  "SELECT recipe_id, step_idx, title, body FROM steps ORDER BY recipe_id, step_idx",
                  "SELECT image_id, sha256, status FROM images ORDER BY image_id"):
            h.update(repr(con.execute(q).fetchall()).encode())
        return h.hexdigest()

    ways = ({"1 process": (ProcessSiteServer, 1), f"{processes} processes": (ProcessSiteServer, processes)}
            if compare == "processes" else {"thread": (SiteServer, 1), "process": (ProcessSiteServer, 1)})
    first, second = list(ways)
    runs: dict[str, list[float]] = {w: [] for w in ways}
    hashes = set()
    old_home = os.environ.get("MRQA_HOME")
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        build_sample(Path(tmp) / "sample", n_recipes, seed, progress=False)
        site = Path(tmp) / "sample" / "site"
        order = [w for i in range(repeats) for w in ((first, second) if i % 2 == 0 else (second, first))]
        try:
            for i, way in enumerate(order):
                os.environ["MRQA_HOME"] = str(Path(tmp) / f"home{i}")
                paths = Paths.from_env().ensure()
                connect(paths).close()
                server, n = ways[way]
                with server(site) as srv:
                    t0 = time.perf_counter()
                    ingest_instructables.fn(listing=srv.url + "/cooking/", allow_loopback=True, delay_s=0.0,
                                            workers=crawl_workers, progress=False, processes=n)
                    runs[way].append(round(time.perf_counter() - t0, 2))
                con = connect(paths)
                try:
                    hashes.add(content(con))
                finally:
                    con.close()
        finally:
            if old_home is None:
                os.environ.pop("MRQA_HOME", None)
            else:
                os.environ["MRQA_HOME"] = old_home
    med = {w: statistics.median(v) for w, v in runs.items()}
    return {"n_recipes": n_recipes, "compare": compare, "ways": [first, second], "runs": runs, "median_s": med,
            "speedup": round(med[first] / med[second], 2), "same_rows": len(hashes) == 1}
