"""Adversarial filtering (features/datasets/adversarial.py) on a synthetic world with a planted
per-recipe "kitchen" cue (features/datasets/synthetic.py: every image of a recipe shares one style
vector) and recipes grouped by author.

The knob invariant suite of test_generate.py runs on the AF datasets as well: its tests are loaded
below and collected again in this module, where `world` holds the AF datasets' exported rows."""
from __future__ import annotations

import importlib.util
import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from synthetic_home import synthetic_home

from features.datasets.export import export_parquet, tree_sha256
from features.datasets.generate import generate_datasets, generation_settings
from features.datasets.knobs import AF_DEFAULT_ROUNDS, KnobParams, dataset_id

ENC = "synthetic-enc-0001"
N_AUTHORS = 12


def _load_invariants():
    spec = importlib.util.spec_from_file_location("af_knob_invariants", Path(__file__).with_name("test_generate.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_inv = _load_invariants()
# the knob invariants, collected again here with this module's `world` (the AF datasets)
test_knob1_counts_and_no_reused_answer_step = _inv.test_knob1_counts_and_no_reused_answer_step
test_cloze_shape_and_knob2_ball_from_exported_vectors = _inv.test_cloze_shape_and_knob2_ball_from_exported_vectors
test_knob2_statistics_recomputed_from_neighbours_and_vectors = (
    _inv.test_knob2_statistics_recomputed_from_neighbours_and_vectors)
test_knob3_closer_distractors_on_flagged_questions = _inv.test_knob3_closer_distractors_on_flagged_questions
test_knob3_coin_flags_about_half_and_balanced_is_uniform = _inv.test_knob3_coin_flags_about_half_and_balanced_is_uniform
test_skips_are_counted_and_stored = _inv.test_skips_are_counted_and_stored
test_sql_data_tests_pass = _inv.test_sql_data_tests_pass
_d = _inv._d


def _af(task, k1, k2, k3, mode="coin"):
    return task, replace(KnobParams.preset_for(task, k1, k2, k3, k3_mode=mode), af_rounds=AF_DEFAULT_ROUNDS)


AF_SETTINGS = [_af("visual_cloze", 0, 0, 0), _af("visual_cloze", 0, 1, 1), _af("visual_cloze", 1, 0, 1),
               _af("visual_cloze", 0, 1, 1, "all"), _af("visual_cloze", 0, 1, 1, "balanced"),
               _af("visual_coherence", 0, 1, 1), _af("visual_coherence", 1, 0, 0),
               _af("visual_coherence", 0, 1, 1, "balanced"), _af("textual_cloze", 0, 1, 1, "balanced")]

# content hashes of every non-AF setting (the paper's grid, the knob-3 balanced variants, the presets) on
# this world, computed by the generator before adversarial filtering existed: AF adds datasets, and
# leaves these byte-identical. Keyed by the ids that spell the setting's name (vc-0-0-1-balanced-s0-...);
# the same datasets had vc-k001-s0-...-pdabfed-style ids before, with these same content hashes (they
# cover the questions, not the id). The 8 cloze settings with knob 3 = 0 were re-recorded once, when
# their `n_closer_candidates` became null (it had counted whatever closeness earlier settings of the
# same run had computed, so a setting generated alone differed); nothing else in them changed
BEFORE_AF = json.loads((Path(__file__).with_name("adversarial_before_af_hashes.json")).read_text())


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with synthetic_home(tmp_path_factory, "af_home", n_recipes=90, seed=3, dim=24, k=100) as (home, paths, con):
        con.execute(f"""UPDATE recipes SET author = 'author-' ||
                        CAST(CAST(split_part(recipe_id, '-', 3) AS INTEGER) % {N_AUTHORS} AS VARCHAR)""")
        paper = generation_settings()
        bases = [(t, replace(p, af_rounds=0)) for t, p in AF_SETTINGS]
        summaries = generate_datasets(con, paper + [b for b in bases if b not in paper] + AF_SETTINGS, seed=0,
                                      encoder_id=ENC, lance_uri=paths.lance, progress=False)
        af_ids = [s["dataset_id"] for s in summaries if "adversarial" in s]
        base_of = {dataset_id(t, p, 0, ENC): dataset_id(t, b, 0, ENC) for (t, p), (_, b) in zip(AF_SETTINGS, bases)}
        out = paths.exports / "af"
        exp = export_parquet(con, af_ids, out, with_vectors=True, lance_uri=paths.lance)
        q = duckdb.sql(f"SELECT * FROM read_parquet('{out}/questions/**/*.parquet', hive_partitioning=true)")
        rows = [dict(zip(q.columns, r)) for r in q.fetchall()]
        for r in rows:
            r["prov"] = json.loads(r["provenance"])
        vec = {}
        for name, idc in (("image_vectors", "image_id"), ("text_vectors", "item_id")):
            for i, v in duckdb.sql(f"SELECT {idc}, vector FROM '{out}/{name}.parquet'").fetchall():
                v = np.asarray(v, dtype=np.float64)
                vec[i] = v / np.linalg.norm(v)
        recipes = {r: s for r, s in duckdb.sql(f"SELECT recipe_id, split FROM '{out}/recipes.parquet'").fetchall()}
        author = dict(con.execute("SELECT recipe_id, author FROM recipes").fetchall())
        yield {"con": con, "paths": paths, "summaries": {s["dataset_id"]: s for s in summaries}, "rows": rows,
               "vec": vec, "recipes": recipes, "author": author, "export": exp, "af_ids": af_ids, "out": out,
               "base_of": base_of}


def _step_of(item: str) -> tuple[str, int]:
    rid, step, _ = item.removesuffix(".jpg").rsplit("_", 2)
    return rid, int(step)


def test_paper_settings_and_presets_unchanged_by_af(world):
    s = world["summaries"]
    assert set(BEFORE_AF) <= set(s) and len(BEFORE_AF) == len(generation_settings()) == 44
    assert {did: s[did]["content_sha256"] for did in BEFORE_AF} == BEFORE_AF


def test_af_ids_partitions_and_params(world):
    con = world["con"]
    assert len(world["af_ids"]) == len(AF_SETTINGS)
    for (task, p), did in zip(AF_SETTINGS, world["af_ids"]):
        assert did == dataset_id(task, p, 0, ENC) and "-af-" in did
        params = json.loads(con.execute("SELECT params FROM datasets WHERE dataset_id = ?", [did]).fetchall()[0][0])
        adv = params["adversarial"]
        assert adv["rounds"] == params["af_rounds"] == AF_DEFAULT_ROUNDS
        assert adv["pools"] == (["ball", "author"] if task == "visual_coherence" else ["ball", "author", "recipe"])
        assert len({m["C"] for m in adv["ensemble"]}) == 3
        wide_and_narrow = ["all", "all", "all", "distance", "choice_set"]
        assert [m["features"] for m in adv["ensemble"]] == wide_and_narrow + (
            {"visual_cloze": ["sequence", "sequence"],          # the stage-cue members
             "textual_cloze": ["order", "order"]}.get(task, []))    # the title-order members
    parts = {p.relative_to(world["out"]).parts[1:3] for p in (world["out"] / "questions").rglob("*.parquet")}
    assert ("task=visual_cloze", "knobs=0-1-1-af") in parts
    assert ("task=visual_cloze", "knobs=0-1-1-balanced-af") in parts
    assert ("task=visual_cloze", "knobs=0-1-1-all-af") in parts
    assert ("task=visual_coherence", "knobs=1-0-0-af") in parts
    for r in world["rows"]:
        assert r["knobs"].endswith("-af") and r["prov"]["adversarial"]["rounds"] == AF_DEFAULT_ROUNDS
    # the paper settings' params carry no AF field
    p0 = json.loads(con.execute("SELECT params FROM datasets WHERE dataset_id = ?",
                                [world["base_of"][world["af_ids"][0]]]).fetchall()[0][0])
    assert "af_rounds" not in p0 and "adversarial" not in p0


def test_af_distractors_never_the_answer_step_and_pools_are_what_they_say(world):
    recipes, author = world["recipes"], world["author"]
    seen = Counter()
    for r in world["rows"]:
        if r["task"] not in ("visual_cloze", "textual_cloze"):
            continue
        p = r["prov"]
        pools = p["af_pools"]
        assert pools[r["answer"]] == "answer" and len(pools) == 4 and len(p["af_scores"]) == 4
        assert len(set(p["choice_items"])) == 4
        if r["task"] == "textual_cloze":
            assert len({c.strip().lower() for c in r["choice_list"]}) == 4
        dpools = [x for j, x in enumerate(pools) if j != r["answer"]]
        for d, pool in zip(p["distractors"], dpools):
            rid, step = _step_of(d["item"])
            assert rid == d["recipe_id"] and recipes[rid] == r["split"]
            if rid == r["recipe_id"]:
                assert pool == "recipe"
                assert step != p["answer_step"] and step not in r["question_step_ids"], r["qid"]
                # nor a step that could fill the placeholder: between its shown neighbours
                shown, j = r["question_step_ids"], p["placeholder_index"]
                lo = shown[j - 1] if j > 0 else -1
                hi = shown[j + 1] if j + 1 < len(shown) else 10 ** 9
                assert not lo < step < hi, (r["qid"], shown, j, step)
            elif author[rid] == author[r["recipe_id"]]:
                assert pool == "author"
            else:
                assert pool == "ball"
            seen[pool] += 1
    assert seen["recipe"] > 20 and seen["author"] > 5 and seen["ball"] > 20, seen


def _item_step(item: str) -> tuple[str, int]:
    """(recipe_id, step) of an image id (<recipe>_<step>_<k>.jpg) or a title item (<recipe>_<step>_title)."""
    rid, step, _ = item.removesuffix(".jpg").rsplit("_", 2)
    return rid, int(step)


def test_af_never_offers_a_text_twin_of_the_answer_step(world):
    """Cloze: no distractor's step says the same as the answer's step (twins.py); coherence: the
    foreign photo's step twins no step of the question's recipe. Knob picks that were twins are
    counted, and replaced or dropped."""
    from features.datasets.twins import StepWords
    words = StepWords.from_warehouse(world["con"])
    checked = Counter()
    for r in world["rows"]:
        p = r["prov"]
        if r["task"] in ("visual_cloze", "textual_cloze"):
            a = words.index[(r["recipe_id"], p["answer_step"])]
            for d in p["distractors"]:
                assert not words.twins(np.array(a), np.array(words.index[_item_step(d["item"])])), (r["qid"], d)
                checked[r["task"]] += 1
        elif r["task"] == "visual_coherence":
            f = words.index[_item_step(r["choice_list"][r["answer"]])]
            assert not words.twins(np.array(f), words.recipe_rows([r["recipe_id"]])[0]).any(), r["qid"]
            checked[r["task"]] += 1
    assert min(checked.values()) > 50 and len(checked) == 3, checked
    s = world["summaries"]
    twins_in_picks = sum(s[d]["adversarial"].get("twin_distractors_in_knob_picks", 0) for d in world["af_ids"])
    assert twins_in_picks > 0           # the world has twins (same step kind): the rule had work to do


def test_textual_af_never_offers_a_recipes_intro_title(world):
    """No question shows or asks about a recipe's intro (step 0), so its title (the recipe's name) as a
    distractor is a choice that is never the answer, a cue a question-only model on the titles' words
    reads. The paper's settings keep the knob's picks, intro titles among them; AF replaces them or drops
    the question (`af_intro_title`), and counts them."""
    con, s = world["con"], world["summaries"]
    af = [r for r in world["rows"] if r["task"] == "textual_cloze"]
    assert len(af) > 30
    for r in af:
        p = r["prov"]
        assert r["question_step_ids"] and 0 not in r["question_step_ids"] and p["answer_step"] != 0
        assert all(_item_step(d["item"])[1] != 0 for d in p["distractors"]), r["qid"]
    base = world["base_of"][next(d for d in world["af_ids"] if d.startswith("tc-"))]
    intro_picks = con.execute("""SELECT count(*) FROM questions, unnest(json_extract_string(provenance,
                                 '$.choice_items[*]')) AS t(item) WHERE dataset_id = ? AND item LIKE '%\\_0\\_title'
                                 ESCAPE '\\'""", [base]).fetchall()[0][0]
    assert intro_picks > 0                               # the plain setting has them: the rule had work to do
    d = next(d for d in world["af_ids"] if d.startswith("tc-"))
    assert s[d]["adversarial"]["intro_titles_in_knob_picks"] > 0


def test_af_questions_are_answerable_from_the_step_text(world):
    """Recomputed from the store's vectors: on every AF visual cloze question the answer step's body text
    is nearer the answer photo than every distractor by READ_MARGIN (cosine); on every AF coherence
    question each shown step's text is nearer its own photo than the foreign photo, by the margin. Knob
    picks that broke it were counted, and replaced or dropped."""
    from features.datasets.adversarial import READ_MARGIN
    from features.vectors.store import FeatureStore
    ids, mat = FeatureStore(world["paths"].lance).text_vectors(ENC, "body")
    body = {i: v / np.linalg.norm(v) for i, v in zip(ids, np.asarray(mat, np.float64))}
    vec, checked = world["vec"], Counter()
    for r in world["rows"]:
        p = r["prov"]
        if r["task"] == "visual_cloze":
            t = body[f"{r['recipe_id']}_{p['answer_step']}_body"]
            items = r["choice_list"]
            s = np.array([vec[c] @ t for c in items])
            margin = s[r["answer"]] - np.delete(s, r["answer"]).max()
            assert margin >= READ_MARGIN - 1e-6, (r["qid"], margin)
            checked[r["task"]] += 1
        elif r["task"] == "visual_coherence":
            T = np.array([body[f"{r['recipe_id']}_{_item_step(i)[1]}_body"] for i in p["question_items"]])
            own = np.array([T[j] @ vec[i] for j, i in enumerate(p["question_items"])])
            foreign = T @ vec[p["foreign_item"]]
            assert (foreign <= own - READ_MARGIN + 1e-6).all(), (r["qid"], own, foreign)
            checked[r["task"]] += 1
    assert min(checked.values()) > 50 and len(checked) == 2, checked
    s = world["summaries"]
    assert all(s[d]["adversarial"]["answerability_rule"] == (t != "textual_cloze")
               for (t, _), d in zip(AF_SETTINGS, world["af_ids"]))
    # the world's step texts are noisy enough that the rule had work to do
    assert sum(s[d]["adversarial"].get("unreadable_distractors_in_knob_picks", 0) for d in world["af_ids"]) > 20


def test_af_coherence_foreign_image_keeps_knobs_2_and_3(world):
    vec, recipes, author = world["vec"], world["recipes"], world["author"]
    pools = Counter()
    for r in (r for r in world["rows"] if r["task"] == "visual_coherence"):
        p = r["prov"]
        assert r["question"][r["answer"]] == p["foreign_item"] and p["af_pools"][r["answer"]] in ("ball", "author")
        assert p["foreign_recipe_id"] != r["recipe_id"] and recipes[p["foreign_recipe_id"]] == r["split"]
        assert (p["af_pools"][r["answer"]] == "author") == (author[p["foreign_recipe_id"]] == author[r["recipe_id"]])
        coherent = p["question_items"]
        f = vec[p["foreign_item"]]
        d_anchor = _d(f, vec[p["anchor_item"]])
        assert p["anchor_item"] in coherent and d_anchor == pytest.approx(p["distance"], abs=1e-5)
        assert p["ball"][0] - 1e-5 < d_anchor < p["ball"][1] + 1e-5
        # the anchor: the nearest coherent image whose neighbour list holds the foreign one (ball pool), or
        # the nearest coherent image (author pool, distances recomputed)
        assert d_anchor >= min(_d(f, vec[c]) for c in coherent) - 1e-5
        _inv.assert_coherence_knob3(r, vec, coherent, f)
        pools[p["af_pools"][r["answer"]]] += 1
    assert pools["ball"] > 20, pools


def test_answers_balanced_over_positions_after_af(world):
    for task in ("visual_cloze", "visual_coherence", "textual_cloze"):
        ans = [a for _, a in {(r["qid"], r["answer"]) for r in world["rows"] if r["task"] == task}]
        c = np.bincount(ans, minlength=4)
        assert len(ans) > 100
        assert ((c - len(ans) / 4) ** 2 / (len(ans) / 4)).sum() < 16.3, (task, c)     # p ~ 0.001, 3 dof


def test_final_adversary_is_at_chance_in_both_directions_on_the_kept_questions(world):
    """The drop rule: per dataset and split, the final held-out ensemble picks the answer (rank 0) of at
    most a quarter of the kept questions, and finds it the least plausible choice (rank 3) for at most a
    quarter -- never all solved, never all reversed."""
    rounds = Counter()
    ranks: dict = {}
    for r in world["rows"]:
        s = r["prov"]["af_scores"]
        rank = sum(x > s[r["answer"]] for j, x in enumerate(s) if j != r["answer"])
        ranks.setdefault((r["dataset_id"], r["split"]), Counter())[rank] += 1
        rounds[r["prov"]["af_round"]] += 1
    assert set(rounds) <= set(range(AF_DEFAULT_ROUNDS + 1)) and rounds[0] < sum(rounds.values())
    for key, c in ranks.items():
        n = sum(c.values())
        assert c[0] <= n / 4 + 1 and c[3] <= n / 4 + 1, (key, c)     # +1: scores are stored rounded
    # ranks 1-2 are all kept: a dataset's kept questions are not squeezed to rank 0 / 3 alone
    assert all(c[1] + c[2] >= sum(c.values()) / 2 - 1 for c in ranks.values())


def test_cap_extremes_keeps_the_largest_chance_level_subset():
    from features.datasets.adversarial import _cap_extremes
    rng = np.random.default_rng(0)
    rank = rng.choice(4, size=400, p=[0.5, 0.2, 0.2, 0.1])
    splits = np.where(np.arange(400) % 3 == 0, "test", "train")
    gap = rng.random(400)
    keep = _cap_extremes(rank, splits, gap)
    for sp in ("test", "train"):
        k = rank[keep & (splits == sp)]
        c = np.bincount(k, minlength=4)
        assert c[0] <= len(k) / 4 and c[3] <= len(k) / 4
        assert (c[1:3] == np.bincount(rank[splits == sp], minlength=4)[1:3]).all()   # middle ranks all kept
        assert c[0] + 1 > (len(k) + 1) / 4 - 1                                          # rank 0 as many as allowed
        # within a capped rank the least distinguishable questions (smallest gap) are the ones kept
        r0 = (rank == 0) & (splits == sp)
        assert gap[r0 & keep].max() <= gap[r0 & ~keep].min()
    # nothing to cap: everything kept
    assert _cap_extremes(np.tile(np.arange(4), 10), np.full(40, "train"), np.zeros(40)).all()


def test_af_keeps_a_reported_share_of_the_knob_questions(world):
    s = world["summaries"]
    con = world["con"]
    for did in world["af_ids"]:
        adv = s[did]["adversarial"]
        base = s[world["base_of"][did]]
        assert adv["n_knob_questions"] == base["n_questions"]          # the same knob selection before AF
        assert adv["n_kept"] == s[did]["n_questions"]
        assert adv["kept_share"] == pytest.approx(adv["n_kept"] / adv["n_knob_questions"], abs=1e-4)
        dropped = sum(n for k, n in s[did]["skips"].items() if k.startswith("af_"))     # every reason AF drops for
        assert dropped == adv["n_knob_questions"] - adv["n_kept"]
        assert adv["kept_share"] >= 0.4, (did, adv)
        stored = json.loads(con.execute("SELECT params FROM datasets WHERE dataset_id = ?", [did]).fetchall()[0][0])
        assert stored["adversarial"]["kept_share"] == adv["kept_share"]


def _probe(rows, vec) -> float:
    """The judge: the learned question-only probe (its task features: pair features plus the distance
    probe's set-level cues; 5 folds by recipe) on exported questions and vectors."""
    from features.diagnostics.question_only import cross_fitted_scores, task_features
    ids = sorted({i for r in rows for i in r["question"] + r["prov"].get("question_items", []) if i in vec}
                 | {i for r in rows for i in r["prov"].get("choice_items", [])})
    at = {i: k for k, i in enumerate(ids)}
    mat = np.array([vec[i] for i in ids])
    task = rows[0]["task"]
    if task == "visual_coherence":
        q_rows, c_rows = [[] for _ in rows], [[at[i] for i in r["question"]] for r in rows]
    else:
        q_rows = [[at[i] for j, i in enumerate(r["prov"]["question_items"]) if j != r["prov"]["placeholder_index"]]
                  for r in rows]
        c_rows = [[at[i] for i in r["prov"]["choice_items"]] for r in rows]
    X = task_features(task, q_rows, c_rows, mat)
    y = np.array([r["answer"] for r in rows])
    return float((np.argmax(cross_fitted_scores(X, y, [r["recipe_id"] for r in rows], 5, 0), axis=1) == y).mean())


def _knob_rows(con, base: str, tmp_path) -> list[dict]:
    """The exported question rows (provenance parsed) of the knob selection an AF dataset started from."""
    export_parquet(con, [base], tmp_path / base, with_vectors=False)
    q = duckdb.sql(f"SELECT * FROM read_parquet('{tmp_path / base}/questions/**/*.parquet', "
                   "hive_partitioning=true)")
    rows = [dict(zip(q.columns, r)) for r in q.fetchall()]
    for r in rows:
        r["prov"] = json.loads(r["provenance"])
    return rows


def test_question_only_probe_high_before_af_and_near_chance_after(world, tmp_path):
    """The judge reads the knob selection well above chance; after AF it is near chance, and not far
    below chance either (a probe well below 25% reads a reversed cue AF left). These datasets hold
    70-190 questions each (a 95% interval of about +-10 points at 25%): per dataset at most 40%, pooled
    over all of them within a few points of chance."""
    con, s = world["con"], world["summaries"]
    checked, after_all = 0, []
    for (task, p), did in zip(AF_SETTINGS, world["af_ids"]):
        if task == "textual_cloze":
            continue
        after_rows = [r for r in world["rows"] if r["dataset_id"] == did]
        after = _probe(after_rows, world["vec"])
        assert 0.12 <= after <= 0.40, (did, after)
        after_all.append((after, len(after_rows)))
        if task == "visual_cloze" and p.k3_mode == "coin":
            before_rows = _knob_rows(con, world["base_of"][did], tmp_path)
            assert _probe(before_rows, world["vec"]) > 0.5, did
            assert s[did]["adversarial"]["probe_before"] > 0.5
            checked += 1
    assert checked == 2
    # pooled over the AF datasets (about 1,000 questions): within a few points of chance
    pooled = sum(a * n for a, n in after_all) / sum(n for _, n in after_all)
    assert 0.19 <= pooled <= 0.31, pooled
    # per dataset the generator's own figure; these datasets hold 70-190 questions (a 95% interval of
    # about +-10 points at 25%), so the bound is chance plus that noise, the pooled figure above is the
    # tight one
    for did in world["af_ids"]:
        assert s[did]["adversarial"]["probe_after"] <= 0.40, (did, s[did]["adversarial"])


def _centre_share(rows, vec) -> float:
    """The centre-of-the-choices rule (bias.centre_rule) on exported cloze questions."""
    from features.diagnostics.question_only import choice_spread
    ch = np.array([[vec[i] for i in r["prov"]["choice_items"]] for r in rows])
    return float((choice_spread(ch).argmin(1) == np.array([r["answer"] for r in rows])).mean())


def test_af_takes_the_answer_out_of_the_centre_of_the_choice_set(world, tmp_path):
    """Knob 2 draws distractors close to the answer, so the answer is the centre of its choice set far
    more often than 1 in 4 (the centre-of-the-choices rule reads it without the question); AF's
    adversary sees each choice's spread among the choices, and the kept cloze questions put the answer
    at the centre not much more often than chance: at most 34% pooled (about 620 questions, +-3.5
    points at 95%; the adversary balances all 17 set-level cues at once in 3 rounds, not this one
    alone), from over 40%."""
    con = world["con"]
    before_all, after_all = [], []
    for (task, _p), did in zip(AF_SETTINGS, world["af_ids"]):
        if task != "visual_cloze":
            continue
        after_rows = [r for r in world["rows"] if r["dataset_id"] == did]
        before_rows = _knob_rows(con, world["base_of"][did], tmp_path)
        before_all.append((_centre_share(before_rows, world["vec"]), len(before_rows)))
        after_all.append((_centre_share(after_rows, world["vec"]), len(after_rows)))
    pooled = lambda xs: sum(a * n for a, n in xs) / sum(n for _, n in xs)
    assert len(after_all) == 5
    assert pooled(before_all) > 0.4, before_all
    assert pooled(after_all) <= 0.34, after_all


def test_af_is_deterministic_and_thread_independent(world, tmp_path):
    con, paths = world["con"], world["paths"]
    settings = [AF_SETTINGS[1], AF_SETTINGS[5]]
    again = generate_datasets(con, settings, seed=0, encoder_id=ENC, lance_uri=paths.lance, progress=False,
                              workers=1)
    ids = [x["dataset_id"] for x in again]
    assert [x["content_sha256"] for x in again] == [world["summaries"][i]["content_sha256"] for i in ids]
    h1 = export_parquet(con, ids, tmp_path / "a", with_vectors=False)["sha256"]
    h2 = export_parquet(con, ids, tmp_path / "b", with_vectors=False)["sha256"]
    assert h1 == h2 == tree_sha256(tmp_path / "a")
    other = generate_datasets(con, settings, seed=1, encoder_id=ENC, lance_uri=paths.lance, progress=False)
    assert all(o["content_sha256"] != a["content_sha256"] for o, a in zip(other, again))


def test_af_chunk_sizes_leave_every_dataset_byte_for_byte_the_same(world, monkeypatch):
    """AF builds and scores its candidates' features chunk by chunk (adversarial.FEATURE_BUDGET) and blocks its
    cloze slot loop (SLOT_BUDGET): one question at a time and every question at once give the same datasets,
    so the budgets are a matter of speed only (`mrqa bench af-chunks`)."""
    from features.datasets import adversarial as A
    from features.datasets.af_bench import bench_af_chunks, fingerprint
    from features.datasets.generate import Generator
    con, paths = world["con"], world["paths"]
    settings = [AF_SETTINGS[1], AF_SETTINGS[5], AF_SETTINGS[8]]      # visual cloze, coherence, textual cloze
    gen = Generator(con, ENC, paths.lance)
    prints = {}
    for budget in (1, 1 << 30):
        monkeypatch.setattr(A, "FEATURE_BUDGET", budget)
        monkeypatch.setattr(A, "SLOT_BUDGET", budget)
        made = [gen.generate(t, p, 0) for t, p in settings]
        assert all(ds.n_questions and ds.adversarial for ds in made)
        prints[budget] = [fingerprint(ds) for ds in made]
    assert prints[1] == prints[1 << 30] and len(set(prints[1])) == 3
    # the bench says so too, and leaves the budgets as it found them
    monkeypatch.setattr(A, "FEATURE_BUDGET", 1 << 12)
    [line] = bench_af_chunks(con, paths.lance, ENC, (("visual_coherence", "1-0-0-af"),), repeats=1)
    assert "the same dataset, byte for byte" in line and "visual_coherence 1-0-0-af" in line, line
    assert A.FEATURE_BUDGET == 1 << 12 and A.SLOT_BUDGET == 1 << 30


def test_af_refuses_presets_and_ordering_knob_three():
    from features.datasets.generate import settings_for
    with pytest.raises(ValueError, match="knob 3 is not defined"):
        settings_for("visual_ordering", (0, 1, 1), adversarial=True)
    assert settings_for("visual_ordering", (0, 1, 0), adversarial=True)[0][1].af_rounds == AF_DEFAULT_ROUNDS
    with pytest.raises(ValueError, match="adversarial filtering is defined"):
        settings_for("visual_cloze", preset="recipeqa", adversarial=True)
    with pytest.raises(ValueError, match="af-rounds"):
        settings_for("visual_cloze", (0, 1, 0), adversarial=True, af_rounds=0)
    every = settings_for(all_settings=True)
    af = [(t, p) for t, p in every if p.af_rounds]
    assert len(every) == 44 + len(af) and len(af) == 36
    assert {t for t, _ in af} == {"visual_cloze", "visual_coherence", "textual_cloze"}
    assert len(settings_for(all_settings=True, adversarial=False)) == 44


def test_cli_generate_adversarial_and_its_bad_input(paths, con, prefect_harness):
    from typer.testing import CliRunner

    from features.datasets.synthetic import build_world
    from flows.cli import app
    build_world(con, paths.lance, n_recipes=30, seed=2, dim=16, k=50)
    con.close()
    runner = CliRunner()
    for args, needle in ((["--task", "visual_ordering", "--knobs", "0,1,1", "--adversarial"], "knob 3 is not defined"),
                         (["--task", "visual_cloze", "--preset", "recipeqa", "--adversarial"], "adversarial filtering"),
                         (["--task", "visual_cloze", "--knobs", "0,1,0", "--af-rounds", "2"], "--af-rounds"),
                         (["--task", "visual_cloze", "--knobs", "0,1,0", "--adversarial", "--af-rounds", "0"],
                          "--af-rounds")):
        r = runner.invoke(app, ["generate", *args])
        assert r.exit_code == 2 and needle in r.output and "Traceback" not in r.output, (args, r.output)
    r = runner.invoke(app, ["generate", "--task", "visual_cloze", "--knobs", "0,1,0", "--adversarial"])
    assert r.exit_code == 0, r.output
    assert "vc-0-1-0-af-s0-" in r.output and "skipped {" in r.output     # the skip reasons are printed
    r = runner.invoke(app, ["datasets", "--format", "json"])
    assert [d["knobs"] for d in json.loads(r.output) if "-af-" in d["dataset_id"]] == ["0-1-0-af"]


def test_bias_report_labels_af_datasets_apart_from_the_paper_settings(world):
    from features.diagnostics.bias import knobs_label, list_datasets
    from features.diagnostics.report import is_paper_setting
    rows = {r["dataset_id"]: r for r in list_datasets(world["con"])}
    for did in world["af_ids"]:
        assert knobs_label(rows[did]).endswith("-af") and not is_paper_setting(rows[did])
        assert not knobs_label(rows[world["base_of"][did]]).endswith("-af")
    assert sum(is_paper_setting(r) for r in rows.values()) == 8 * 3 + 4


def test_af_report_rows_match_the_registered_datasets(world):
    from features.datasets.af_report import af_report
    rows = {r["dataset_id"]: r for r in af_report(world["con"], world["paths"].lance)}
    assert set(world["af_ids"]) <= set(rows)             # (another test adds seed-1 variants)
    assert all("-af-" in did for did in rows)
    for did in world["af_ids"]:
        r = rows[did]
        s = world["summaries"][did]
        assert r["af_questions"] == s["n_questions"] and r["kept_share"] == s["adversarial"]["kept_share"]
        assert r["probe_after"] == s["adversarial"]["probe_after"] and r["base_registered"]
        # kept of posable: the knob questions less those dropped for text twins alone
        assert r["twin_dropped"] == s["skips"].get("af_text_twin", 0)
        posable = s["adversarial"]["n_knob_questions"] - r["twin_dropped"]
        assert r["kept_of_posable"] == round(s["n_questions"] / posable, 4)
        assert r["kept_of_posable"] >= r["kept_share"]
        if r["task"] == "textual_cloze":
            assert "oracle_after" not in r
        else:
            assert 0.0 <= r["oracle_before"] <= 1.0 and 0.0 <= r["oracle_after"] <= 1.0
        if r["task"] == "visual_cloze":     # the world has step-body vectors: the slot rule reads them
            assert 0.0 <= r["slot_before"] <= 1.0 and 0.0 <= r["slot_after"] <= 1.0
        else:
            assert "slot_after" not in r


def test_a_members_fold_rows_are_cut_as_the_plain_index_cuts_them():
    """The adversary cuts each member's columns once and each fold's rows from them; every fold's
    training array must hold the values of `X[train][..., cols]` laid out as it lays them out (features
    outermost), since a model's float sums follow its input's layout. And the fitted models agree bit
    for bit."""
    from features.datasets.adversarial import _fold_rows, member_columns
    from features.diagnostics.question_only import QuestionOnlyModel
    rng = np.random.default_rng(2)
    X = rng.normal(size=(90, 4, 40)).astype(np.float32)
    y = rng.integers(0, 4, 90)
    for features in ("all", "distance", "choice_set", "sequence"):
        cols = member_columns(features, X.shape[-1], n_seq=8)
        Xt = np.ascontiguousarray(np.moveaxis(X[..., cols], -1, 0))
        for k in range(3):
            train = np.arange(90) % 3 != k
            want, got = X[train][..., cols], _fold_rows(Xt, train)
            assert got.shape == want.shape and got.strides == want.strides and got.tobytes() == want.tobytes()
            a = QuestionOnlyModel(C=1.0).fit(want, y[train])
            b = QuestionOnlyModel(C=1.0).fit(got, y[train])
            assert a.w.tobytes() == b.w.tobytes() and a.mu.tobytes() == b.mu.tobytes()


def test_the_adversary_sees_the_judges_features_including_the_set_level_cues():
    """Coherence: every candidate's 4-image set, as the adversary builds it, has exactly the learned
    probe's features (pair features, the distance probe's distance / gaps / rank within the set, the
    same of each image's spread among the four, and its cosines to the other three)."""
    from types import SimpleNamespace

    from features.datasets.adversarial import _coherence_build
    from features.diagnostics.question_only import (
        N_DISTANCE_FEATURES,
        N_ITEM_FEATURES,
        N_SET_FEATURES,
        others_similarity,
        task_features,
    )
    rng = np.random.default_rng(1)
    vecs = rng.normal(size=(30, 8)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    items = rng.choice(30, size=(5, 3))
    cand = rng.choice(30, size=(5, 6))
    X = _coherence_build(SimpleNamespace(vecs=vecs), items, cand)(np.arange(5)).reshape(5, 6, 4, -1)
    sets = [list(items[i]) + [int(cand[i, m])] for i in range(5) for m in range(6)]
    judge = task_features("visual_coherence", [[] for _ in sets], sets, vecs).reshape(5, 6, 4, -1)
    assert X.shape[-1] == 4 * 8 + N_SET_FEATURES
    np.testing.assert_allclose(X, judge, atol=1e-5)
    # the rank one-hots mark each set's farthest image and its most spread-out one: set-level cues
    # no pair feature carries
    i, m = np.arange(5)[:, None], np.arange(6)[None, :]
    dist0, spread0 = -N_SET_FEATURES, -N_SET_FEATURES + N_DISTANCE_FEATURES   # each block's value column
    far = np.argmax(X[..., dist0], axis=-1)
    assert (X[..., spread0 - 1][i, m, far] == 1).all()
    loner = np.argmax(X[..., spread0], axis=-1)
    assert (X[..., spread0 + N_DISTANCE_FEATURES - 1][i, m, loner] == 1).all()
    # the last block: each image's max / min / std cosine to the other three
    np.testing.assert_allclose(X[..., -N_ITEM_FEATURES:], others_similarity(vecs[np.array(sets)]).reshape(5, 6, 4, 3),
                               atol=1e-5)


def test_a_pooled_drop_keeps_every_question_the_linear_drop_keeps_and_skips_only_its_cap(world):
    """`af_pooled_drop` (the demo: `mrqa af-pool` drops instead) changes nothing but the cap: the same
    questions, byte for byte, plus those the linear ensemble's cap dropped; recorded as `drop: pooled`.
    Balanced mode still evens out the distance ranks."""
    from features.datasets.generate import Generator
    con, paths = world["con"], world["paths"]
    gen = Generator(con, ENC, paths.lance, af_pooled_drop=("visual_cloze", "visual_coherence", "no_such_task"))
    assert gen.af_pooled_drop == {"visual_cloze", "visual_coherence"}      # only tasks af-pool can drop for
    grew = 0
    for task, p in (AF_SETTINGS[1], AF_SETTINGS[4], AF_SETTINGS[5]):
        ds = gen.generate(task, p, 0)
        did = dataset_id(task, p, 0, ENC)
        linear = world["summaries"][did]
        assert ds.dataset_id == did and ds.af_drop == "pooled"
        assert ds.skips.get("af_predictable", 0) == 0
        capped = linear["skips"].get("af_predictable", 0)
        if p.k3_mode == "balanced":       # the rank rebalance trims again, after the (absent) cap
            assert ds.n_questions >= linear["n_questions"]
        else:
            assert ds.n_questions == linear["n_questions"] + capped
        grew += ds.n_questions - linear["n_questions"]
        tbl = pa.table(dict(ds.columns))
        mine = {q: (tuple(c), a) for q, c, a in zip(*(tbl.column(k).to_pylist()
                                                       for k in ("qid", "choice_list", "answer")))}
        theirs = {q: (tuple(c), a) for q, c, a in con.execute(
            "SELECT qid, choice_list, answer FROM questions WHERE dataset_id = ?", [did]).fetchall()}
        assert set(theirs) <= set(mine) and all(mine[q] == v for q, v in theirs.items())
        assert ds.prov["adversarial"]["drop"] == "pooled" and "drop" not in json.loads(con.execute(
            "SELECT provenance FROM questions WHERE dataset_id = ? LIMIT 1", [did]).fetchall()[0][0])["adversarial"]
        if p.k3_mode == "balanced":
            counts = np.bincount(np.asarray(ds.prov["n_closer"].to_pylist()), minlength=4)
            assert len(set(counts.tolist())) == 1, counts
    assert grew > 0                      # the cap dropped something on this world, and pooled keeps it
