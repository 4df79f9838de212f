"""Crawling a small sample kitchen with the real crawler (through the ingest
flow, over a real loopback server injecting faults) reproduces its ground truth, and cleaning then
rejects exactly the planted non-recipes with the planted reasons."""
from __future__ import annotations

import json

import pytest

from etl.sample.generate import build_sample
from etl.sample.server import FaultConfig, SiteServer
from etl.warehouse import connect, run_sql_tests


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    out = tmp_path_factory.mktemp("kitchen")
    build_sample(out, n_recipes=30, seed=3, workers=1, progress=False)
    truth = [json.loads(line) for line in (out / "ground_truth.jsonl").read_text().splitlines()]
    return out, truth


def test_crawl_then_clean_reproduces_ground_truth(sample, paths, prefect_harness):
    from flows.clean import clean_flow
    from flows.ingest import ingest_instructables

    out, truth = sample
    faults = FaultConfig(fail_rate=0.05, rate_limit_rate=0.05, truncate_rate=0.03,
                         retry_after_seconds=0.1, seed=1)
    with SiteServer(out / "site", faults=faults) as server:
        summary = ingest_instructables(listing=f"{server.url}/cooking/", allow_private=True,
                                       source="sample", delay_s=0.0, workers=4, progress=False)
        stats = dict(server.stats)
    assert stats.get("429", 0) + stats.get("5xx", 0) + stats.get("truncated", 0) > 0, stats
    clean_summary = clean_flow()
    assert clean_summary

    con = connect(paths)
    recipes = {r[0]: r[1:] for r in con.execute(
        "SELECT recipe_id, status, status_reason FROM recipes").fetchall()}
    rejects = {(s, k, r) for s, k, r in con.execute(
        "SELECT stage, key, reason FROM rejects").fetchall()}
    n_steps = dict(con.execute("SELECT recipe_id, count(*) FROM steps GROUP BY 1").fetchall())
    authors = dict(con.execute("SELECT recipe_id, author FROM recipes").fetchall())
    images = {i: (st, reason) for i, st, reason in con.execute(
        "SELECT image_id, status, status_reason FROM images").fetchall()}

    planted = {"ingest": 0, "clean": 0}
    for rec in truth:
        rid, exp = rec["recipe_id"], rec["expected"]
        if exp["stage"] == "ingest":
            planted["ingest"] += 1
            assert ("ingest", rid, exp["reason"]) in rejects, (rid, exp)
            continue
        # every page that should be ingested was, with all its steps
        assert rid in recipes, rid
        assert n_steps[rid] == len(rec["steps"]), rid
        assert authors[rid] == rec["author"], (rid, authors[rid], rec["author"])
        if exp["stage"] == "clean":
            planted["clean"] += 1
            assert recipes[rid][0] == "rejected" and recipes[rid][1] == exp["reason"], (rid, recipes[rid])
            assert ("clean", rid, exp["reason"]) in rejects
        else:
            assert recipes[rid][0] == "ok", (rid, recipes[rid])
        for step in rec["steps"]:
            for img in step["images"]:
                status, reason = images[img["image_id"]]
                if img["expected"] == "ok":
                    assert status == "ok", (img["image_id"], status, reason)
                else:
                    assert status == img["expected"], (img["image_id"], status, reason)
                    want = "http_404" if img["expected"] == "missing" else "image_decode_error"
                    assert ("images", img["image_id"], want) in rejects
    assert planted["ingest"] >= 1 and planted["clean"] >= 4, planted
    # nothing ingested that the ground truth does not know, and the warehouse's data tests pass
    assert set(recipes) <= {r["recipe_id"] for r in truth}
    assert all(n == 0 for n in run_sql_tests(con).values()), run_sql_tests(con)
    assert summary["loaded"] == len(truth) - planted["ingest"]
    con.close()


def test_crawl_with_splits_by_author_puts_every_recipe_of_an_author_in_one_split(sample, paths, prefect_harness):
    from etl.splits import split_of, split_unit
    from flows.ingest import ingest_instructables

    out, truth = sample
    with SiteServer(out / "site") as server:
        summary = ingest_instructables(listing=f"{server.url}/cooking/", allow_private=True, source="sample",
                                       delay_s=0.0, workers=4, progress=False, split_by="author")
    assert summary["splits"]["split_by"] == "author" and summary["splits"]["recipes"] == 0   # set before the crawl
    con = connect(paths)
    try:
        assert split_unit(con) == "author"
        rows = con.execute("SELECT recipe_id, author, split FROM recipes WHERE split IS NOT NULL").fetchall()
        assert len(rows) >= len(truth) - 2
        by_author: dict[str, set] = {}
        for rid, author, split in rows:
            assert split == split_of(rid, author, "author"), rid
            by_author.setdefault(author, set()).add(split)
        assert all(len(s) == 1 for s in by_author.values()), by_author
        assert sum(1 for r in rows if sum(1 for q in rows if q[1] == r[1]) > 1) > 0   # some authors have several
        assert all(n == 0 for n in run_sql_tests(con).values()), run_sql_tests(con)
    finally:
        con.close()
