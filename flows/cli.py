"""`mrqa`: the command line of the Meta-RecipeQA pipeline.

Each command is a thin wrapper over a flow (flows/) or a plain function (etl/, features/, training/).
Global option --home sets MRQA_HOME (default ./data).
"""
from __future__ import annotations

import json
import logging
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Meta-RecipeQA pipeline: scrape/import recipes, clean, embed, generate "
                       "de-biased benchmarks with control knobs, train and evaluate.")
ingest_app = typer.Typer(no_args_is_help=True, help="Ingest recipes into the warehouse.")
sample_app = typer.Typer(no_args_is_help=True, help="The sample kitchen: a generated corpus served "
                                                    "as a local instructables-shaped site.")
bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks that print measured figures.")
app.add_typer(ingest_app, name="ingest")
app.add_typer(sample_app, name="sample")
app.add_typer(bench_app, name="bench")


def _setup(home: Optional[Path], verbose: bool = False) -> None:
    if home is not None:
        os.environ["MRQA_HOME"] = str(home)
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    for noisy in ("httpx", "urllib3", "prefect", "distributed", "PIL"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


@app.callback()
def _root(home: Optional[Path] = typer.Option(None, "--home", envvar="MRQA_HOME",
                                              help="Base data directory (default ./data)."),
          verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logging.")):
    _setup(home, verbose)


def _fail(msg: str, code: int = 2) -> None:
    typer.secho(f"error: {msg}", fg="red", err=True)
    raise typer.Exit(code)


def _echo_json(obj) -> None:
    typer.echo(json.dumps(obj, indent=2, ensure_ascii=False, default=str))


# ----------------------------------------------------------------------------- warehouse

@app.command("init")
def init_cmd():
    """Create MRQA_HOME and the warehouse, applying pending schema files."""
    from etl.config import Paths
    from etl.warehouse import connect
    paths = Paths.from_env().ensure()
    con = connect(paths)
    n = con.execute("SELECT count(*) FROM schema_version").fetchone()[0]
    typer.echo(f"warehouse {paths.warehouse} at schema version {n}")


@app.command("sql-test")
def sql_test_cmd():
    """Run the warehouse data tests (sql/tests/*.sql must return zero rows)."""
    from etl.warehouse import connect, run_sql_tests
    failures = {k: v for k, v in run_sql_tests(connect()).items() if v}
    for name, n in failures.items():
        typer.secho(f"FAIL {name}: {n} row(s)", fg="red")
    if failures:
        raise typer.Exit(1)
    typer.echo("all SQL data tests pass")


@app.command("query")
def query_cmd(sql: str = typer.Argument(..., help="SQL to run read-only against the warehouse."),
              fmt: str = typer.Option("table", "--format", help="table | json | csv")):
    """Ad hoc analyst query: one SELECT/WITH/DESCRIBE/SHOW/EXPLAIN statement on a read-only,
    locked connection without file access (etl/analyst.py); anything else is refused (rc 2)."""
    from etl.analyst import AnalystQueryError, connect_analyst, run_analyst_query
    from etl.config import Paths
    from etl.warehouse import SchemaError
    if fmt not in ("table", "json", "csv"):
        _fail("--format must be table, json or csv")
    paths = Paths.from_env()
    if not paths.warehouse.exists():
        _fail(f"no warehouse at {paths.warehouse}; run `mrqa init` or `mrqa demo` first")
    try:
        con = connect_analyst(paths)
        result = run_analyst_query(con, sql)
    except (AnalystQueryError, SchemaError) as e:
        _fail(str(e))
    rows = list(zip(*(c.to_pylist() for c in result.columns)))
    if fmt == "json":
        _echo_json([dict(zip(result.column_names, r)) for r in rows])
    elif fmt == "csv":
        import csv
        w = csv.writer(sys.stdout)
        w.writerow(result.column_names)
        w.writerows(rows)
    else:
        con.from_arrow(result).show(max_rows=50)


@app.command("status")
def status_cmd():
    """Row counts of the warehouse tables and rejects by stage and reason."""
    from etl.warehouse import connect
    con = connect()
    for t in ("recipes", "steps", "step_tokens", "images", "pages", "rejects", "datasets",
              "questions", "runs"):
        typer.echo(f"{t:12s} {con.execute(f'SELECT count(*) FROM {t}').fetchone()[0]:>10,d}")
    for stage, reason, n, *_ in con.execute("SELECT * FROM v_reject_summary").fetchall():
        typer.echo(f"  reject {stage}/{reason}: {n}")


# ----------------------------------------------------------------------------- ingest (issue 2)


@app.command("parse")
def parse_cmd(page: str = typer.Argument(..., help="A saved page (PAGE.html) or a URL to fetch."),
              url: Optional[str] = typer.Option(None, "--url", help="The page's URL when PAGE is a file "
                                                "(resolves relative image links; default og:url)."),
              allow_host: list[str] = typer.Option([], "--allow-host", help="Extra host allowed for URLs."),
              allow_private: bool = typer.Option(False, "--allow-private",
                                                 help="Allow private/loopback addresses (local sample site).")):
    """Parse one instructables recipe page and print it as JSON (recipe, steps, step image URLs)."""
    from etl.http_fetch import FetchConfig, Fetcher
    from etl.parse import ParseError, parse_page
    if page.startswith(("http://", "https://")):
        res = Fetcher(FetchConfig(allow_hosts=tuple(allow_host), allow_private=allow_private,
                                  delay_s=0)).fetch(page, kind="page")
        if not res.ok:
            _fail(f"could not fetch {page}: {res.reason} ({res.detail})")
        html, url = res.body, url or page
    else:
        path = Path(page)
        if not path.is_file():
            _fail(f"{page} is neither a file nor an http(s) URL")
        html = path.read_bytes()
    try:
        rec = parse_page(html, url)
    except ParseError as e:
        _fail(f"{page}: {e.reason}: {e.detail}")
    _echo_json(rec.to_json())


@ingest_app.command("instructables")
def ingest_instructables_cmd(
        listing: Optional[str] = typer.Option(None, "--listing", help="Category or channel listing URL "
                                              "(follows channel links and rel=next pagination)."),
        urls: Optional[Path] = typer.Option(None, "--urls", help="File with one recipe URL per line."),
        sitemap: Optional[str] = typer.Option(None, "--sitemap", help="Sitemap (or sitemap index) URL."),
        rescrape: bool = typer.Option(False, "--rescrape", help="Refetch recipes with missing/partial "
                                      "steps or images (conditional GET) and retry failed images."),
        stale_days: Optional[float] = typer.Option(None, "--stale-days", help="With --rescrape: also "
                                                   "refresh pages fetched more than this many days ago."),
        allow_host: list[str] = typer.Option([], "--allow-host", help="Extra allowed host (repeatable); "
                                             "an explicitly named host may be private."),
        allow_private: bool = typer.Option(False, "--allow-private", help="Allow private/loopback "
                                           "addresses (the local sample site)."),
        delay: float = typer.Option(1.0, "--delay", help="Seconds between requests to one host."),
        workers: int = typer.Option(4, "--workers", help="Download threads."),
        max_pages: Optional[int] = typer.Option(None, "--max-pages", help="Stop after this many recipe pages."),
        source: str = typer.Option("instructables", "--source", help="recipes.source value "
                                   "(instructables, or sample for the sample kitchen)."),
        no_progress: bool = typer.Option(False, "--no-progress", help="No progress bars.")):
    """Crawl recipe pages and step images into the warehouse (resumable; prints a summary).

    Example: mrqa ingest instructables --listing http://127.0.0.1:8000/cooking/ --allow-private
    --source sample --delay 0
    """
    if not (listing or urls or sitemap or rescrape):
        _fail("give --listing URL, --sitemap URL, --urls FILE or --rescrape")
    if urls is not None and not urls.is_file():
        _fail(f"--urls {urls}: no such file")
    if workers < 1 or delay < 0:
        _fail("--workers must be >= 1 and --delay >= 0")
    from flows.ingest import ingest_instructables
    summary = ingest_instructables(listing=listing, urls_file=urls, sitemap=sitemap, rescrape=rescrape,
                                   allow_hosts=list(allow_host), allow_private=allow_private,
                                   source=source, delay_s=delay, workers=workers, max_pages=max_pages,
                                   stale_days=stale_days, progress=not no_progress)
    _echo_json(summary)


@bench_app.command("parse")
def bench_parse_cmd(pages: list[Path] = typer.Argument(None, help="HTML files or directories "
                                                        "(default: the shared fixture page)."),
                    seconds: float = typer.Option(2.0, "--seconds", help="Timing per backend.")):
    """Parse throughput (pages/s) with bs4's lxml backend (default) vs html.parser, in one run."""
    from etl.config import REPO_ROOT
    from etl.parse import DEFAULT_BACKEND, ParseError, bench_parse
    files: list[Path] = []
    for p in pages or [REPO_ROOT.parent / "shared" / "fixtures" / "instructables"]:
        files += sorted(p.rglob("*.html")) if p.is_dir() else [p]
    files = [f for f in files if f.is_file()]
    if not files:
        _fail("no HTML pages found; pass page files or directories")
    try:
        rates = bench_parse([(f.read_bytes(), None) for f in files], min_seconds=seconds)
    except ParseError as e:
        _fail(f"a benchmark page is not a recipe page: {e}")
    other = [b for b in rates if b != DEFAULT_BACKEND][0]
    typer.echo(f"parse: {rates[DEFAULT_BACKEND]:,.1f} pages/s ({DEFAULT_BACKEND}, default) vs "
               f"{rates[other]:,.1f} pages/s ({other}): ratio {rates[DEFAULT_BACKEND] / rates[other]:.2f}x "
               f"over {len(files)} page(s)")


# ----------------------------------------------------------------------------- sample kitchen (issue 3)

@sample_app.command("build")
def sample_build_cmd(
        recipes: int = typer.Option(1000, "--recipes", "-n", min=1, help="Number of recipes (20000 = RecipeQA scale)."),
        seed: int = typer.Option(0, "--seed", help="Seed: same recipes + seed give byte-identical files."),
        out: Path = typer.Option(Path("data/sample"), "--out", help="Output folder (site/, ground_truth.jsonl, "
                                                                    "manifest.json); an earlier build there is replaced."),
        workers: Optional[int] = typer.Option(None, "--workers", "-w", min=1, help="Worker processes (default: CPU count)."),
        image_size: int = typer.Option(128, "--image-size", min=32, max=512, help="Image side in pixels."),
        no_progress: bool = typer.Option(False, "--no-progress", help="Hide the progress bar.")):
    """Generate the sample kitchen: a deterministic recipe site with images, noise and ground truth."""
    from etl.sample.generate import build_sample
    if out.exists() and not out.is_dir():
        _fail(f"--out {out} is a file; give a folder")
    r = build_sample(out, recipes, seed, workers=workers, image_size=image_size, progress=not no_progress)
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
        fail_rate: float = typer.Option(0.0, "--fail-rate", min=0.0, max=1.0, help="Share of requests answered 500/503."),
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
        _fail(f"{out} is not a sample kitchen build (no site/robots.txt); run `mrqa sample build --out {out}` first")
    if fail_rate + rate_limit_rate + slow_rate + truncate_rate > 1.0:
        _fail("the fault rates add up to more than 1")
    faults = FaultConfig(fail_rate=fail_rate, rate_limit_rate=rate_limit_rate, slow_rate=slow_rate,
                         slow_seconds=slow_seconds, truncate_rate=truncate_rate, seed=seed)
    try:
        serve(site, host=host, port=port, faults=faults)
    except OSError as e:
        _fail(f"cannot listen on {host}:{port}: {e}; choose another --port")


@bench_app.command("sample")
def bench_sample_cmd(
        recipes: int = typer.Option(300, "--recipes", "-n", min=1, help="Recipes per build."),
        workers: int = typer.Option(2, "--workers", "-w", min=2, help="Worker count compared with 1 worker."),
        seed: int = typer.Option(0, "--seed", help="Seed of the sample.")):
    """Time `sample build` with 1 worker vs N workers (same output hash); prints recipes/s, images/s, ratio."""
    from etl.sample.generate import bench_sample
    r = bench_sample(recipes, seed, workers=(1, workers))
    for w, x in r["runs"].items():
        typer.echo(f"workers={w}: {recipes} recipes, {x['images']:,} images in {x['seconds']:.2f}s -> "
                   f"{x['recipes_per_s']:,.1f} recipes/s, {x['images_per_s']:,.1f} images/s")
    typer.echo(f"speed-up {workers} workers vs 1: {r['speedup']:.2f}x; identical output: {r['same_hash']}")
    if not r["same_hash"]:
        _fail("the builds differ between worker counts (determinism bug)", code=1)


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
        _fail(f"{out} is not a sample kitchen build (no ground_truth.jsonl); run `mrqa sample build --out {out}`")
    enc = None
    paths = Paths.from_env()
    if not no_encoder and (encoder or paths.warehouse.is_file()):
        from etl.warehouse import connect
        from features.embed.encoders import EncoderUnavailable, load_encoder
        try:
            enc = load_encoder(connect(paths, read_only=True), encoder, paths=paths)
        except EncoderUnavailable as e:
            if encoder:
                _fail(str(e))
            typer.echo(f"(no encoder space: {e})")
    try:
        res = measure_cue(out, enc, workers)
    except ValueError as e:
        _fail(str(e))
    for space, f in res.items():
        typer.echo(f"{space}: {f['n_images']:,} images, {f['n_recipes']:,} recipes, {f['n_authors']:,} authors "
                   f"({f['n_authors_multi']:,} with 2+ recipes)")
        typer.echo(f"  mean cosine  same recipe {f['cos_same_recipe']}   same author {f['cos_same_author']}   "
                   f"across authors {f['cos_across_authors']}")
        typer.echo(f"  1-NN same recipe {f['nn_same_recipe']} (chance {f['nn_same_recipe_chance']})   "
                   f"same author, other recipe {f['nn_same_author']} (chance {f['nn_same_author_chance']})")



# ----------------------------------------------------------------------------- recipeqa import (issue 2, importer)


@ingest_app.command("recipeqa")
def ingest_recipeqa_cmd(
        files: list[Path] = typer.Argument(..., help="RecipeQA JSON files (train.json val.json test.json)."),
        images: Optional[Path] = typer.Option(None, "--images", help="RecipeQA images directory "
                                              "(images-qa/ or a flat folder of <recipe>_<step>_<k>.jpg); "
                                              "files are mapped in place, never copied."),
        method: str = typer.Option("arrow", "--method", help="Bulk load method: arrow | executemany."),
        replace: bool = typer.Option(False, "--replace", help="Known recipes become exactly what these "
                                     "files say: their steps and images missing here are deleted "
                                     "(default: kept, and counted under 'kept').")):
    """Import RecipeQA files: recipes, steps, images and the original questions (datasets recipeqa-original-<task>)."""
    from etl.recipeqa import RecipeQAFormatError, read_recipeqa
    from flows.import_recipeqa import import_recipeqa_flow
    if method not in ("arrow", "executemany"):
        _fail("--method must be arrow or executemany")
    try:    # a bad file is refused here in a second, before the flow starts Prefect
        read_recipeqa(files)
    except RecipeQAFormatError as e:
        _fail(f"{e}. Nothing was loaded; fix or remove that record and run again.")
    summary = import_recipeqa_flow([str(f) for f in files], str(images) if images else None, method,
                                   raise_on_error=False, replace=replace)
    if "error" in summary:
        _fail(f"{summary['error']}. Nothing was loaded; fix or remove that record and run again.")
    _echo_json(summary)


@bench_app.command("import")
def bench_import_cmd(
        file: Optional[Path] = typer.Option(None, "--file", help="RecipeQA JSON to synthesise records "
                                            "from (default: ../shared/fixtures/recipeqa/val_sample.json)."),
        n: int = typer.Option(20000, "--records", help="Number of synthetic records to load."),
        n_baseline: int = typer.Option(1000, "--baseline-records",
                                       help="Records loaded with the (slow) executemany baseline.")):
    """RecipeQA import throughput (records/s): Arrow bulk insert vs executemany, in one run."""
    from etl.config import REPO_ROOT
    from etl.recipeqa import RecipeQAFormatError, bench_import, read_recipeqa
    src = file or REPO_ROOT.parent / "shared" / "fixtures" / "recipeqa" / "val_sample.json"
    try:
        records = read_recipeqa([src])
    except RecipeQAFormatError as e:
        _fail(str(e))
    r = bench_import(records, n, n_baseline)
    typer.echo(f"import: {r['arrow_records_per_s']:,.0f} records/s (arrow, {r['records']} records, "
               f"{r['recipes']} recipes) vs {r['executemany_records_per_s']:,.0f} records/s "
               f"(executemany, {r['executemany_records']} records): ratio {r['ratio_arrow_vs_executemany']}x")
    _echo_json(r)


# ----------------------------------------------------------------------------- cleaning (issue 4)


@app.command("clean")
def clean_cmd(workers: int = typer.Option(2, "--workers", help="Worker processes (1 = in-process)."),
              retrain_punkt: bool = typer.Option(False, "--retrain-punkt",
                                                 help="Retrain the Punkt sentence model on the corpus."),
              no_repair: bool = typer.Option(False, "--no-repair", help="Store tokens without OOV repair.")):
    """Clean all steps from raw text, reject non-recipes (rejects, stage clean), store step_tokens."""
    from flows.clean import clean_flow
    _echo_json(clean_flow(workers=workers, retrain_punkt=retrain_punkt, repair=not no_repair))


@app.command("tokenize")
def tokenize_cmd(text: str = typer.Argument(..., help="Raw text (may hold HTML, Unicode junk, fused words)."),
                 title: bool = typer.Option(False, "--title", help="Clean it as a step title (drops 'Step 3:')."),
                 no_repair: bool = typer.Option(False, "--no-repair", help="Skip OOV repair.")):
    """Print the JSON list of token lists (one per sentence) the pipeline would store for TEXT."""
    from etl.clean_rules import clean_text, clean_title
    from etl.config import Paths
    from etl.repair import Repairer
    from etl.tokenize import load_punkt, tokenize_text, untrained_punkt
    punkt = load_punkt(Paths.from_env().models) or untrained_punkt()
    cleaned = clean_title(text) if title else clean_text(text)
    sents = tokenize_text(cleaned, punkt)
    if not no_repair:
        rep = Repairer()
        sents = [rep.repair_tokens(s) for s in sents]
    typer.echo(json.dumps(sents, ensure_ascii=False))


@app.command("vocab-report")
def vocab_report_cmd(
        ground_truth: Optional[Path] = typer.Option(None, "--ground-truth", help="A sample kitchen "
                                                    "ground_truth.jsonl: also score repairs and noise removal."),
        top: int = typer.Option(30, "--top", help="How many top OOV types to list.")):
    """Vocabulary quality before/after OOV repair (stored in vocab_stats); optionally repair accuracy."""
    from etl.config import Paths
    from etl.vocab import evaluate_on_ground_truth, vocab_report
    from etl.warehouse import connect
    out = {}
    if Paths.from_env().warehouse.exists():
        out = vocab_report(connect(), top=top)
    if ground_truth is not None:
        if not ground_truth.is_file():
            _fail(f"{ground_truth}: no such file (build one with etl.sample.generate.build_sample)")
        out["ground_truth"] = evaluate_on_ground_truth(ground_truth)
    if not out:
        _fail("no warehouse yet: run `mrqa clean` first, or pass --ground-truth")
    _echo_json(out)


@bench_app.command("clean")
def bench_clean_cmd(
        recipes: int = typer.Option(4500, "--recipes", help="Sample kitchen recipes to generate: every "
                                    "recipe differs (no repeated text); 4500 give about 5 M characters."),
        seed: int = typer.Option(11, "--seed", help="Sample kitchen seed."),
        workers: int = typer.Option(2, "--workers", help="Worker processes for the main run."),
        baseline_chars: int = typer.Option(1_000_000, "--baseline-chars",
                                           help="Characters the naive baseline processes."),
        no_quality: bool = typer.Option(False, "--no-quality", help="Skip the repair precision/recall.")):
    """Clean+tokenize+repair throughput: chars, seconds, chars/s with N workers and with 1 process,
    the naive baseline's chars/s (stock NLTK, no caches), ratios, load average; and repair
    precision/recall against the sample kitchen's ground truth."""
    from etl.clean import bench_clean
    if recipes < 10 or workers < 1:
        _fail("--recipes must be >= 10 and --workers >= 1")
    _echo_json(bench_clean(recipes, seed, workers, baseline_chars, quality=not no_quality))


# ----------------------------------------------------------------------------- features (issue 5)

encoder_app = typer.Typer(no_args_is_help=True, help="Image/text encoders (feature spaces): train the "
                                                     "default, register real open_clip weights, list, evaluate.")
app.add_typer(encoder_app, name="encoder")


@encoder_app.command("train")
def encoder_train_cmd(
        epochs: Optional[int] = typer.Option(None, "--epochs", help="Passes over the train steps "
                                             "(default: TrainConfig's, 8)."),
        batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Images per contrastive "
                                                 "batch (default 64)."),
        images_per_recipe: Optional[int] = typer.Option(None, "--images-per-recipe", help="Steps of one "
                                                        "recipe kept together in a batch (default 4)."),
        recipe_weight: Optional[float] = typer.Option(None, "--recipe-weight", help="Weight of the "
                                                      "same-recipe image-image term (0 = CLIP loss only)."),
        seed: int = typer.Option(0, "--seed", help="Seed of init, image picks and order."),
        image_size: Optional[int] = typer.Option(None, "--image-size", help="Input size in pixels "
                                                 "(default: the architecture's, 32)."),
        lr: Optional[float] = typer.Option(None, "--lr", help="Peak AdamW learning rate (default 1e-3)."),
        workers: int = typer.Option(0, "--workers", help="Decode workers for images not in the pixel cache."),
        threads: Optional[int] = typer.Option(None, "--threads", help="torch CPU threads (default: "
                                              "torch's; 1 is faster on a loaded machine)."),
        max_steps: Optional[int] = typer.Option(None, "--max-train-steps",
                                                help="Use at most this many train steps (quick runs).")):
    """Train the default encoder (mrqa-tiny-clip) on the train split: CLIP loss on (step image, step
    text) pairs plus a same-recipe image-image contrastive term."""
    from features.embed.train_encoder import TrainConfig, TrainingDataError, train_encoder
    from etl.warehouse import connect
    given = {"epochs": epochs, "batch_size": batch_size, "images_per_recipe": images_per_recipe,
             "recipe_weight": recipe_weight, "lr": lr}
    cfg = TrainConfig(seed=seed, image_size=image_size, num_workers=workers, threads=threads,
                      max_train_pairs=max_steps, **{k: v for k, v in given.items() if v is not None})
    if cfg.epochs < 1 or cfg.batch_size < 2 or cfg.images_per_recipe < 1 or cfg.recipe_weight < 0:
        _fail("--epochs and --images-per-recipe must be >= 1, --batch-size >= 2, --recipe-weight >= 0")
    if threads is not None and threads < 1:
        _fail("--threads must be >= 1")
    try:
        res = train_encoder(connect(), cfg=cfg)
    except TrainingDataError as e:
        _fail(str(e))
    _echo_json(res)


@encoder_app.command("add")
def encoder_add_cmd(
        clip_model: str = typer.Option("ViT-B-32", "--clip-model", help="open_clip architecture name."),
        pretrained: str = typer.Option(..., "--pretrained", help="Weights: a local file or an open_clip "
                                       "tag (resolved from the HF cache; set HF_HUB_OFFLINE=1 offline)."),
        image_size: Optional[int] = typer.Option(None, "--image-size", help="Override input size.")):
    """Register an open_clip model with real weights as an encoder (prints its encoder_id)."""
    from etl.warehouse import connect
    from features.embed.encoders import EncoderUnavailable, register_pretrained_encoder
    try:
        typer.echo(register_pretrained_encoder(connect(), clip_model, pretrained, image_size))
    except EncoderUnavailable as e:
        _fail(str(e))


@encoder_app.command("list")
def encoder_list_cmd():
    """Registered encoders with kind, dimension and validation metrics."""
    from etl.warehouse import connect
    from features.embed.encoders import list_encoders
    rows = list_encoders(connect())
    if not rows:
        typer.echo("no encoders; run `mrqa encoder train`")
    for r in rows:
        m = r["metrics"]
        typer.echo(f"{r['encoder_id']}  {r['kind']:10s} dim={r['dim']:<4d} {r['created_at']:%Y-%m-%d %H:%M}"
                   + (f"  val i2t R@1={m.get('i2t_r@1')} R@10={m.get('i2t_r@10')}" if m.get("n_pairs") else ""))


@encoder_app.command("eval")
def encoder_eval_cmd(encoder: Optional[str] = typer.Option(None, "--encoder", help="encoder_id "
                                                            "(default: the latest)."),
                     split: str = typer.Option("val", "--split", help="Pairs of this split."),
                     max_pairs: int = typer.Option(1000, "--max-pairs", help="Seeded sample size."),
                     workers: int = typer.Option(2, "--workers", help="Image decode workers.")):
    """Image<->text retrieval recall@1/@10 on (step image, step text) pairs, with chance level."""
    from etl.config import Paths
    from etl.warehouse import connect
    from features.embed.train_encoder import evaluate_retrieval
    from features.embed.encoders import EncoderUnavailable, load_encoder
    from features.embed.decode import image_items
    paths = Paths.from_env()
    con = connect(paths)
    try:
        enc = load_encoder(con, encoder, paths=paths)
    except EncoderUnavailable as e:
        _fail(str(e))
    m = evaluate_retrieval(enc, image_items(con, paths, split=split), max_pairs, num_workers=workers)
    if m.get("n_pairs", 0) < 2:
        _fail(f"fewer than 2 {split} pairs with images; ingest recipes first")
    typer.echo(f"encoder {enc.encoder_id} on {m['n_pairs']} {split} pairs (first image of a step, step text)")
    for k in (1, 10):
        typer.echo(f"  R@{k:<3d} image->text {m[f'i2t_r@{k}']:.3f}   text->image {m[f't2i_r@{k}']:.3f}"
                   f"   chance {m[f'chance_r@{k}']:.3f}"
                   f"   ({m[f'i2t_r@{k}'] / max(m[f'chance_r@{k}'], 1e-9):.0f}x / "
                   f"{m[f't2i_r@{k}'] / max(m[f'chance_r@{k}'], 1e-9):.0f}x chance)")
    typer.echo(f"  image->same-recipe R@1 {m['img_same_recipe_r@1']:.3f}   chance "
               f"{m['chance_same_recipe_r@1']:.3f}   (nearest other image is a step of the same recipe)")


@app.command("embed")
def embed_cmd(encoder: Optional[str] = typer.Option(None, "--encoder", help="encoder_id (default: the "
                                                     "latest; trains the default when none exists)."),
              k: int = typer.Option(100, "--k", help="Neighbours per image in the neighbours table."),
              workers: int = typer.Option(2, "--workers", help="Image decode workers (0 = in-process)."),
              decode: str = typer.Option("threads", "--decode", help="threads (the default: a decode "
                                         "pool in this process, no worker start-up or tensor copies; 1.5x "
                                         "the DataLoader here) | processes (DataLoader workers)."),
              batch_size: int = typer.Option(128, "--batch-size", help="Images per encoder batch."),
              method: str = typer.Option("auto", "--neighbours", help="auto | ann | exact."),
              no_train: bool = typer.Option(False, "--no-train", help="Fail instead of training an "
                                            "encoder when none is registered."),
              no_prefect: bool = typer.Option(False, "--no-prefect", help="Run without Prefect."),
              threads: Optional[int] = typer.Option(None, "--threads", help="torch CPU threads for the "
                                                    "encoder (default: torch's; 1 is faster on a loaded machine).")):
    """Embed new images and step texts into LanceDB and rebuild the neighbours table (incremental)."""
    from features.embed.encoders import EncoderUnavailable
    if method not in ("auto", "ann", "exact") or k < 1:
        _fail("--neighbours must be auto, ann or exact, and --k >= 1")
    if decode not in ("processes", "threads") or workers < 0:
        _fail("--decode must be processes or threads, and --workers >= 0")
    if threads is not None:
        if threads < 1:
            _fail("--threads must be >= 1")
        import torch
        torch.set_num_threads(threads)
    try:
        if no_prefect:
            from flows.embed import run_embed
            res = run_embed(encoder, not no_train, k, workers, batch_size, method, decode=decode)
        else:
            from flows.embed import embed_flow
            res = embed_flow(encoder, not no_train, k, workers, batch_size, method, decode=decode)
    except (EncoderUnavailable, LookupError) as e:
        _fail(str(e))
    _echo_json(res)


@bench_app.command("decode")
def bench_decode_cmd(n: int = typer.Option(4096, "--n", help="Images (warehouse images, else synthetic JPEGs)."),
                     image_size: int = typer.Option(224, "--image-size", help="Model input side (ViT-B-32: 224)."),
                     workers: int = typer.Option(2, "--workers", help="Decode threads / processes."),
                     batch_size: int = typer.Option(128, "--batch-size", help="Images per batch."),
                     synthetic: bool = typer.Option(False, "--synthetic", help="Always use synthetic JPEGs."),
                     synthetic_size: int = typer.Option(640, "--synthetic-size", help="Side of the synthetic "
                                                        "JPEGs (real instructables photos are ~600).")):
    """Decode-only images/s of the embed loaders: threads (default) vs DataLoader processes vs none."""
    from etl.config import Paths
    from etl.warehouse import connect
    from features.embed.bench import bench_decode
    if n < 1 or workers < 1 or batch_size < 1 or image_size < 8:
        _fail("--n, --workers and --batch-size must be >= 1 and --image-size >= 8")
    paths = Paths.from_env()
    con = connect(paths) if not synthetic and paths.warehouse.exists() else None
    with _bench_image_files(n, synthetic, synthetic_size, con, paths) as (files, source):
        res = bench_decode(files, image_size, batch_size, workers)
    if con is not None:
        con.close()
    _echo_json({**res, "source": source})


@contextmanager
def _bench_image_files(n: int, synthetic: bool, synthetic_size: int, con=None, paths=None):
    """(files, source) for the image benchmarks: up to `n` warehouse images, or `n` synthetic JPEGs in
    a temporary folder when `synthetic`, without a warehouse (`con` None) or with fewer than min(n, 256)."""
    import tempfile
    from features.embed.bench import synthetic_jpegs
    from features.embed.decode import image_items
    files = [] if synthetic or con is None else [it.path for it in image_items(con, paths)][:n]
    if len(files) >= min(n, 256):
        yield files, "warehouse"
        return
    if synthetic_size < 16:
        _fail("--synthetic-size must be >= 16")
    with tempfile.TemporaryDirectory() as tmp:
        yield synthetic_jpegs(Path(tmp), n, size=synthetic_size), f"synthetic {synthetic_size}px JPEGs"


@bench_app.command("embed")
def bench_embed_cmd(encoder: Optional[str] = typer.Option(None, "--encoder", help="Registered encoder_id "
                                                           "(default: the latest)."),
                    clip_model: Optional[str] = typer.Option(None, "--clip-model", help="Time this open_clip "
                                                             "architecture (random weights) instead."),
                    image_size: Optional[int] = typer.Option(None, "--image-size", help="With --clip-model."),
                    n: int = typer.Option(1024, "--n", help="Images (warehouse images, else synthetic JPEGs)."),
                    batch_size: int = typer.Option(128, "--batch-size", help="Images per batch."),
                    workers: int = typer.Option(2, "--workers", help="Decode workers vs 0 in the same run."),
                    synthetic: bool = typer.Option(False, "--synthetic", help="Always use synthetic JPEGs."),
                    synthetic_size: int = typer.Option(256, "--synthetic-size", help="Side of the synthetic "
                                                       "JPEGs in pixels (real instructables photos are ~600).")):
    """Embedding images/s: end to end (uint8 pixels normalised on the device vs float input; workers
    vs 0), model only, batched vs one image at a time."""
    from etl.config import Paths
    from etl.warehouse import connect
    from features.embed.bench import bench_embed
    from features.embed.encoders import (Encoder, EncoderUnavailable, build_model, embed_dim, load_encoder,
                                   pick_device)
    paths = Paths.from_env()
    con = connect(paths)
    try:
        if clip_model:
            dev = pick_device()
            model, pre, tok = build_model(clip_model, None, dev, image_size)
            enc = Encoder(f"{clip_model}-random", clip_model, model, pre, tok, dev, embed_dim(model))
        else:
            enc = load_encoder(con, encoder, paths=paths)
    except EncoderUnavailable as e:
        _fail(str(e))
    with _bench_image_files(n, synthetic, synthetic_size, con, paths) as (files, source):
        res = bench_embed(enc, files, batch_size, workers)
    res["source"] = source
    _echo_json(res)


def _bench_ann(n, dim, k, queries, encoder, seed):
    import numpy as np
    from features.vectors.bench import bench_ann, clustered_vectors
    from features.vectors.store import FeatureStore
    source = "synthetic clustered"
    if encoder or n is None:
        from etl.warehouse import connect
        from features.embed.encoders import latest_encoder_id
        enc = encoder or latest_encoder_id(connect())
        rows = FeatureStore().image_rows(enc) if enc else None
        if rows is not None and rows.num_rows >= 4096:
            d = rows.schema.field("vector").type.list_size
            vecs = rows["vector"].combine_chunks().flatten().to_numpy().reshape(-1, d)
            _, groups = np.unique(np.array(rows["recipe_id"].to_pylist(), dtype=object), return_inverse=True)
            return {"source": f"store ({enc})", **bench_ann(vecs, groups, k, queries, seed=seed)}
        if encoder:
            _fail(f"encoder {encoder} has fewer than 4096 image vectors; omit --encoder for synthetic data")
    n = n or 20000
    vecs = clustered_vectors(n, dim, seed)
    groups = np.arange(n) // 4            # 4 images per "recipe"
    return {"source": source, **bench_ann(vecs, groups, k, queries, seed=seed)}


@bench_app.command("ann")
def bench_ann_cmd(n: Optional[int] = typer.Option(None, "--n", help="Synthetic clustered vectors "
                                                  "(default: the store's vectors if >= 4096, else 20000)."),
                  dim: int = typer.Option(256, "--dim", help="Synthetic dimension."),
                  k: int = typer.Option(100, "--k", help="Neighbours per query."),
                  queries: int = typer.Option(1000, "--queries", help="Query sample size."),
                  encoder: Optional[str] = typer.Option(None, "--encoder", help="Use this encoder's vectors."),
                  seed: int = typer.Option(0, "--seed", help="Seed of data and query sample.")):
    """recall@K and q/s of LanceDB IVF_HNSW_SQ, IVF_PQ and IVF_FLAT (nprobes/refine sweep) vs exact search."""
    res = _bench_ann(n, dim, k, queries, encoder, seed)
    for c in res["configs"]:
        c["q_s_vs_exact_torch"] = round(c["q_s"] / res["exact_torch_q_s"], 3)
        c["q_s_vs_exact_numpy"] = round(c["q_s"] / res["exact_numpy_q_s"], 3)
    _echo_json(res)


@bench_app.command("knn")
def bench_knn_cmd(n: int = typer.Option(100000, "--n", help="Largest number of synthetic vectors."),
                  sizes: Optional[str] = typer.Option(None, "--sizes", help="Comma-separated sizes "
                                                      "(default 5000,10000,20000,50000 and --n)."),
                  dim: int = typer.Option(256, "--dim", help="Vector dimension."),
                  k: int = typer.Option(100, "--k", help="Neighbours per image."),
                  queries: int = typer.Option(2000, "--queries", help="Sampled queries for exact "
                                              "timing and recall (exact cost scales linearly)."),
                  data: str = typer.Option("recipes", "--data", help="recipes (kinds/recipes/splits) "
                                           "| clustered (isolated clusters of 50: worst case)."),
                  lance: bool = typer.Option(False, "--lance", help="Also time the LanceDB index "
                                             "route (default index build + batched queries) on train."),
                  seed: int = typer.Option(0, "--seed", help="Seed of data and query sample.")):
    """Neighbour-table build: IVF ANN build vs numpy and torch exact search, recall@K, crossover."""
    from features.vectors.bench import bench_knn
    try:
        size_list = ([int(x) for x in sizes.split(",") if x.strip()] if sizes
                     else [x for x in (5000, 10000, 20000, 50000) if x < n] + [n])
    except ValueError:
        _fail("--sizes must be comma-separated integers, e.g. 10000,20000,50000,100000")
    if not size_list or min(size_list) < 200 or k < 1 or dim < 2 or data not in ("recipes", "clustered"):
        _fail("need sizes >= 200, --k >= 1, --dim >= 2 and --data recipes|clustered")
    typer.echo(f"uptime load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    typer.echo(f"{data} vectors, d={dim}, K={k}, each split on its own, same-recipe pairs excluded; "
               f"exact: {queries} sampled queries x full split, scaled to all rows; ANN: full build")
    res = bench_knn(sorted(size_list), dim, k, queries, seed, lance=lance, data=data,
                    log=lambda row: typer.echo(_knn_row(row, k)))
    typer.echo(res["crossover_note"])
    typer.echo(f"uptime load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    _echo_json(res)


def _knn_row(r: dict, k: int) -> str:
    line = (f"n={r['n']:>7}  numpy exact {r['numpy_s']:>7.1f} s  torch exact {r['torch_s']:>7.1f} s  "
            f"ANN build {r['ann_s']:>6.1f} s (index {r['ann_index_s']:.1f} s, scanned "
            f"{100 * r['ann_scanned_share']:.1f}%)  recall@{k} {r[f'recall@{k}']:.4f}  "
            f"ANN vs numpy x{r['ann_vs_numpy']:.2f}  vs torch x{r['ann_vs_torch']:.2f}  "
            f"load {r['load_1min']:.1f}")
    if "lance_train_split" in r:
        line += f"\n         LanceDB index route (train split): {r['lance_train_split']}"
    return line


# ----------------------------------------------------------------------------- generation (issue 6)

@app.command("generate")
def generate_cmd(
        task: Optional[str] = typer.Option(None, "--task", help="visual_cloze | visual_coherence | "
                                           "visual_ordering | textual_cloze"),
        knobs: Optional[str] = typer.Option(None, "--knobs", help="K1,K2,K3 each 0 or 1, e.g. 0,1,0"),
        preset: Optional[str] = typer.Option(None, "--preset", help="recipeqa: the biased RecipeQA-style reference"),
        all_: bool = typer.Option(False, "--all", help="Every knob setting of every task, the knob-3 balanced variants and the presets."),
        seed: int = typer.Option(0, "--seed", help="Seed of every random decision."),
        encoder: Optional[str] = typer.Option(None, "--encoder", help="encoder_id (default: the latest)."),
        k3_mode: str = typer.Option("coin", "--k3-mode", help="When K3=1: coin (paper, p=0.5 per "
                                    "question) | all | balanced (closer-distractor count uniform 0..3)."),
        k: Optional[int] = typer.Option(None, "--k", help="Neighbours used for m_d/s_d and candidates (default 100)."),
        ratio: Optional[float] = typer.Option(None, "--questions-per-step", help="Knob 1: at most "
                                              "floor(#steps * ratio) questions per recipe."),
        extra_removal: Optional[bool] = typer.Option(None, "--extra-removal/--no-extra-removal",
                                                     help="Knob 1: also remove a random other step."),
        ball_lo: Optional[float] = typer.Option(None, "--ball-lo-sd", help="Knob 2: lower ball bound "
                                                "m_d + x*s_d (omit for distance 0)."),
        ball_hi: Optional[float] = typer.Option(None, "--ball-hi-sd", help="Knob 2: upper ball bound m_d + x*s_d."),
        n_constrained: Optional[int] = typer.Option(None, "--k3-constrained", help="Knob 3 (coin/all): "
                                                    "distractors closer to the question than the answer."),
        k3_prob: Optional[float] = typer.Option(None, "--k3-prob", help="Knob 3 coin probability (paper 0.5)."),
        weight_power: Optional[float] = typer.Option(None, "--ordering-weight-power", help="Ordering: "
                                                     "wrong orderings drawn with weight S**power.")):
    """Generate Meta-RecipeQA datasets and register them (re-running replaces a dataset)."""
    from features.datasets.knobs import TASKS
    from flows.generate import generate_flow
    overrides = {name: v for name, v in (("k", k), ("questions_per_step", ratio),
                                         ("extra_step_removal", extra_removal), ("ball_hi_sd", ball_hi),
                                         ("k3_n_constrained", n_constrained), ("k3_prob", k3_prob),
                                         ("ordering_weight_power", weight_power)) if v is not None}
    if ball_lo is not None:
        overrides["ball_lo_sd"] = ball_lo
    if all_:
        if task or knobs or preset or overrides:
            _fail("--all generates the paper settings; leave out --task/--knobs/--preset and parameters")
        kw = {"all": True}
    else:
        if task not in TASKS:
            _fail(f"--task must be one of {', '.join(TASKS)} (or use --all), got {task!r}")
        if preset and knobs:
            _fail("give either --knobs or --preset, not both")
        if preset:
            kw = {"all": False, "task_name": task, "preset": preset}
        else:
            try:
                kv = tuple(int(x) for x in (knobs or "").split(","))
                assert len(kv) == 3
            except (ValueError, AssertionError):
                _fail("--knobs must be K1,K2,K3 with each 0 or 1, e.g. --knobs 0,1,0")
            kw = {"all": False, "task_name": task, "knobs": kv, "k3_mode": k3_mode}
    from features.datasets.generate import settings_for
    try:
        settings_for(kw.get("task_name"), kw.get("knobs"), kw.get("preset"), kw.get("k3_mode", "coin"),
                     overrides or None, all_settings=kw["all"])
    except (ValueError, TypeError) as e:
        _fail(str(e))
    try:
        summary = generate_flow(seed=seed, encoder_id=encoder, overrides=overrides or None, **kw)
    except (ValueError, LookupError) as e:
        _fail(str(e))
    for s in summary["datasets"]:
        typer.echo(f"{s['dataset_id']:32s} {s['n_questions']:>7,d} questions {s['n_recipes']:>6,d} recipes "
                   f"{s['seconds']:6.2f}s  positions {s['answer_positions']}  "
                   f"distance-probe {s['distance_probe_accuracy']}  skipped {s['skips'] or '-'}")
    typer.echo(f"{summary['n_datasets']} dataset(s), {summary['n_questions']:,d} questions in "
               f"{summary['seconds']:.1f}s (RecipeQA: 7,986 visual cloze questions from 5,684 recipes; "
               "Meta-RecipeQA: 8K-22K per task; ours scale with the corpus)")


@app.command("datasets")
def datasets_cmd(fmt: str = typer.Option("table", "--format", help="table | json")):
    """List generated datasets with question/recipe counts and skips."""
    from etl.warehouse import connect
    con = connect()
    rows = con.execute("""SELECT dataset_id, task, coalesce(preset, concat(knob1, '-', knob2, '-', knob3)),
                          seed, encoder_id, n_questions, n_recipes,
                          json_extract(params, '$.skips'), content_sha256
                          FROM datasets ORDER BY task, dataset_id""").fetchall()
    if fmt == "json":
        _echo_json([dict(zip(["dataset_id", "task", "knobs", "seed", "encoder_id", "n_questions",
                              "n_recipes", "skips", "content_sha256"], r)) for r in rows])
        return
    if not rows:
        typer.echo("no datasets; run `mrqa generate --all`")
    for r in rows:
        typer.echo(f"{r[0]:36s} {r[1]:17s} {r[2]:10s} seed={r[3]} questions={r[5]:,d} recipes={r[6]:,d} "
                   f"skips={r[7]}")


@app.command("export")
def export_cmd(dataset: Optional[str] = typer.Option(None, "--dataset", help="dataset_id to export."),
               all_: bool = typer.Option(False, "--all", help="Export every dataset."),
               fmt: str = typer.Option("parquet", "--format", help="parquet | recipeqa-json"),
               out: Optional[Path] = typer.Option(None, "--out", help="Output directory "
                                                  "(default MRQA_HOME/exports/<dataset or all>)."),
               with_vectors: bool = typer.Option(False, "--with-vectors", help="Parquet: add the image "
                                                 "and title vectors of the exported splits."),
               images: bool = typer.Option(True, "--images/--no-images", help="recipeqa-json: copy "
                                           "the referenced images (RecipeQA layout).")):
    """Export datasets as hive-partitioned Parquet or RecipeQA JSON."""
    from etl.config import Paths
    from etl.warehouse import connect
    from features.datasets.export import export_parquet, export_recipeqa_json
    paths = Paths.from_env().ensure()
    con = connect(paths)
    known = [r[0] for r in con.execute("SELECT dataset_id FROM datasets ORDER BY 1").fetchall()]
    if all_ == bool(dataset):
        _fail("give exactly one of --dataset ID or --all")
    if dataset and dataset not in known:
        _fail(f"no dataset {dataset!r}; `mrqa datasets` lists them")
    ids = known if all_ else [dataset]
    if not ids:
        _fail("no datasets to export; run `mrqa generate --all` first")
    out = out or paths.exports / ("all" if all_ else dataset)
    if fmt == "parquet":
        res = export_parquet(con, ids, out, with_vectors=with_vectors, lance_uri=paths.lance)
    elif fmt == "recipeqa-json":
        res = export_recipeqa_json(con, ids, out, home=paths.home, with_images=images)
    else:
        _fail("--format must be parquet or recipeqa-json")
    _echo_json(res)


@bench_app.command("generate")
def bench_generate_cmd(recipes: int = typer.Option(2000, "--recipes", help="Synthetic recipes (20000 = target)."),
                       dim: int = typer.Option(128, "--dim", help="Vector dimension (default encoder: 128)."),
                       k: int = typer.Option(100, "--k", help="Neighbours per image."),
                       bench_home: Optional[Path] = typer.Option(None, "--bench-home", help="Where the "
                                                                 "synthetic world lives (default MRQA_HOME/bench/generate-N)."),
                       paper_only: bool = typer.Option(False, "--paper-only", help="Time the paper's 32 "
                                                       "settings only (no knob-3 balanced variants).")):
    """Time `generate --all` per dataset and in total on a synthetic world (neighbours built first,
    not timed), and vectorised distractor selection vs a per-question Python loop."""
    from etl.config import Paths
    from features.datasets.bench import bench_generate
    home = bench_home or Paths.from_env().home / "bench" / f"generate-{recipes}-d{dim}-k{k}"
    res = bench_generate(home, recipes, dim=dim, k=k, balanced=not paper_only)
    for s in res["datasets"]:
        typer.echo(f"{s['dataset_id']:32s} {s['n_questions']:>7,d} q {s['seconds']:7.2f}s")
    for line in res["lines"]:
        typer.echo(line)



# ----------------------------------------------------------------------------- report (issue 7)

@app.command("report")
def report_cmd(datasets: Optional[list[str]] = typer.Option(None, "--datasets", "--dataset",
                                                            help="dataset_id to report on (repeat, or "
                                                                 "comma-separated; default: every dataset)."),
               out: Optional[Path] = typer.Option(None, "--out", help="Output folder (default "
                                                  "MRQA_HOME/reports/latest; replaced on each run)."),
               seed: int = typer.Option(0, "--seed", help="Seed of the probe's classifier."),
               model: str = typer.Option("logreg", "--probe", help="Distance probe: logreg | svm.")):
    """Bias report: Hasty Student, distance probe and overlap per dataset, as HTML + PNG plots,
    DuckDB bias_metrics and Prefect artifacts; prints the settings ordered by probe accuracy."""
    from etl.config import Paths
    from etl.warehouse import connect
    from features.diagnostics.bias import list_datasets
    from features.diagnostics.report import check_out_dir
    from flows.report import report_flow
    if model not in ("logreg", "svm"):
        _fail("--probe must be logreg or svm")
    ids = [d for item in (datasets or []) for d in item.split(",") if d.strip()] or None
    paths = Paths.from_env().ensure()
    con = connect(paths)
    try:
        known = list_datasets(con, ids)
    except ValueError as e:
        _fail(str(e))
    finally:
        con.close()
    if not known:
        _fail("no datasets to report on; run `mrqa generate --all` first")
    try:
        check_out_dir(out or paths.reports / "latest")
        res = report_flow(datasets=ids, out=str(out) if out else None, seed=seed, model=model)
    except (ValueError, LookupError) as e:
        _fail(str(e))
    typer.echo(f"report written: {res['index']} ({res['n_datasets']} datasets, {len(res['images'])} plots)")


@bench_app.command("report")
def bench_report_cmd(questions: int = typer.Option(20000, "--questions", help="Synthetic cloze questions."),
                     repeats: int = typer.Option(3, "--repeats", help="Timing repeats (best kept).")):
    """Time the bias distances (vectorised numpy) against a per-question Python loop on random
    unit vectors, and the probe's 5-fold cross-validation."""
    from features.diagnostics.bias import bench_bias
    for line in bench_bias(questions, repeats):
        typer.echo(line)


# ----------------------------------------------------------------------------- training (issue 8)

def _training_export(dataset: str, export: Optional[Path]) -> Path:
    """The Parquet export holding `dataset`: --export, else MRQA_HOME/exports/all when it has it,
    else MRQA_HOME/exports/<dataset> (exported with vectors now if missing)."""
    from etl.config import Paths
    from training.data import list_datasets
    paths = Paths.from_env().ensure()
    if export is not None:
        if not (export / "questions").is_dir():
            _fail(f"{export} is not a Parquet export; run `mrqa export --all --with-vectors`")
        return export
    for cand in (paths.exports / "all", paths.exports / dataset):
        if (cand / "questions").is_dir() and any(d["dataset_id"] == dataset for d in list_datasets(cand)):
            return cand
    from etl.warehouse import connect
    from features.datasets.export import export_parquet
    con = connect(paths)
    try:
        if not con.execute("SELECT 1 FROM datasets WHERE dataset_id = ?", [dataset]).fetchall():
            _fail(f"no dataset {dataset!r} in the warehouse or exports; `mrqa datasets` lists them")
        export_parquet(con, [dataset], paths.exports / dataset, with_vectors=True, lance_uri=paths.lance)
    finally:
        con.close()
    return paths.exports / dataset


def _train_configs(scorer: str, text_features: str, tiny: bool, size: Optional[str] = None,
                   layers: Optional[int] = None, width: Optional[int] = None, **over):
    from dataclasses import replace as _replace
    from training.config import SCORERS, SIZES, configs_for
    if scorer not in SCORERS:
        _fail(f"scorer {scorer!r}: --scorer(s) must be one of {', '.join(SCORERS)}")
    if text_features not in ("tokens", "vectors"):
        _fail(f"--text-features must be tokens or vectors, got {text_features!r}")
    size = size or ("tiny" if tiny else "paper")
    if size not in SIZES:
        _fail(f"--size must be one of {', '.join(SIZES)}, got {size!r}")
    for flag, v in (("--layers", layers), ("--width", width)):
        if v is not None and v < 1:
            _fail(f"{flag} must be >= 1, got {v}")
    if over.get("lr") is not None and not over["lr"] > 0:
        _fail(f"--lr must be > 0, got {over['lr']}")
    model_kw = {k: v for k, v in (("n_layers", layers), ("d_model", width)) if v is not None}
    try:
        mc, tc = configs_for(size, scorer=scorer, text_features=text_features, **model_kw)
        mc.validate()
    except ValueError as e:                       # e.g. a width that is not a multiple of the heads
        _fail(f"{e} (--width must be a multiple of the size's heads)")
    return mc, _replace(tc, **{k: v for k, v in over.items() if v is not None})


_LAYERS_HELP = "Transformer scorer layers (default: the size's; paper 4)."
_WIDTH_HELP = "Transformer scorer width d_model (default: the size's; paper 512)."
_LR_HELP = "Adam learning rate (default 5e-4, the paper's)."


@app.command("train")
def train_cmd(dataset: str = typer.Option(..., "--dataset", help="dataset_id (see `mrqa datasets`)."),
              scorer: str = typer.Option("transformer", "--scorer", help="transformer (HTRN) | bidaf | "
                                         "impatient | hasty (context-free)."),
              text_features: str = typer.Option("tokens", "--text-features", help="tokens (learned "
                                                "embeddings + BiLSTM) | vectors (precomputed step-text vectors)."),
              tiny: bool = typer.Option(False, "--tiny", help="Tiny model + short training (CPU demo)."),
              size: Optional[str] = typer.Option(None, "--size", help="paper (appendix defaults, the default) "
                                                 "| small (CPU sweeps) | tiny (same as --tiny)."),
              export: Optional[Path] = typer.Option(None, "--export", help="Parquet export directory "
                                                    "(default MRQA_HOME/exports/all or exported now)."),
              max_epochs: Optional[int] = typer.Option(None, "--max-epochs", help="Epoch cap (default 30, tiny 3)."),
              patience: Optional[int] = typer.Option(None, "--patience", help="Early stopping patience in epochs."),
              batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Questions per (global) batch."),
              seed: Optional[int] = typer.Option(None, "--seed", help="Seed (weights, shuffling)."),
              threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads for torch (per process)."),
              layers: Optional[int] = typer.Option(None, "--layers", help=_LAYERS_HELP),
              width: Optional[int] = typer.Option(None, "--width", help=_WIDTH_HELP),
              lr: Optional[float] = typer.Option(None, "--lr", help=_LR_HELP),
              device: Optional[str] = typer.Option(None, "--device", help="auto (CUDA + AMP when present) | cpu | cuda."),
              nproc: int = typer.Option(1, "--nproc", help="Processes: > 1 runs torchrun DDP on this machine "
                                        "(gloo on CPU, NCCL with one GPU per process).")):
    """Train GM3C on a dataset (early stopping on val accuracy), test it, record the run."""
    from training.data import DatasetError
    from training.train import train_run
    mc, tc = _train_configs(scorer, text_features, tiny, size, layers, width, max_epochs=max_epochs,
                            patience=patience, batch_size=batch_size, seed=seed, threads=threads, device=device,
                            lr=lr)
    exp = _training_export(dataset, export)
    if nproc < 1:
        _fail("--nproc must be >= 1")
    try:
        if nproc > 1:
            from training.ddp import launch
            argv = ["--export", str(exp), "--dataset", dataset, "--scorer", scorer, "--text-features", text_features,
                    "--size", size or ("tiny" if tiny else "paper")]
            for flag, v in (("--max-epochs", max_epochs), ("--patience", patience), ("--batch-size", batch_size),
                            ("--seed", seed), ("--threads", threads), ("--device", device),
                            ("--layers", layers), ("--width", width), ("--lr", lr)):
                argv += [flag, str(v)] if v is not None else []
            m = launch(nproc, argv)
        else:
            m = train_run(exp, dataset, mc, tc)
    except (DatasetError, ValueError, RuntimeError) as e:
        _fail(str(e))
    _echo_json({k: v for k, v in m.items() if k not in ("history", "model_args", "train_config")})


@app.command("evaluate")
def evaluate_cmd(run: str = typer.Option(..., "--run", help="run_id, run directory or ckpt.pt."),
                 dataset: str = typer.Option(..., "--dataset", help="dataset_id to score."),
                 export: Optional[Path] = typer.Option(None, "--export", help="Parquet export directory."),
                 split: str = typer.Option("test", "--split", help="train | val | test."),
                 cross_dataset: bool = typer.Option(False, "--cross-dataset", help="Allow another dataset "
                                                    "of the same task and encoder than the run's."),
                 predictions: Optional[Path] = typer.Option(None, "--predictions", help="Write RecipeQA-style "
                                                            "predictions {task: [index, ...]} (qid order) here.")):
    """Score a trained run on a dataset; checks encoder, task and dataset hash first."""
    from training.data import DatasetError
    from training.train import CheckpointError, evaluate_run
    exp = _training_export(dataset, export)
    try:
        res = evaluate_run(run, exp, dataset, split=split, cross_dataset=cross_dataset)
    except (CheckpointError, DatasetError, ValueError) as e:
        _fail(str(e))
    if predictions:
        predictions.parent.mkdir(parents=True, exist_ok=True)
        predictions.write_text(json.dumps({res["task"]: res["predictions"]}))
    _echo_json({k: v for k, v in res.items() if k not in ("predictions", "qids")})


@app.command("baselines")
def baselines_cmd(dataset: str = typer.Option(..., "--dataset", help="dataset_id to score."),
                  export: Optional[Path] = typer.Option(None, "--export", help="Parquet export directory."),
                  split: str = typer.Option("test", "--split", help="train | val | test.")):
    """Model-free references on a dataset: Hasty Student (reads only the question) and, for visual
    cloze, the step-text match (reads the recipe: the choice image closest to its step texts), also
    with another recipe's steps; next to a run's `context_ablation` they tell what the recipe is worth."""
    from etl.config import Paths
    from training.data import DatasetError, foreign_context_rows, load_qa_dataset
    from training.hasty import hasty_student_accuracy, step_text_match_accuracy
    exp = _training_export(dataset, export)
    try:
        ds = load_qa_dataset(exp, dataset, "vectors", lance_uri=Paths.from_env().lance)
    except (DatasetError, ValueError) as e:
        _fail(str(e))
    if split not in ds.splits:
        _fail(f"{dataset} has no {split} questions (has {', '.join(sorted(ds.splits))})")
    sp = ds.splits[split]
    res = {"dataset_id": dataset, "task": ds.task, "split": split, "n": len(sp),
           "chance": round(1 / sp.query.shape[1], 4),
           "hasty_student": round(hasty_student_accuracy(ds, split)[0], 4)}
    if ds.task == "visual_cloze":
        match = step_text_match_accuracy(ds, split)
        res["step_text_match"] = {k: round(v, 4) if isinstance(v, float) else v for k, v in match.items()}
        foreign = step_text_match_accuracy(ds, split, foreign_context_rows(sp.recipe_row)[0])
        res["step_text_match_foreign_recipe"] = round(foreign["any_step"], 4)
    _echo_json(res)


@app.command("sweep")
def sweep_cmd(scorers: str = typer.Option("transformer,bidaf,impatient", "--scorers", help="Comma list of scorers."),
              tasks: str = typer.Option("visual_cloze,visual_coherence,visual_ordering", "--tasks",
                                        help="Comma list of tasks."),
              knobs: Optional[str] = typer.Option(None, "--knobs", help="Comma list of knob labels "
                                                  "(e.g. recipeqa,0-1-0); default all."),
              text_features: str = typer.Option("tokens", "--text-features", help="tokens | vectors."),
              tiny: bool = typer.Option(False, "--tiny", help="Tiny models + short training."),
              size: Optional[str] = typer.Option(None, "--size", help="paper (default) | small (CPU sweeps) | tiny."),
              max_epochs: Optional[int] = typer.Option(None, "--max-epochs", help="Epoch cap per run."),
              patience: Optional[int] = typer.Option(None, "--patience", help="Early stopping patience."),
              max_train: Optional[int] = typer.Option(None, "--max-train-questions", help="Cap train questions per run."),
              seed: Optional[int] = typer.Option(None, "--seed", help="Seed of every run."),
              threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads for torch."),
              layers: Optional[int] = typer.Option(None, "--layers", help=_LAYERS_HELP),
              width: Optional[int] = typer.Option(None, "--width", help=_WIDTH_HELP),
              lr: Optional[float] = typer.Option(None, "--lr", help=_LR_HELP),
              export: Optional[Path] = typer.Option(None, "--export", help="Parquet export (default MRQA_HOME/exports/all)."),
              out: Optional[Path] = typer.Option(None, "--out", help="Report directory (default MRQA_HOME/reports/sweep).")):
    """Train scorers x knob settings x tasks; write accuracy.parquet, accuracy.md and accuracy.png."""
    from etl.config import Paths
    from training.sweep import sweep
    paths = Paths.from_env().ensure()
    exp = export or paths.exports / "all"
    if not (exp / "questions").is_dir():
        _fail(f"no Parquet export at {exp}; run `mrqa export --all --with-vectors` first")
    sc = [s.strip() for s in scorers.split(",") if s.strip()]
    mc, tc = _train_configs(sc[0] if sc else "", text_features, tiny, size, layers, width, max_epochs=max_epochs,
                            patience=patience, max_train_questions=max_train, threads=threads, seed=seed, lr=lr)
    for s in sc:
        _train_configs(s, text_features, tiny, size)
    try:
        res = sweep(exp, out or paths.reports / "sweep", sc, [t.strip() for t in tasks.split(",")],
                    [k.strip() for k in knobs.split(",")] if knobs else None, mc, tc, text_features)
    except ValueError as e:
        _fail(str(e))
    typer.echo(Path(res["out"], "accuracy.md").read_text())
    typer.echo(f"wrote {res['out']}/accuracy.parquet, accuracy.md, accuracy.png")


@bench_app.command("train")
def bench_train_cmd(dataset: str = typer.Option(..., "--dataset", help="dataset_id to time on."),
                    scorer: str = typer.Option("transformer", "--scorer", help="Scorer to time."),
                    tiny: bool = typer.Option(False, "--tiny", help="Tiny model."),
                    size: Optional[str] = typer.Option(None, "--size", help="paper (default) | small | tiny."),
                    examples: int = typer.Option(256, "--examples", help="Train questions timed."),
                    threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads for torch."),
                    export: Optional[Path] = typer.Option(None, "--export", help="Parquet export directory.")):
    """Training examples/s: batch 32 vs batch 1 (and AMP vs no AMP on CUDA)."""
    from etl.config import Paths
    from training.bench import bench_train
    from training.data import load_qa_dataset
    mc, tc = _train_configs(scorer, "tokens", tiny, size, threads=threads)
    exp = _training_export(dataset, export)
    ds = load_qa_dataset(exp, dataset, "tokens", max_steps=tc.max_steps_per_recipe,
                         max_tokens=tc.max_tokens_per_step, min_token_freq=tc.min_token_freq,
                         lance_uri=Paths.from_env().lance)
    for line in bench_train(ds, mc, tc, examples):
        typer.echo(line)


# ----------------------------------------------------------------------------- orchestration (issue 9)

def _demo_default_recipes() -> int:
    from etl.config import DEMO_RECIPES
    return DEMO_RECIPES


@app.command("demo")
def demo_cmd(recipes: int = typer.Option(_demo_default_recipes(), "--recipes", min=5,
                                         help="Sample kitchen size (the default fits `make demo` "
                                              "in 15 minutes on 2 CPU cores)."),
             seed: int = typer.Option(0, "--seed", help="Seed of the sample kitchen and datasets."),
             workers: Optional[int] = typer.Option(None, "--workers", help="Build processes "
                                                   "(default: all cores)."),
             train: bool = typer.Option(True, "--train/--no-train", help="End with a short tiny-model "
                                        "training run next to Hasty Student."),
             dask_address: Optional[str] = typer.Option(None, "--dask-address", help="Dask scheduler "
                                                        "for the fan-out stages (tcp://HOST:8786)."),
             summary_json: Optional[Path] = typer.Option(None, "--summary-json",
                                                         help="Also write the full summary here.")):
    """Run the pipeline flow on the embedded sample kitchen and print a summary of every stage."""
    from flows.demo import demo_flow
    from flows.demo import format_digest
    summary = demo_flow(recipes=recipes, seed=seed, workers=workers, train=train, dask_address=dask_address)
    typer.echo(format_digest(summary["digest"]))
    if summary_json:
        summary_json.write_text(json.dumps(summary, indent=2, default=str))
    if summary.get("failed"):
        raise typer.Exit(1)


@app.command("pipeline")
def pipeline_cmd(
        listing: Optional[str] = typer.Option(None, "--listing", help="Listing page URL to crawl."),
        sitemap: Optional[str] = typer.Option(None, "--sitemap", help="Sitemap URL to crawl."),
        urls: Optional[Path] = typer.Option(None, "--urls", help="File with one recipe URL per line."),
        rescrape: bool = typer.Option(False, "--rescrape", help="Re-scrape stale, missing or partial recipes."),
        stale_days: Optional[float] = typer.Option(None, "--stale-days", help="With --rescrape: pages older "
                                                   "than this are revalidated."),
        sample: Optional[int] = typer.Option(None, "--sample", min=5, help="Build, serve and crawl a sample "
                                             "kitchen of N recipes instead of a site."),
        allow_host: list[str] = typer.Option([], "--allow-host", help="Host the crawler may fetch (repeat)."),
        allow_private: bool = typer.Option(False, "--allow-private", help="Allow loopback/private hosts."),
        delay: float = typer.Option(1.0, "--delay", help="Seconds between requests to one host."),
        seed: int = typer.Option(0, "--seed", help="Seed of the datasets (and the sample kitchen)."),
        train: bool = typer.Option(False, "--train", help="End with a short tiny-model training run."),
        sweep: bool = typer.Option(False, "--sweep", help="End with a tiny training sweep."),
        force: list[str] = typer.Option([], "--force", help="Stage to run even if unchanged (repeat; "
                                        "'all' for every stage)."),
        dask_address: Optional[str] = typer.Option(None, "--dask-address", help="Dask scheduler for "
                                                   "the fan-out stages."),
        summary_json: Optional[Path] = typer.Option(None, "--summary-json", help="Also write the summary here.")):
    """ingest -> clean -> embed -> generate -> report (-> train, sweep); unchanged stages are skipped.

    With no source (--listing/--sitemap/--urls/--rescrape/--sample) it starts at clean on the
    existing warehouse."""
    from flows.pipeline import STAGES, pipeline_flow
    bad = [f for f in force if f != "all" and f not in STAGES]
    if bad:
        _fail(f"unknown stage(s) in --force: {bad}; stages are {', '.join(STAGES)} or 'all'")
    if urls is not None and not urls.is_file():
        _fail(f"--urls {urls}: no such file")
    summary = pipeline_flow(listing=listing, sitemap=sitemap, urls_file=str(urls) if urls else None,
                            rescrape=rescrape, stale_days=stale_days, sample_recipes=sample, sample_seed=seed,
                            allow_hosts=allow_host, allow_private=allow_private, delay_s=delay, seed=seed,
                            train=train, sweep=sweep, force=force, dask_address=dask_address,
                            raise_on_failure=False)
    if summary_json:
        summary_json.write_text(json.dumps(summary, indent=2, default=str))
    _echo_json({"stages": [{k: r.get(k) for k in ("stage", "status", "seconds", "reason", "error")
                            if r.get(k) is not None} for r in summary["stages"]],
                "failed": summary.get("failed")})
    if summary.get("failed"):
        raise typer.Exit(1)


@app.command("deploy")
def deploy_cmd(pool: str = typer.Option("mrqa-process", "--pool", help="Process work pool (created if missing)."),
               name: Optional[list[str]] = typer.Option(None, "--name", help="Only this deployment (repeat).")):
    """Register the scheduled and on-demand deployments against PREFECT_API_URL.

    Their flow runs use this command's MRQA_HOME (`mrqa --home DIR deploy`). Then run a worker:
    `prefect worker start --pool POOL`."""
    from flows.deploy import register_deployments
    try:
        rows = register_deployments(pool, names=name)
    except (RuntimeError, ValueError) as e:
        _fail(str(e))
    for r in rows:
        typer.echo(f"{r['deployment']:<40} cron={r['cron'] or '-':<12} pool={r['pool']} ({r['entrypoint']})")
    typer.echo(f"next: prefect worker start --pool {pool}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
