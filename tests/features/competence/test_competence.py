"""Competence families from the role layer: every answer is justified by its provenance, every
unanswerable question is unanswerable by construction, the answer-prior cap and the unanswerable
balance hold, generation is deterministic, EM / F1 on known cases, the reader needs its own recipe,
and the export is real Parquet and JSON."""
from __future__ import annotations

import json
import re
from collections import Counter, defaultdict

import duckdb
import pytest

from etl.load import load_recipe
from etl.records import RecipeRecord, StepRecord
from etl.roles.store import extract_roles, load_truth
from etl.sample.generate import ground_truth, plan_all
from etl.warehouse import migrate
from features.competence import generate as G
from features.competence.evaluate import evaluate
from features.competence.scoring import exact_match, f1, normalize_answer, score
from features.competence.store import export, load_questions, write


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    d = tmp_path_factory.mktemp("competence")
    con = duckdb.connect(str(d / "w.duckdb"))
    migrate(con)
    gt = d / "ground_truth.jsonl"
    gt.write_text("".join(json.dumps(ground_truth(p)) + "\n" for p in plan_all(300, 0)))
    for line in gt.read_text().splitlines():
        g = json.loads(line)
        if g["expected"]["stage"] is None:
            load_recipe(con, RecipeRecord(g["recipe_id"], g["url_path"], g["title"], steps=[
                StepRecord(s["step_idx"], s["title_clean"], s["body_clean"]) for s in g["steps"]]), source="sample")
    extract_roles(con, progress=False)
    load_truth(con, gt)
    gen = G.generate(con, "truth", seed=0)
    write(con, gen, 0)
    return {"con": con, "gen": gen, "dir": d, "gt": gt}


def all_rows(gen):
    return [r for rows in gen["families"].values() for r in rows]


def test_every_family_has_questions(home):
    fams = home["gen"]["families"]
    assert set(fams) == set(G.FAMILIES)
    assert all(len(fams[f]) >= 20 for f in G.FAMILIES), {f: len(v) for f, v in fams.items()}


def _justified(r: dict) -> bool:
    prov = json.loads(r["provenance"])
    by = defaultdict(list)
    for x in prov["roles"]:
        by[x["role"]].append(x)
    t, a = r["template"], r["answer"]
    if t in ("time", "entity_time"):
        return any(x["value"] == a for x in by["time"])
    if t == "temperature":
        return any(x["value"] == a for x in by["temperature"])
    if t == "tool":
        return any(f"by using a {x['value']}" == a and not x["explicit"] for x in by["tool"])
    if t == "habitat":
        return any(G.at(x["value"]) == a and not x["explicit"] for x in by["habitat"])
    if t == "object":
        parts = by["participant"]
        return G.join([x["value"] for x in parts]) == a and not any(x["explicit"] for x in parts)
    if t in ("contents", "entity_contents"):
        return G.join([x["value"] for x in by["participant"]]) == a and all(x["explicit"] for x in by["participant"])
    if t == "ingredients":
        return str(len(by["participant"])) == a
    if t == "quantity":
        return any(x["value"] == a for x in by["quantity"])
    if t == "habitat_steps":
        return str(len({x["step_idx"] for x in by["habitat"]})) == a
    raise AssertionError(f"unknown template {t}")


def test_every_answer_is_justified_by_its_provenance(home):
    rows = [r for r in all_rows(home["gen"]) if r["answerable"]]
    assert len(rows) > 500
    bad = [(r["question"], r["answer"]) for r in rows if not _justified(r)]
    assert bad == []


