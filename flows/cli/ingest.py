"""`mrqa parse`, `mrqa ingest ...`, `mrqa sample ...`: get recipes into the warehouse (crawl
instructables-shaped sites, import RecipeQA files) and build or serve the sample kitchen."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from flows.cli.choices import ImportMethod, SplitBy
from flows.cli.common import check_out_path, echo_json, fail, run_flow, wait_option

app = typer.Typer()
ingest_app = typer.Typer(no_args_is_help=True, help="Ingest recipes into the warehouse.")
sample_app = typer.Typer(no_args_is_help=True, help="The sample kitchen: a generated corpus served "
                                                    "as a local instructables-shaped site.")
app.add_typer(ingest_app, name="ingest")
app.add_typer(sample_app, name="sample")


def is_web_url(url: str) -> bool:
    """Whether `url` is an http(s) URL with a host (and, if any, a valid port)."""
    from urllib.parse import urlsplit
    try:
        parts = urlsplit(url)
        parts.port   # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:               # e.g. an unbalanced "[" in the host
        return False
    return parts.scheme.lower() in ("http", "https") and bool(parts.hostname)


@app.command("parse")
def parse_cmd(page: str = typer.Argument(..., help="A saved page (PAGE.html) or a URL to fetch."),
              url: Optional[str] = typer.Option(None, "--url", help="The page's URL when PAGE is a file "
                                                "(resolves relative image links; default og:url)."),
              allow_host: list[str] = typer.Option([], "--allow-host", help="Extra host allowed for URLs."),
              allow_loopback: bool = typer.Option(False, "--allow-loopback", "--allow-private",
                                                  help="Allow loopback addresses, 127.0.0.0/8 and ::1 (the "
                                                       "local sample site; --allow-private is its old name)."),
              allow_private_network: bool = typer.Option(False, "--allow-private-network",
                                                         help="Allow RFC 1918 / unique-local / CGNAT addresses.")):
    """Parse one instructables recipe page and print it as JSON (recipe, steps, step image URLs)."""
    if url is not None:              # it names the recipe and resolves the page's relative image links
        if not is_web_url(url.strip()):
            fail(f"--url must be an http(s) URL with a host (the page's address), got {url!r}")
        url = url.strip()
    from etl.http_fetch import FetchConfig, Fetcher
    from etl.parse import MAX_PAGE_BYTES, ParseError, parse_page
    if page.startswith(("http://", "https://")):
        res = Fetcher(FetchConfig(allow_hosts=tuple(allow_host), allow_loopback=allow_loopback,
                                  allow_private_network=allow_private_network,
                                  delay_s=0)).fetch(page, kind="page")
        if not res.ok:
            fail(f"could not fetch {page}: {res.reason} ({res.detail})")
        html, url = res.body, url or page
    else:
        path = Path(page)
        if not path.is_file():
            fail(f"{page} is neither a file nor an http(s) URL")
        if path.stat().st_size > MAX_PAGE_BYTES:   # the crawler's page limit; checked before reading
            fail(f"{page}: too_large: {path.stat().st_size} bytes > {MAX_PAGE_BYTES}")
        html = path.read_bytes()
    try:
        rec = parse_page(html, url)
    except ParseError as e:
        fail(f"{page}: {e.reason}: {e.detail}")
    except Exception as e:  # noqa: BLE001 - a page the parser cannot handle is a parse_error, not a crash
        fail(f"{page}: parse_error: {type(e).__name__}: {e}")
    echo_json(rec.to_json())


@ingest_app.command("instructables")
def ingest_instructables_cmd(
        listing: Optional[str] = typer.Option(None, "--listing", help="Category or channel listing URL "
                                              "(follows channel links and rel=next pagination)."),
        urls: Optional[Path] = typer.Option(None, "--urls", help="File with one recipe URL per line."),
        sitemap: Optional[str] = typer.Option(None, "--sitemap", help="Sitemap (or sitemap index) URL."),
        rescrape: bool = typer.Option(False, "--rescrape", help="Refetch recipes with missing/partial "
                                      "steps or images (conditional GET) and retry failed images."),
        stale_days: Optional[float] = typer.Option(None, "--stale-days", min=0.0, help="With --rescrape: also "
                                                   "refresh pages fetched more than this many days ago."),
        allow_host: list[str] = typer.Option([], "--allow-host", help="Extra allowed host (repeatable); "
                                             "an explicitly named host may be private."),
        allow_loopback: bool = typer.Option(False, "--allow-loopback", "--allow-private",
                                            help="Allow loopback addresses, 127.0.0.0/8 and ::1 (the local "
                                                 "sample site; --allow-private is its old name)."),
        allow_private_network: bool = typer.Option(False, "--allow-private-network", help="Allow RFC 1918, "
                                                   "unique-local and CGNAT addresses (link-local and cloud "
                                                   "metadata addresses are never fetched)."),
        delay: float = typer.Option(1.0, "--delay", min=0.0, help="Seconds between requests to one host."),
        workers: int = typer.Option(4, "--workers", min=1, help="Download threads (per process)."),
        processes: int = typer.Option(1, "--processes", min=1, help="Crawl processes: an unthrottled crawl "
                                      "of a local site (--delay 0) is bound by the crawler's own Python, and "
                                      "2 processes crawl the sample kitchen 2.2x as fast; each waits "
                                      "N x --delay per host (the same average rate)."),
        max_pages: Optional[int] = typer.Option(None, "--max-pages", min=1,
                                                help="Stop after this many recipe pages."),
        source: str = typer.Option("instructables", "--source", help="recipes.source value "
                                   "(instructables, or sample for the sample kitchen)."),
        split_by: Optional[SplitBy] = typer.Option(None, "--split-by", help="Draw splits per recipe or per "
                                                   "author (every recipe of an author in one split), from now on "
                                                   "and for the recipes already there; default: as stored."),
        no_progress: bool = typer.Option(False, "--no-progress", help="No progress bars."),
        wait: float = wait_option()):
    """Crawl recipe pages and step images into the warehouse (resumable; prints a summary).

    Example: mrqa ingest instructables --listing http://127.0.0.1:8000/cooking/ --allow-loopback
    --source sample --delay 0
    """
    if not (listing or urls or sitemap or rescrape):
        fail("give --listing URL, --sitemap URL, --urls FILE or --rescrape")
    if urls is not None and not urls.is_file():
        fail(f"--urls {urls}: no such file")
    if workers < 1 or processes < 1 or delay < 0:
        fail("--workers and --processes must be >= 1 and --delay >= 0")
    from flows.ingest import ingest_instructables
    summary = run_flow(ingest_instructables, listing=listing, urls_file=urls, sitemap=sitemap, rescrape=rescrape,
                                   allow_hosts=list(allow_host), allow_loopback=allow_loopback,
                                   allow_private_network=allow_private_network,
                                   source=source, delay_s=delay, workers=workers, max_pages=max_pages,
                                   stale_days=stale_days, progress=not no_progress, processes=processes,
                                   split_by=split_by.value if split_by else None)
    echo_json(summary)


@sample_app.command("build")
def sample_build_cmd(
        recipes: int = typer.Option(1000, "--recipes", "-n", min=1, help="Number of recipes (20000 = RecipeQA scale)."),
        seed: int = typer.Option(0, "--seed", help="Seed: same recipes + seed give byte-identical files."),
        out: Path = typer.Option(Path("data/sample"), "--out", help="Output folder (site/, ground_truth.jsonl, "
                                                                    "manifest.json); an earlier build there is "
                                                                    "replaced, a folder of other files refused."),
        workers: Optional[int] = typer.Option(None, "--workers", "-w", min=1,
                                              help="Worker processes (default: CPU count)."),
        image_size: int = typer.Option(128, "--image-size", min=32, max=512, help="Image side in pixels."),
        no_progress: bool = typer.Option(False, "--no-progress", help="Hide the progress bar.")):
    """Generate the sample kitchen: a deterministic recipe site with images, noise and ground truth."""
    from etl.sample.generate import build_sample, check_build_dir
    out = check_out_path("--out", out)
    try:
        check_build_dir(out)
    except ValueError as e:
        fail(f"--out {e}")
    try:
        r = build_sample(out, recipes, seed, workers=workers, image_size=image_size, progress=not no_progress)
    except OSError as e:
        fail(f"--out {out}: cannot write the build ({e.strerror or e}: {e.filename or out})")
    c = r["counts"]
    typer.echo(f"built {recipes:,} recipes ({c.get('pages', 0):,} pages, {c['image_files']:,} images, "
               f"{c['bytes'] / 1e6:.1f} MB) into {out}/site in {r['seconds']:.1f}s with {r['workers']} worker(s)")
    typer.echo(f"speed: {r['recipes_per_s']:,.1f} recipes/s, {r['images_per_s']:,.1f} images/s")
    typer.echo("planted: " + ", ".join(f"{k[9:]}={v}" for k, v in c.items() if k.startswith("expected_"))
               + f"; images missing={c.get('images_missing', 0)} broken={c.get('images_broken', 0)}; "
               f"noise instances={c.get('noise', 0)}")
    typer.echo(f"authors: {c['authors']:,}, {c['authors_1_2_share']:.0%} with 1-2 recipes, most "
               f"{c['authors_max_recipes']} recipes, {c['authors_20_plus']} with 20+")
    typer.echo(f"content sha256: {r['content_sha256']}")


@sample_app.command("serve")
def sample_serve_cmd(
        out: Path = typer.Argument(..., help="A build folder (with site/) or the site folder itself."),
        port: int = typer.Option(8000, "--port", "-p", min=0, max=65535, help="Port on 127.0.0.1 (0 = any free)."),
        host: str = typer.Option("127.0.0.1", "--host", help="Interface to bind."),
        fail_rate: float = typer.Option(0.0, "--fail-rate", min=0.0, max=1.0,
                                        help="Share of requests answered 500/503."),
        rate_limit_rate: float = typer.Option(0.0, "--rate-limit-rate", min=0.0, max=1.0,
                                              help="Share answered 429 with Retry-After."),
        slow_rate: float = typer.Option(0.0, "--slow-rate", min=0.0, max=1.0, help="Share delayed by --slow-seconds."),
        slow_seconds: float = typer.Option(1.0, "--slow-seconds", min=0.0, help="Delay of a slow response."),
        truncate_rate: float = typer.Option(0.0, "--truncate-rate", min=0.0, max=1.0, help="Share with a cut body."),
        seed: int = typer.Option(0, "--seed", help="Seed of the (deterministic, transient) fault decisions.")):
    """Serve a built sample kitchen over HTTP until Ctrl-C (prints the URL)."""
    from etl.sample.server import FaultConfig, serve
    site = out / "site" if (out / "site").is_dir() else out
    if not (site / "robots.txt").is_file():
        fail(f"{out} is not a sample kitchen build (no site/robots.txt); run `mrqa sample build --out {out}` first")
    if fail_rate + rate_limit_rate + slow_rate + truncate_rate > 1.0:
        fail("the fault rates add up to more than 1")
    faults = FaultConfig(fail_rate=fail_rate, rate_limit_rate=rate_limit_rate, slow_rate=slow_rate,
                         slow_seconds=slow_seconds, truncate_rate=truncate_rate, seed=seed)
    try:
        serve(site, host=host, port=port, faults=faults)
    except OSError as e:
        fail(f"cannot listen on {host}:{port}: {e}; choose another --port")


@sample_app.command("cue")
def sample_cue_cmd(
        out: Path = typer.Argument(..., help="A sample kitchen build folder (with ground_truth.jsonl)."),
        encoder: Optional[str] = typer.Option(None, "--encoder", help="Also in this encoder's space "
                                              "(default: the latest registered in MRQA_HOME, if any)."),
        no_encoder: bool = typer.Option(False, "--no-encoder", help="Border pixels only."),
        workers: int = typer.Option(0, "--workers", min=0, help="Image decode workers for the encoder.")):
    """How strong the kitchen (background) cue is: mean cosine of image pairs from the same recipe
    (other steps), the same author (other recipes) and different authors, and how often an image's
    nearest neighbour is from its recipe / its author, in border pixels and an encoder's space."""
    from etl.config import Paths
    from etl.sample.cue import measure_cue
    if not (out / "ground_truth.jsonl").is_file():
        fail(f"{out} is not a sample kitchen build (no ground_truth.jsonl); run `mrqa sample build --out {out}`")
    enc = None
    paths = Paths.from_env()
    if not no_encoder and (encoder or paths.warehouse.is_file()):
        from etl.warehouse import connect
        from features.embed.encoders import EncoderUnavailable, load_encoder
        try:
            enc = load_encoder(connect(paths, read_only=True), encoder, paths=paths)
        except EncoderUnavailable as e:
            if encoder:
                fail(str(e))
            typer.echo(f"(no encoder space: {e})")
    try:
        res = measure_cue(out, enc, workers)
    except ValueError as e:
        fail(f"{out}: {e}")
    for space, f in res.items():
        typer.echo(f"{space}: {f['n_images']:,} images, {f['n_recipes']:,} recipes, {f['n_authors']:,} authors "
                   f"({f['n_authors_multi']:,} with 2+ recipes)")
        typer.echo(f"  mean cosine  same recipe {f['cos_same_recipe']}   same author {f['cos_same_author']}   "
                   f"across authors {f['cos_across_authors']}")
        typer.echo(f"  1-NN same recipe {f['nn_same_recipe']} (chance {f['nn_same_recipe_chance']})   "
                   f"same author, other recipe {f['nn_same_author']} (chance {f['nn_same_author_chance']})")


