"""The pipeline flow on a tiny sample kitchen crawled over loopback: a failing stage gives a clear
report and keeps earlier stages' outputs; the next run resumes at the failed stage and skips the
unchanged ones; a third run skips everything it can; stage artifacts are published."""
from __future__ import annotations

import pytest

from etl.sample.generate import build_sample
from etl.sample.server import SiteServer
from etl.warehouse import connect
from features.embed.train_encoder import TrainConfig, train_encoder
from flows.pipeline import PipelineStageFailed, Tab, fingerprint, pipeline_flow, table_digest


@pytest.fixture(scope="module")
def kitchen(tmp_path_factory):
    out = tmp_path_factory.mktemp("kitchen")
    build_sample(out, n_recipes=10, seed=5, workers=1, progress=False)
    return out


def _statuses(summary: dict) -> dict:
    return {r["stage"]: r["status"] for r in summary["stages"]}


def test_fingerprint_tracks_content_not_row_order(con):
    con.execute("CREATE TABLE t (a INTEGER, b VARCHAR, ts TIMESTAMP)")
    con.execute("INSERT INTO t VALUES (1, 'x', now()), (2, 'y', now())")
    before = fingerprint(con, [Tab("t", ("ts",))], {"seed": 0})
    con.execute("DELETE FROM t")
    con.execute("INSERT INTO t VALUES (2, 'y', now() + INTERVAL 1 DAY), (1, 'x', now())")
    assert fingerprint(con, [Tab("t", ("ts",))], {"seed": 0}) == before      # excluded column, order
    assert fingerprint(con, [Tab("t", ("ts",))], {"seed": 1}) != before      # parameters count
    con.execute("UPDATE t SET b = 'z' WHERE a = 1")
    assert fingerprint(con, [Tab("t", ("ts",))], {"seed": 0}) != before
    assert table_digest(con, Tab("t")).startswith("t:2:")


def test_failed_stage_is_reported_kept_outputs_stay_and_rerun_skips(kitchen, paths, prefect_harness):
    """An unknown encoder makes the embed stage fail: clear report, ingest/clean outputs kept,
    failure recorded; the re-run skips the unchanged clean stage and fails again at embed."""
    with SiteServer(kitchen / "site") as site:
        src = dict(listing=f"{site.url}/cooking/", allow_private=True, source="sample", delay_s=0.0,
                   encoder_id="no-such-encoder", generate=False, report=False)
        with pytest.raises(PipelineStageFailed, match="stage 'embed'"):
            pipeline_flow(**src)
        failed = pipeline_flow(**src, raise_on_failure=False)
    assert _statuses(failed) == {"ingest": "completed", "clean": "skipped", "embed": "failed"}
    assert "no-such-encoder" in failed["failed"]["error"]
    report = failed["failed"]["report"]
    assert "PIPELINE FAILED at stage 'embed'" in report
    assert "kept: ingest (completed), clean (skipped)" in report and "resumes at 'embed'" in report
    assert failed["failed"]["kept"] == ["ingest", "clean"]
    con = connect(paths, read_only=True)
    try:
        rec = dict(con.execute("SELECT stage, status FROM pipeline_stages").fetchall())
        assert rec == {"ingest": "completed", "clean": "completed", "embed": "failed"}
        assert con.execute("SELECT count(*) FROM step_tokens").fetchone()[0] > 0   # clean's output stayed
        err = con.execute("SELECT error FROM pipeline_stages WHERE stage = 'embed'").fetchone()[0]
        assert "no-such-encoder" in err
    finally:
        con.close()
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    with get_client(sync_client=True) as client:
        keys = {a.key for a in client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(like_="pipeline-")))}
    assert {"pipeline-summary", "pipeline-failure", "pipeline-ingest", "pipeline-clean"} <= keys


@pytest.mark.slow      # ~7 minutes on the shared 2-core machine (encoder, embed, generate x2)
def test_pipeline_fails_clearly_then_resumes_and_skips(kitchen, paths, prefect_harness):
    with SiteServer(kitchen / "site") as site:
        src = dict(listing=f"{site.url}/cooking/", allow_private=True, source="sample", delay_s=0.0,
                   report=False)
        # 1. an unknown encoder: the embed stage fails; ingest and clean are kept
        with pytest.raises(PipelineStageFailed, match="stage 'embed'"):
            pipeline_flow(**src, encoder_id="no-such-encoder")
        failed = pipeline_flow(**src, encoder_id="no-such-encoder", raise_on_failure=False)
        assert _statuses(failed) == {"ingest": "completed", "clean": "skipped", "embed": "failed"}
        report = failed["failed"]["report"]
        assert "no-such-encoder" in failed["failed"]["error"]
        assert "kept: ingest (completed), clean (skipped)" in report and "not run: generate" in report
        con = connect(paths)
        try:
            rec = dict(con.execute("SELECT stage, status FROM pipeline_stages").fetchall())
            assert rec == {"ingest": "completed", "clean": "completed", "embed": "failed"}
            n_tokens = con.execute("SELECT count(*) FROM step_tokens").fetchone()[0]
            assert n_tokens > 0                                    # clean's output stayed
            # 2. a (tiny, quick) encoder is registered; the next run resumes at embed
            train_encoder(con, paths, TrainConfig(epochs=1, batch_size=16, image_size=32, eval_max_pairs=20))
        finally:
            con.close()
        resumed = pipeline_flow(**src)
        assert _statuses(resumed) == {"ingest": "completed", "clean": "skipped", "embed": "completed",
                                      "generate": "completed", "competence": "completed"}
        gen = next(r["summary"] for r in resumed["stages"] if r["stage"] == "generate")
        assert gen["n_questions"] > 0
        # 3. nothing changed: every cacheable stage is skipped and reuses its recorded summary
        again = pipeline_flow(**src)
    assert _statuses(again) == {"ingest": "completed", "clean": "skipped", "embed": "skipped",
                                "generate": "skipped", "competence": "skipped"}
    assert next(r["summary"] for r in again["stages"] if r["stage"] == "generate") == gen
    # a forced stage runs again and gives the same datasets (determinism)
    forced = pipeline_flow(generate=True, report=False, force=["generate"])
    assert _statuses(forced) == {"clean": "skipped", "embed": "skipped", "generate": "completed",
                                 "competence": "skipped"}
    regen = next(r["summary"] for r in forced["stages"] if r["stage"] == "generate")
    assert [d["content_sha256"] for d in regen["datasets"]] == [d["content_sha256"] for d in gen["datasets"]]

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    with get_client(sync_client=True) as client:
        keys = {a.key for a in client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(like_="pipeline-")))}
    assert {"pipeline-summary", "pipeline-failure", "pipeline-embed", "pipeline-generate"} <= keys

    from flows.demo import demo_digest, format_digest
    text = format_digest(demo_digest(resumed))
    assert "in-vocabulary share" in text and "embed" in text and "visual_cloze" in text
    comp = next(r["summary"] for r in resumed["stages"] if r["stage"] == "competence")
    assert comp["source"] == "rules" and set(comp["results"]) <= {"cardinality", "elision", "implicit", "lifespan",
                                                                  "modifier", "unanswerable"}
    assert "competence families (roles: rules" in text