def test_every_unanswerable_question_is_unanswerable_by_construction(home):
    con = home["con"]
    frames = G.load_frames(con, "truth")
    texts = dict(con.execute("SELECT recipe_id, lower(string_agg(body, ' ')) FROM steps GROUP BY 1").fetchall())
    na = [r for r in home["gen"]["families"]["unanswerable"] if not r["answerable"]]
    assert len(na) > 30 and all(r["answer"] == G.NA for r in na)
    kinds = Counter()
    for r in na:
        kinds[r["template"]] += 1
        m = re.match(r"^(?:For how long|At what temperature) should you (\S+) the (.+)\?$", r["question"])
        if r["template"] in ("time", "temperature"):
            verb, obj = m.groups()
            same = [f for f in frames[r["recipe_id"]] if f.event == verb and f.obj == obj]
            assert same and not any(getattr(f, r["template"]) for f in same), r["question"]
        elif r["template"] == "entity_time":
            assert m.group(2).lower() not in texts[r["recipe_id"]], r["question"]
        else:
            entity = re.match(r"^What's in the (.+)\?$", r["question"]).group(1)
            assert entity.lower() not in texts[r["recipe_id"]], r["question"]
    assert len(kinds) >= 3, kinds


def test_unanswerable_family_is_balanced_per_template_and_verb(home):
    rows = home["gen"]["families"]["unanswerable"]
    share = sum(not r["answerable"] for r in rows) / len(rows)
    assert share == pytest.approx(1 / (1 + G.ANSWERABLE_PER_NA), abs=1e-9)
    per_recipe = Counter(r["recipe_id"] for r in rows if not r["answerable"])
    assert max(per_recipe.values()) <= G.MAX_UNANSWERABLE


def test_no_answer_dominates_its_template(home):
    for fam, rows in home["gen"]["families"].items():
        if fam == "unanswerable":
            continue
        by_t = defaultdict(Counter)
        for r in rows:
            by_t[r["template"]][r["answer"]] += 1
        for t, c in by_t.items():
            top = max(c.values()) / sum(c.values())
            assert top <= max(G.PRIOR_CAP, 1 / len(c)) + 1e-9, (fam, t, c.most_common(3))


def test_questions_only_name_what_the_recipe_text_names(home):
    texts = dict(home["con"].execute("SELECT recipe_id, lower(string_agg(body, ' ')) FROM steps GROUP BY 1").fetchall())
    for r in all_rows(home["gen"]):
        if not r["answerable"]:
            continue
        m = re.match(r"^(?:For how long should you|At what temperature should you|How do you) \S+ the (.+)\?$",
                     r["question"]) or re.match(r"^What's in the (.+)\?$", r["question"])
        if m:
            assert m.group(1).lower() in texts[r["recipe_id"]], r["question"]


def test_generation_is_deterministic(home):
    again = G.generate(home["con"], "truth", seed=0)
    assert again == home["gen"]
    other = G.generate(home["con"], "truth", seed=1)
    assert other["families"]["modifier"] == home["gen"]["families"]["modifier"]
    assert other["families"]["unanswerable"] != home["gen"]["families"]["unanswerable"]


def test_rewriting_a_dataset_replaces_it(home):
    con = home["con"]
    q = "SELECT dataset_id, n_questions, content_sha256 FROM competence_datasets ORDER BY 1"
    before = con.execute(q).fetchall()
    write(con, home["gen"], 0)
    assert con.execute(q).fetchall() == before
    assert con.execute("SELECT count(*) FROM competence_questions").fetchone()[0] == sum(b[1] for b in before)


@pytest.mark.parametrize("pred,gold,em,f", [
    ("The Cat!", "cat", 1.0, 1.0), ("by using a knife", "by using a chef's knife", 0.0, 0.8571428571428571),
    ("knife", "by using a knife", 0.0, 0.5), ("N/A", "n/a", 1.0, 1.0), ("20 minutes", "N/A", 0.0, 0.0),
    ("", "", 1.0, 1.0), ("an apple", "", 0.0, 0.0)])
def test_em_and_f1_on_known_cases(pred, gold, em, f):
    assert exact_match(pred, gold) == em
    assert f1(pred, gold) == pytest.approx(f)


