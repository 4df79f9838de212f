"""`mrqa bench parse`, `bench sample`, `bench crawl`, `bench import`, `bench clean`, `bench roles`: figures of the
corpus stages."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer

from flows.cli.common import echo_json, fail

app = typer.Typer()


@app.command("parse")
def bench_parse_cmd(pages: list[Path] = typer.Argument(None, help="HTML files or directories "
                                                        "(default: the shared fixture page)."),
                    seconds: float = typer.Option(2.0, "--seconds", help="Timing per backend (> 0).")):
    """Parse throughput (pages/s) with bs4's lxml backend (default) vs html.parser, in one run."""
    if not (seconds > 0 and math.isfinite(seconds)):
        fail(f"--seconds must be > 0 and finite, got {seconds}")
    from etl.config import REPO_ROOT
    from etl.parse import DEFAULT_BACKEND, ParseError, bench_parse
    files: list[Path] = []
    for p in pages or [REPO_ROOT.parent / "shared" / "fixtures" / "instructables"]:
        files += sorted(p.rglob("*.html")) if p.is_dir() else [p]
    files = [f for f in files if f.is_file()]
    if not files:
        fail("no HTML pages found; pass page files or directories")
    try:
        rates = bench_parse([(f.read_bytes(), None) for f in files], min_seconds=seconds)
    except ParseError as e:
        fail(f"a benchmark page is not a recipe page: {e}")
    other = [b for b in rates if b != DEFAULT_BACKEND][0]
    typer.echo(f"parse: {rates[DEFAULT_BACKEND]:,.1f} pages/s ({DEFAULT_BACKEND}, default) vs "
               f"{rates[other]:,.1f} pages/s ({other}): ratio {rates[DEFAULT_BACKEND] / rates[other]:.2f}x "
               f"over {len(files)} page(s)")


@app.command("sample")
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
        fail("the builds differ between worker counts (determinism bug)", code=1)


@app.command("crawl")
def bench_crawl_cmd(
        recipes: int = typer.Option(300, "--recipes", "-n", min=5, help="Recipes in the sample kitchen crawled."),
        repeats: int = typer.Option(2, "--repeats", min=1, help="Crawls each way (alternating order)."),
        workers: int = typer.Option(8, "--workers", "-w", min=1, help="Crawler download threads per process "
                                    "(the demo's 8)."),
        processes: int = typer.Option(2, "--processes", min=2, help="Crawl processes against one."),
        server: bool = typer.Option(False, "--server", help="Compare instead the server in the crawler's "
                                    "process against one of its own (one crawl process)."),
        seed: int = typer.Option(0, "--seed", help="Seed of the sample.")):
    """Crawl a sample kitchen with one crawl process vs --processes (the server in a process of its own, as
    the pipeline has it), or with --server the server's two placements; prints each crawl's seconds, the
    medians, the ratio and whether every crawl loaded the same rows."""
    from flows.ingest import bench_crawl
    r = bench_crawl(recipes, seed, repeats, workers, compare="server" if server else "processes", processes=processes)
    labels = ({"thread": "server in the crawler's process", "process": "server in its own process"} if server
              else {w: f"crawl in {w}" for w in r["ways"]})
    for way in r["ways"]:
        typer.echo(f"{labels[way]}: {', '.join(f'{s:.1f}' for s in r['runs'][way])} s "
                   f"(median {r['median_s'][way]:.1f} s)")
    what = "own process" if server else f"{processes} processes"
    typer.echo(f"{recipes} recipes: {what} {r['speedup']:.2f}x faster; the same rows loaded: {r['same_rows']}")
    if not r["same_rows"]:
        fail("the crawls loaded different rows (a crawl determinism bug)", code=1)


@app.command("import")
def bench_import_cmd(
        file: Optional[Path] = typer.Option(None, "--file", help="RecipeQA JSON to synthesise records "
                                            "from (default: visual cloze records of the embedded sample kitchen)."),
        n: int = typer.Option(20000, "--records", min=1, help="Number of synthetic records to load."),
        n_baseline: int = typer.Option(1000, "--baseline-records", min=1,
                                       help="Records loaded with the (slow) executemany baseline.")):
    """RecipeQA import throughput (records/s): Arrow bulk insert vs executemany, in one run."""
    from etl.recipeqa import RecipeQAFormatError, bench_import, read_recipeqa, sample_kitchen_records
    try:
        records = read_recipeqa([file]) if file else sample_kitchen_records()
    except RecipeQAFormatError as e:
        fail(str(e))
    r = bench_import(records, n, n_baseline)
    typer.echo(f"import: {r['arrow_records_per_s']:,.0f} records/s (arrow, {r['records']} records, "
               f"{r['recipes']} recipes) vs {r['executemany_records_per_s']:,.0f} records/s "
               f"(executemany, {r['executemany_records']} records): ratio {r['ratio_arrow_vs_executemany']}x")
    echo_json(r)


@app.command("clean")
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
        fail("--recipes must be >= 10 and --workers >= 1")
    echo_json(bench_clean(recipes, seed, workers, baseline_chars, quality=not no_quality))


@app.command("roles")
def bench_roles_cmd(
        file: Optional[Path] = typer.Option(None, "--file", help="RecipeQA JSON whose step bodies are read "
                                            "(each step once; default: the embedded sample kitchen's planned steps)."),
        recipes: int = typer.Option(300, "--recipes", "-n", min=1, help="Sample kitchen recipes (without --file)."),
        repeats: int = typer.Option(3, "--repeats", min=1, help="Runs per path, alternating; the best is kept."),
        seed: int = typer.Option(0, "--seed", help="Sample kitchen seed (without --file).")):
    """Role extraction (the competence stage's reader) steps/s: its fast tokens and tags vs NLTK as shipped,
    in one run, and whether both give the same roles."""
    from etl.roles.evaluate import bench_extract
    if file:
        from etl.recipeqa import RecipeQAFormatError, read_recipeqa
        try:
            steps = {(r.raw["recipe_id"], st.get("id")): st.get("body") or ""
                     for r in read_recipeqa([file]) for st in r.raw.get("context", [])}
        except RecipeQAFormatError as e:
            fail(str(e))
        bodies = list(steps.values())
    else:
        from etl.sample.generate import ground_truth, plan_all
        bodies = [s["body_clean"] for p in plan_all(recipes, seed) for s in ground_truth(p)["steps"]]
    if not bodies:
        fail("no step bodies to read")
    r = bench_extract(bodies, repeats)
    typer.echo(f"roles: {r['fast']['steps_per_s']:,.0f} steps/s ({r['fast']['chars_per_s']:,} chars/s, fast tokens "
               f"and tags) vs {r['stock']['steps_per_s']:,.0f} steps/s (NLTK as shipped): {r['speedup']:.2f}x over "
               f"{r['steps']:,} steps; the same roles: {r['same_roles']}")
    if not r["same_roles"]:
        fail("the fast path's roles differ from stock NLTK's (a tokenizer twin bug)", code=1)
