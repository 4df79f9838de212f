"""`mrqa clean` through the real Prefect flow: summary, idempotency, vocab-report."""
from __future__ import annotations

import json

from typer.testing import CliRunner


def test_clean_flow_and_vocab_report(paths, shared_fixtures, prefect_harness):
    from etl.recipeqa import import_recipeqa
    from etl.warehouse import connect, table_fingerprint
    from flows.clean import clean_flow
    from flows.cli import app
    con = connect(paths)
    import_recipeqa(con, [shared_fixtures / "recipeqa" / "val_sample.json"])
    con.close()
    s1 = clean_flow(workers=1)
    assert s1["kept"] == 3 and s1["sentences"] > 0 and s1["punkt"] == "trained"
    con = connect(paths)
    before = {t: table_fingerprint(con, t) for t in ("steps", "step_tokens")}
    con.close()
    res = CliRunner().invoke(app, ["clean", "--workers", "1"])
    assert res.exit_code == 0, res.output
    s2 = json.loads(res.output)
    assert s2["punkt"] == "loaded" and s2["sentences"] == s1["sentences"]
    con = connect(paths)
    assert {t: table_fingerprint(con, t) for t in ("steps", "step_tokens")} == before
    con.close()
    res = CliRunner().invoke(app, ["vocab-report", "--top", "5"])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.output)
    before_r, after_r = rep["before_repair"], rep["after_repair"]
    # repair never adds an OOV type or occurrence (the type *share* can dip by merging in-dictionary
    # variants such as "word-" into "word", which shrinks the denominator)
    assert after_r["n_oov_types"] <= before_r["n_oov_types"]
    assert after_r["tokens_in_dict_share"] >= before_r["tokens_in_dict_share"]
    assert after_r["n_word_types"] <= before_r["n_word_types"]
