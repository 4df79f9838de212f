"""`mrqa demo`, `pipeline`, `deploy`: run every stage in order, or register the Prefect deployments.
These stay Prefect flow runs whatever `--prefect` says (a temporary server without PREFECT_API_URL)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from etl.config import DEMO_RECIPES
from flows.cli.choices import AdversarySize, ForceStage, ReadingFolds, SplitBy
from flows.cli.common import echo_json, fail, prefect_server_early, wait_option

app = typer.Typer()


@app.command("demo")
def demo_cmd(recipes: int = typer.Option(DEMO_RECIPES, "--recipes", min=5,
                                         help="Sample kitchen size (the default fits `make demo` "
                                              "in 15 minutes on 2 CPU cores)."),
             seed: int = typer.Option(0, "--seed", help="Seed of the sample kitchen and datasets."),
             workers: Optional[int] = typer.Option(None, "--workers", min=1, help="Build processes "
                                                   "(default: all cores)."),
             train: bool = typer.Option(True, "--train/--no-train", help="End with the train stage: an "
                                        "independent GM3C question-only check of the AF datasets waiting for one "
                                        "and the reading check (a reader against a learned question-only model)."),
             af_pool: bool = typer.Option(False, "--af-pool/--no-af-pool", help="Generate ends with the pooled "
                                          "adversary on the AF visual cloze datasets too (`mrqa af-pool`, 1 swap "
                                          "round, tau 0.35, kept share >= 0.4), which are generated leaving "
                                          "AF's own drop to it: about 4 more minutes. Off by default: the look "
                                          "probe reads the sample kitchen's visual datasets from their pixels "
                                          "either way."),
             matched_coherence: bool = typer.Option(False, "--matched-coherence", help="Generate also makes "
                                                    "visual coherence with matched foreign images (K1-0-0-matched"
                                                    "[-af], beyond the paper) and filters it with its own pooled "
                                                    "step: about 3 more minutes."),
             author_coherence: bool = typer.Option(False, "--author-coherence", help="Generate also makes visual "
                                                   "coherence with the foreign photo from another recipe of the "
                                                   "question's author (K1-0-0-author[-af]) and its pooled step; "
                                                   "best with --split-by author."),
             redrawn: bool = typer.Option(False, "--redrawn", help="Generate also draws the AF visual cloze "
                                          "settings 0-1-0, 0-1-1, 1-1-0, 1-1-1 (and the balanced) again in each "
                                          "question's kitchen (`mrqa redraw`, K1-K2-K3-redrawn-af) and filters them "
                                          "with their own pooled step; then 0-0-0, 1-0-0, 0-0-1 and 1-0-1 from "
                                          "sources made by AF's items twin rule, 100 of the answer's neighbours "
                                          "as candidates, with a pooled step of their own; the train "
                                          "stage's checks read them."),
             adversary_size: AdversarySize = typer.Option(AdversarySize.small, "--adversary-size", help="paper: "
                                                          "the pooled steps of --author-coherence and --redrawn "
                                                          "aim at the paper-size GM3C question-only model, and "
                                                          "the train stage checks at that size; far slower on "
                                                          "CPU, meant for a GPU host."),
             textual_cloze_pooled: bool = typer.Option(True, "--textual-cloze-pooled/--no-textual-cloze-pooled",
                                                       help="Generate ends with the pooled step on the textual "
                                                       "cloze AF datasets (2 swap rounds of titles, then the "
                                                       "drop): the sample kitchen's reading benchmark; about 4 "
                                                       "minutes with its checks in the train stage."),
             split_by: Optional[SplitBy] = typer.Option(None, "--split-by", help="Draw the splits per recipe "
                                                        "or per author (every recipe of an author in one split); "
                                                        "default: as the warehouse has it (recipe when new)."),
             dask_address: Optional[str] = typer.Option(None, "--dask-address", help="Dask scheduler "
                                                        "for the fan-out stages (tcp://HOST:8786)."),
             summary_json: Optional[Path] = typer.Option(None, "--summary-json",
                                                         help="Also write the full summary here."),
             wait: float = wait_option()):
    """Run the pipeline flow on the embedded sample kitchen and print a summary of every stage."""
    server_up = prefect_server_early()
    from flows.demo import demo_flow, format_digest
    server_up()
    summary = demo_flow(recipes=recipes, seed=seed, workers=workers, train=train, af_pool=af_pool,
                        dask_address=dask_address, matched_coherence=matched_coherence,
                        textual_cloze_pooled=textual_cloze_pooled, redrawn=redrawn,
                        split_by=split_by.value if split_by else None, author_coherence=author_coherence,
                        adversary_size=adversary_size.value)
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
        stale_days: Optional[float] = typer.Option(None, "--stale-days", min=0.0, help="With --rescrape: pages older "
                                                   "than this are revalidated."),
        sample: Optional[int] = typer.Option(None, "--sample", min=5, help="Build, serve and crawl a sample "
                                             "kitchen of N recipes instead of a site."),
        allow_host: list[str] = typer.Option([], "--allow-host", help="Host the crawler may fetch (repeat)."),
        allow_private: bool = typer.Option(False, "--allow-private", help="Allow loopback/private hosts."),
        delay: float = typer.Option(1.0, "--delay", min=0.0, help="Seconds between requests to one host."),
        seed: int = typer.Option(0, "--seed", help="Seed of the datasets (and the sample kitchen)."),
        af_pool: bool = typer.Option(True, "--af-pool/--no-af-pool", help="Generate ends with the pooled adversary "
                                     "on the AF visual cloze datasets (`mrqa af-pool`)."),
        matched_coherence: bool = typer.Option(False, "--matched-coherence", help="Generate also makes visual "
                                               "coherence with matched foreign images and their pooled step."),
        author_coherence: bool = typer.Option(False, "--author-coherence", help="Generate also makes visual "
                                              "coherence with the foreign photo from the author's other recipes "
                                              "and its pooled step."),
        redrawn: bool = typer.Option(False, "--redrawn", help="Generate also draws AF visual cloze settings "
                                     "again in each question's kitchen (a sample kitchen home) and their pooled "
                                     "steps (the knob 2 = 0 ones from sources made by AF's items twin rule)."),
        adversary_size: AdversarySize = typer.Option(AdversarySize.small, "--adversary-size", help="paper: the "
                                                     "pooled steps of --author-coherence and --redrawn aim at the "
                                                     "paper-size GM3C question-only model, and the train stage "
                                                     "checks at that size (a GPU host)."),
        textual_cloze_pooled: bool = typer.Option(True, "--textual-cloze-pooled/--no-textual-cloze-pooled",
                                                  help="Generate ends with the pooled step on the textual cloze "
                                                  "AF datasets too (the reading benchmark `make demo` makes)."),
        train: bool = typer.Option(False, "--train", help="End with the independent GM3C question-only check "
                                   "of the AF datasets waiting for one, then the reading check: a reader of the "
                                   "recipe against a learned question-only model on the AF visual cloze "
                                   "settings and the datasets the reading-only export holds back for it."),
        reading_folds: ReadingFolds = typer.Option(ReadingFolds.test, "--reading-folds", help="With --train: the "
                                                   "reading check scores the test split, or (split) every split "
                                                   "held out in turn, for a home of a few hundred recipes."),
        split_by: Optional[SplitBy] = typer.Option(None, "--split-by", help="The ingest stage draws splits per "
                                                   "recipe or per author; default: as the warehouse has it."),
        sweep: bool = typer.Option(False, "--sweep", help="End with a tiny training sweep."),
        force: list[ForceStage] = typer.Option([], "--force", help="Stage to run even if unchanged (repeat; "
                                        "'all' for every stage)."),
        dask_address: Optional[str] = typer.Option(None, "--dask-address", help="Dask scheduler for "
                                                   "the fan-out stages."),
        summary_json: Optional[Path] = typer.Option(None, "--summary-json", help="Also write the summary here."),
        wait: float = wait_option()):
    """ingest -> clean -> embed -> generate (then the pooled adversary) -> competence -> report (-> train,
    sweep); unchanged stages are skipped.

    With no source (--listing/--sitemap/--urls/--rescrape/--sample) it starts at clean on the
    existing warehouse."""
    if urls is not None and not urls.is_file():
        fail(f"--urls {urls}: no such file")
    if split_by is not None and not (listing or sitemap or urls or rescrape or sample):
        fail("--split-by is applied by the ingest stage, which runs with a source only: give --sample, "
             "--listing, --sitemap, --urls or --rescrape, or choose the splits with `mrqa splits --by`")
    server_up = prefect_server_early()
    from flows.pipeline import pipeline_flow
    server_up()
    summary = pipeline_flow(listing=listing, sitemap=sitemap, urls_file=str(urls) if urls else None,
                            rescrape=rescrape, stale_days=stale_days, sample_recipes=sample, sample_seed=seed,
                            allow_hosts=allow_host, allow_private=allow_private, delay_s=delay, seed=seed,
                            af_pool=af_pool, matched_coherence=matched_coherence, redrawn=redrawn,
                            author_coherence=author_coherence, adversary_size=adversary_size.value,
                            textual_cloze_pooled=textual_cloze_pooled, train=train,
                            split_by=split_by.value if split_by else None,
                            train_reading=train, reading_folds=reading_folds.value, sweep=sweep,
                            force=[f.value for f in force],
                            dask_address=dask_address, raise_on_failure=False)
    if summary_json:
        summary_json.write_text(json.dumps(summary, indent=2, default=str))
    echo_json({"stages": [{k: r.get(k) for k in ("stage", "status", "seconds", "reason", "error")
                            if r.get(k) is not None} for r in summary["stages"]],
                "failed": summary.get("failed")})
    if summary.get("failed"):
        raise typer.Exit(1)


@app.command("deploy")
def deploy_cmd(pool: str = typer.Option("mrqa-process", "--pool", help="Process work pool (created if missing)."),
               name: Optional[list[str]] = typer.Option(None, "--name", help="Only this deployment (repeat)."),
               write_yaml: bool = typer.Option(False, "--write-yaml", help="Only regenerate prefect.yaml "
                                               "from flows/deploy.py's DEPLOYMENTS (no server needed).")):
    """Register the scheduled and on-demand deployments against PREFECT_API_URL.

    Their flow runs use this command's MRQA_HOME (`mrqa --home DIR deploy`). Each allows one run at
    a time (concurrency limit 1, ENQUEUE: a second run waits), and a pool created here runs one flow
    at a time. Then run a worker: `prefect worker start --pool POOL`."""
    if write_yaml:
        from flows.deploy import PREFECT_YAML, write_prefect_yaml
        typer.echo(f"{PREFECT_YAML} {'written' if write_prefect_yaml() else 'already up to date'}")
        return
    from flows.deploy import register_deployments
    try:
        rows = register_deployments(pool, names=name)
    except (RuntimeError, ValueError) as e:
        fail(str(e))
    for r in rows:
        typer.echo(f"{r['deployment']:<40} cron={r['cron'] or '-':<12} pool={r['pool']} "
                   f"limit={r['concurrency_limit'] or '-'} ({r['entrypoint']})")
    typer.echo(f"next: prefect worker start --pool {pool}")
