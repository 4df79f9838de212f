"""`mrqa demo`: the whole pipeline on the embedded sample kitchen.

build the sample kitchen -> serve it on a free loopback port -> crawl it with the real crawler ->
clean + tokenize -> train the default encoder, embed, neighbours -> generate every dataset ->
bias report -> Parquet export -> a short tiny-config training run per visual-cloze setting shown
(RecipeQA-style preset and knobs 0-1-1), next to Hasty Student.
Each stage is a Prefect subflow; the demo prints a summary and returns it.
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from prefect import flow

from etl.config import Paths

log = logging.getLogger(__name__)


def sample_dir_for(paths: Paths, recipes: int, seed: int) -> Path:
    return paths.home / "sample" / f"n{recipes}-seed{seed}"


def ensure_sample(paths: Paths, recipes: int, seed: int, workers: int | None) -> dict:
    """Build the sample kitchen unless a finished build (its manifest) is already there."""
    from etl.sample.generate import build_sample
    out = sample_dir_for(paths, recipes, seed)
    manifest = out / "manifest.json"
    if manifest.exists():
        m = json.loads(manifest.read_text())
        log.info("sample kitchen already built at %s (content %s)", out, m.get("content_sha256"))
        return {"out": str(out), "reused": True, **{k: m[k] for k in ("n_recipes", "content_sha256") if k in m}}
    return {"out": str(out), "reused": False, **build_sample(out, recipes, seed, workers=workers)}


@flow(name="demo", log_prints=True)
def demo_flow(recipes: int = 1000, seed: int = 0, workers: int | None = None,
              crawl_workers: int = 8) -> dict:
    """Run every stage on the sample kitchen and return a summary per stage."""
    from etl.sample.server import SiteServer
    from flows.clean import clean_flow
    from flows.embed import embed_flow
    from flows.generate import generate_flow
    from flows.ingest import ingest_instructables
    from flows.report import report_flow

    paths = Paths.from_env().ensure()
    timings: dict[str, float] = {}
    summary: dict = {"home": str(paths.home)}

    t = time.perf_counter()
    summary["sample"] = ensure_sample(paths, recipes, seed, workers)
    timings["sample_build_s"] = time.perf_counter() - t

    t = time.perf_counter()
    with SiteServer(Path(summary["sample"]["out"]) / "site") as server:
        print(f"sample kitchen served at {server.url}")
        summary["ingest"] = ingest_instructables(listing=f"{server.url}/cooking/",
                                                 allow_private=True, source="sample", delay_s=0.0,
                                                 workers=crawl_workers)
    timings["crawl_s"] = time.perf_counter() - t

    t = time.perf_counter()
    summary["clean"] = clean_flow()
    timings["clean_s"] = time.perf_counter() - t

    t = time.perf_counter()
    summary["embed"] = embed_flow()
    timings["embed_s"] = time.perf_counter() - t

    t = time.perf_counter()
    summary["generate"] = generate_flow(all=True, seed=seed)
    timings["generate_s"] = time.perf_counter() - t

    t = time.perf_counter()
    report = report_flow()
    summary["report"] = {"index": report["index"], "bias": _bias_table(report)}
    timings["report_s"] = time.perf_counter() - t
    print(f"bias report: {report['index']}")

    t = time.perf_counter()
    summary["train"] = short_training(paths, summary["generate"], seed)
    timings["train_s"] = time.perf_counter() - t

    summary["timings"] = {k: round(v, 1) for k, v in timings.items()}
    return summary


def short_training(paths: Paths, generated: dict, seed: int, max_epochs: int = 3) -> list[dict]:
    """Export every dataset (with vectors) and train the tiny HTRN transformer briefly on the
    visual-cloze preset and knob setting 0-1-1; returns accuracy next to Hasty Student."""
    from etl.warehouse import connect
    from features.export import export_parquet
    from flows.train import train_flow

    ids = [d["dataset_id"] for d in generated.get("datasets", [])]
    export_dir = paths.exports / "all"
    con = connect(paths)
    try:
        export_parquet(con, ids, export_dir, with_vectors=True, lance_uri=paths.lance)
    finally:
        con.close()
    rows = []
    for prefix in ("vc-recipeqa-", "vc-k011-"):
        for dataset_id in (i for i in ids if i.startswith(prefix)):
            try:
                m = train_flow(str(export_dir), dataset_id, scorer="transformer", tiny=True,
                               overrides={"max_epochs": max_epochs, "seed": seed})
            except ValueError as e:      # e.g. a tiny sample without val questions
                log.warning("demo training skipped on %s: %s", dataset_id, e)
                rows.append({"dataset_id": dataset_id, "skipped": str(e)})
                continue
            rows.append({"dataset_id": dataset_id, "scorer": "transformer (tiny)",
                         **{k: m.get(k) for k in ("test_acc", "val_acc", "hasty_student_acc",
                                                   "faithfulness", "run_id")}})
    return rows


def _bias_table(report: dict) -> dict:
    """The report's per-task tables (datasets x questions, Hasty Student, probe, overlap)."""
    return {task: info.get("table", []) for task, info in report.get("tasks", {}).items()}