@ingest_app.command("recipeqa")
def ingest_recipeqa_cmd(
        files: list[Path] = typer.Argument(..., help="RecipeQA JSON files (train.json val.json test.json)."),
        images: Optional[Path] = typer.Option(None, "--images", help="RecipeQA images directory "
                                              "(images-qa/ or a flat folder of <recipe>_<step>_<k>.jpg); "
                                              "files are mapped in place, never copied."),
        method: ImportMethod = typer.Option(ImportMethod.arrow, "--method", help="Bulk load method."),
        replace: bool = typer.Option(False, "--replace", help="Known recipes become exactly what these "
                                     "files say: their steps and images missing here are deleted "
                                     "(default: kept, and counted under 'kept')."),
        resplit: Optional[str] = typer.Option(None, "--resplit", metavar="TRAIN,VAL,TEST", help="Put each recipe "
                                              "in a split by a hash of its id, with these shares (e.g. 0.6,0.2,0.2), "
                                              "instead of the files' split (one file alone: nothing to train on)."),
        wait: float = wait_option()):
    """Import RecipeQA files: recipes, steps, images and the original questions (datasets recipeqa-original-<task>)."""
    from etl.recipeqa import RecipeQAFormatError, parse_resplit, read_recipeqa
    try:
        shares = parse_resplit(resplit) if resplit is not None else None
    except ValueError as e:
        fail(str(e))
    if images is not None and not images.is_dir():
        fail(f"--images {images}: " + ("a file, not a folder" if images.exists() else "no such folder")
             + "; nothing was loaded")
    try:    # a bad file is refused here in a second, before the import starts
        read_recipeqa(files)
    except RecipeQAFormatError as e:
        fail(f"{e}. Nothing was loaded; fix or remove that record and run again.")
    from flows.import_recipeqa import import_recipeqa_flow
    summary = run_flow(import_recipeqa_flow, [str(f) for f in files], str(images) if images else None, method.value,
                                   raise_on_error=False, replace=replace, resplit=shares)
    if "error" in summary:
        fail(f"{summary['error']}. Nothing was loaded; fix or remove that record and run again.")
    echo_json(summary)
