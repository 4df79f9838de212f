"""The ingest flow and CLI end to end: a real Prefect flow against a local site with faults."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from typer.testing import CliRunner

from etl.sample.server import FaultConfig, SiteServer
from etl.warehouse import connect
from flows.cli import app

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "etl"))
from site_builder import build_site


def test_ingest_flow_and_cli(tmp_path, paths, prefect_harness):
    from flows.ingest import ingest_instructables
    truth = build_site(tmp_path / "site", n_recipes=4)
    faults = FaultConfig(rate_limit_rate=0.15, fail_rate=0.1, truncate_rate=0.1,
                         retry_after_seconds=0.1, seed=5)
    with SiteServer(tmp_path / "site", faults=faults) as srv:
        summary = ingest_instructables(listing=srv.url + "/cooking/", allow_private=True,
                                       source="sample", delay_s=0, workers=2, progress=False)
        assert summary["discovered"] == len(truth.recipes_ok) + len(truth.recipes_rejected)
        assert summary["loaded"] == len(truth.recipes_ok)
        assert summary["images_ok"] == sum(s == "ok" for s in truth.images.values())
        assert summary["rejected"] == {"images/http_404": 1, "images/image_decode_error": 1,
                                       "ingest/http_404": 1, "ingest/no_steps": 1,
                                       "ingest/robots_disallowed": 1}
        # the CLI: a re-run finds everything done; the loopback site is refused without --allow-private
        runner = CliRunner()
        r = runner.invoke(app, ["ingest", "instructables", "--listing", srv.url + "/cooking/",
                                "--allow-private", "--source", "sample", "--delay", "0", "--no-progress"])
        assert r.exit_code == 0, r.output
        again = json.loads(r.stdout[r.stdout.index("{"):])
        assert again["fetched"] == 0 and again["loaded"] == 0 and again["images_ok"] == 0
        r = runner.invoke(app, ["ingest", "instructables", "--listing", srv.url + "/cooking/",
                                "--source", "sample", "--no-progress"])
        assert r.exit_code == 0
        assert "host_not_allowed" in r.stdout
        r = runner.invoke(app, ["parse", srv.url + "/Test-Recipe-001/", "--allow-private"])
        assert r.exit_code == 0 and json.loads(r.stdout)["recipe_id"] == "Test-Recipe-001"
    con = connect(paths)
    assert con.execute("SELECT count(*) FROM recipes WHERE status = 'ok'").fetchone()[0] == 4


def test_cli_errors_are_clear(tmp_path, paths):
    runner = CliRunner()
    r = runner.invoke(app, ["ingest", "instructables"])
    assert r.exit_code == 2 and "give --listing" in r.output
    r = runner.invoke(app, ["ingest", "instructables", "--urls", str(tmp_path / "nope.txt")])
    assert r.exit_code == 2 and "no such file" in r.output
    r = runner.invoke(app, ["parse", str(tmp_path / "nope.html")])
    assert r.exit_code == 2 and "neither a file nor" in r.output
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body>hello</body></html>")
    r = runner.invoke(app, ["parse", str(bad), "--url", "https://www.instructables.com/X/"])
    assert r.exit_code == 2 and "no_steps" in r.output
    r = runner.invoke(app, ["parse", "http://127.0.0.1:9/X/"])
    assert r.exit_code == 2 and "host_not_allowed" in r.output


def test_bench_parse_command(shared_fixtures):
    r = CliRunner().invoke(app, ["bench", "parse", str(shared_fixtures / "instructables"),
                                 "--seconds", "0.2"])
    assert r.exit_code == 0, r.output
    assert "pages/s (lxml, default) vs" in r.output and "ratio" in r.output