def test_normalisation_and_score():
    assert normalize_answer("  In the  Mixing-Bowl. ") == "in mixingbowl"
    assert score(["a", "b"], ["a", "c"]) == {"n": 2, "em": 50.0, "f1": 50.0}
    with pytest.raises(ValueError):
        score(["a"], ["a", "b"])


def test_the_reader_needs_its_own_recipe(home):
    res = evaluate(home["con"], home["gen"]["families"], "train")
    for fam in ("modifier", "lifespan", "elision", "cardinality"):
        own, other = res[fam]["reader"]["em"], res[fam]["reader_other_recipe"]["em"]
        assert own >= 45 and own - other >= 35, (fam, own, other)
    assert res["unanswerable"]["reader"]["em"] - res["unanswerable"]["answer_prior"]["em"] >= 25
    assert res["implicit"]["prior_flag"]                 # hidden tools follow from the verb: flagged
    assert not res["modifier"]["prior_flag"]


def test_export_is_partitioned_parquet_and_r2vq_json(home):
    out = home["dir"] / "export"
    res = export(home["con"], out, 0)
    n = sum(len(v) for v in load_questions(home["con"], 0).values())
    assert res["questions"] == n
    got = duckdb.sql(f"SELECT family, split, count(*) FROM read_parquet('{out}/competence/*/*/*.parquet', "
                     "hive_partitioning = true) GROUP BY ALL").fetchall()
    assert sum(c for _, _, c in got) == n and {f for f, _, _ in got} == set(G.FAMILIES)
    js = json.loads((out / "competence-r2vq.json").read_text())
    assert sum(len(r["questions"]) for r in js["recipes"]) == n
    export(home["con"], out, 0)                            # re-running replaces, no duplicates
    assert duckdb.sql(f"SELECT count(*) FROM read_parquet('{out}/competence/*/*/*.parquet')").fetchall()[0][0] == n


def test_cli_refuses_bad_arguments_in_one_line(paths):
    from typer.testing import CliRunner

    from flows.cli import app
    r = CliRunner().invoke(app, ["competence", "generate", "--source", "gold"])
    assert r.exit_code == 2 and r.output.strip().splitlines()[-1].startswith("error: --source must be one of")
    r = CliRunner().invoke(app, ["competence", "generate", "--no-roles"])
    assert r.exit_code == 2 and "mrqa roles extract" in r.output
    r = CliRunner().invoke(app, ["roles", "eval"])
    assert r.exit_code == 2 and "--ground-truth" in r.output


def test_stored_metrics_reach_the_bias_report(home):
    from features.competence.report import html_rows, stored_results
    from features.competence.store import write_metrics
    from features.diagnostics.report import render_html
    res = evaluate(home["con"], home["gen"]["families"], "test")
    write_metrics(home["con"], res, 0, "test")
    back = stored_results(home["con"])
    assert list(back) == [f for f in G.FAMILIES if f in res]
    for fam, m in res.items():
        assert back[fam]["reader"] == pytest.approx(m["reader"]) and back[fam]["prior_flag"] == m["prior_flag"]
        assert back[fam]["questions"] == m["questions"]
    page = render_html({}, None, html_rows(back))
    assert "id='competence'" in page and page.count("<tr>") == len(back) + 1


def test_the_most_frequent_answer_breaks_ties_by_value_not_by_row_order():
    """The answer prior and the context-only baseline take the most frequent value; the rows come from
    queries without a fixed order, so a tie must not go to the first row seen (it did: the demo's
    lifespan answer prior read 25.0 or 33.5 on two runs of `mrqa competence evaluate`)."""
    import itertools
    from collections import Counter

    from features.competence.evaluate import mode
    rows = ["bowl", "pan", "pan", "bowl", "oven"]
    assert {mode(Counter(p)) for p in itertools.permutations(rows)} == {"bowl"}
    assert mode(Counter(["pan", "pan", "bowl"])) == "pan"
