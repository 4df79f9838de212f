"""Competence families on real text (538 RecipeQA validation records, `--source rules`): the command
line path from import to scored datasets, every answer justified by the extracted roles it cites,
and the same datasets on a second run."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from flows.cli import app


@pytest.mark.slow      # the real records ingested, cleaned and read for roles (~24 s)
def test_real_recipes_give_rule_based_families(shared_fixtures, paths):
    run = CliRunner()
    for args in (["--no-prefect", "ingest", "recipeqa", str(shared_fixtures / "recipeqa" / "val_dev.json")],
                 ["--no-prefect", "clean"]):
        r = run.invoke(app, args)
        assert r.exit_code == 0, r.output
    r = run.invoke(app, ["--no-prefect", "competence", "generate", "--split", "val", "--format", "json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output[r.output.index("{"):])
    assert res["source"] == "rules"
    n = {d["family"]: d["n_questions"] for d in res["datasets"]}
    assert n["modifier"] > 50 and n["implicit"] > 100 and n["cardinality"] > 50 and n["unanswerable"] > 30
    assert n["lifespan"] == 0                  # mixtures are only known from the sample kitchen's plans
    from etl.warehouse import connect
    con = connect(paths)
    rows = con.execute("SELECT template, question, answer, provenance FROM competence_questions "
                       "WHERE answerable AND template IN ('time', 'temperature', 'quantity')").fetchall()
    assert rows
    for template, question, answer, prov in rows:
        cited = {(x["role"], x["value"]) for x in json.loads(prov)["roles"]}
        assert (template, answer) in cited, (question, answer)
    before = con.execute("SELECT dataset_id, content_sha256 FROM competence_datasets ORDER BY 1").fetchall()
    con.close()
    r = run.invoke(app, ["--no-prefect", "competence", "generate", "--split", "val"])
    assert r.exit_code == 0, r.output
    con = connect(paths)
    assert con.execute("SELECT dataset_id, content_sha256 FROM competence_datasets ORDER BY 1").fetchall() == before
