"""Every invariant on every generated question of a sample run, checked from the EXPORTED Parquet
(questions + vectors), plus determinism and idempotence. One synthetic world per module."""
from __future__ import annotations

import json
from collections import Counter, defaultdict

import duckdb
import numpy as np
import pytest
from synthetic_home import synthetic_home

from features.datasets.export import export_parquet, export_recipeqa_json, tree_sha256
from features.datasets.generate import generate_datasets, generation_settings, settings_for
from features.datasets.knobs import KnobParams

ENC = "synthetic-enc-0001"
EXTRA = [("visual_cloze", KnobParams.preset_for("visual_cloze", 0, 1, 1, k3_mode="balanced")),
         ("visual_cloze", KnobParams.preset_for("visual_cloze", 0, 1, 1, k3_mode="all")),
         ("visual_coherence", KnobParams.preset_for("visual_coherence", 0, 1, 1, k3_mode="balanced")),
         ("textual_cloze", KnobParams.preset_for("textual_cloze", 0, 1, 1, k3_mode="balanced"))]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with synthetic_home(tmp_path_factory, "gen_home", n_recipes=70, seed=1, dim=24, k=100) as (home, paths, con):
        summaries = generate_datasets(con, generation_settings(balanced=False) + EXTRA, seed=0, encoder_id=ENC,
                                      lance_uri=paths.lance, progress=False)
        out = paths.exports / "all"
        ids = [s["dataset_id"] for s in summaries]
        exp = export_parquet(con, ids, out, with_vectors=True, lance_uri=paths.lance)
        q = duckdb.sql(f"SELECT * FROM read_parquet('{out}/questions/**/*.parquet', hive_partitioning=true)")
        cols = q.columns
        rows = [dict(zip(cols, r)) for r in q.fetchall()]
        for r in rows:
            r["prov"] = json.loads(r["provenance"])
        vec = {}
        for name in ("image_vectors", "text_vectors"):
            idc = "image_id" if name == "image_vectors" else "item_id"
            for i, v in duckdb.sql(f"SELECT {idc}, vector FROM '{out}/{name}.parquet'").fetchall():
                v = np.asarray(v, dtype=np.float64)
                vec[i] = v / np.linalg.norm(v)
        recipes = {r: s for r, s in duckdb.sql(f"SELECT recipe_id, split FROM '{out}/recipes.parquet'").fetchall()}
        yield {"con": con, "paths": paths, "summaries": {s["dataset_id"]: s for s in summaries}, "rows": rows,
               "vec": vec, "recipes": recipes, "export": exp, "ids": ids}


def _d(a, b):
    return 1.0 - float(a @ b) / (np.linalg.norm(a) * np.linalg.norm(b))


def assert_coherence_knob3(r: dict, vec: dict, coherent: list, f) -> None:
    """Knob 3 of a coherence question (row `r`, its coherent images, the foreign image's vector `f`):
    the paper's rule (the foreign image nearer the coherent images' mean than any two of them are to
    each other) or the balanced rank rule (the foreign image's leave-one-out distance rank)."""
    p = r["prov"]
    qmean = np.mean([vec[c] for c in coherent], axis=0)
    if p["k3_rule"] == "paper":
        pairs = [_d(vec[a], vec[b]) for j, a in enumerate(coherent) for b in coherent[j + 1:]]
        assert _d(qmean, f) < min(pairs) + 1e-6
    if p["k3_rule"] == "rank":
        allv = [vec[x] for x in r["question"]]
        loo = [_d(allv[j], np.sum([allv[i] for i in range(4) if i != j], axis=0)) for j in range(4)]
        assert sum(loo[j] > loo[r["answer"]] for j in range(4) if j != r["answer"]) == p["target_rank"]


def _by_dataset(world, pred=lambda r: True):
    out = defaultdict(list)
    for r in world["rows"]:
        if pred(r):
            out[r["dataset_id"]].append(r)
    return out


def test_all_settings_are_the_paper_grid_plus_balanced_and_af_variants():
    paper = generation_settings(balanced=False)
    full = generation_settings()
    assert len(paper) == 32 and len(full) == 44
    extra = [(t, p) for t, p in full if p.k3_mode == "balanced"]
    assert len(extra) == 12 and {t for t, _ in extra} == {"visual_cloze", "visual_coherence", "textual_cloze"}
    assert all(p.knob3 == 1 for _, p in extra)
    # `mrqa generate --all` (settings_for) adds the AF variant of every knob setting of the AF tasks
    every = settings_for(all_settings=True)
    af = [(t, p) for t, p in every if p.af_rounds]
    assert len(every) == 80 and len(af) == 36 and every[:44] == full
    assert {t for t, _ in af} == {"visual_cloze", "visual_coherence", "textual_cloze"}
    assert not any(p.preset for _, p in af)
    assert settings_for(all_settings=True, adversarial=False) == full


def test_every_setting_produced_questions(world):
    s = world["summaries"]
    assert len(s) == 32 + len(EXTRA)
    for did, summ in s.items():
        assert summ["n_questions"] > 0, did
    assert sum(x["n_questions"] for x in s.values()) == len(world["rows"])
    n_sql = world["con"].execute("SELECT count(*) FROM questions").fetchall()[0][0]
    assert n_sql == len(world["rows"])


def test_knob1_counts_and_no_reused_answer_step(world):
    elig_img = dict(world["con"].execute("""SELECT recipe_id, count(DISTINCT step_idx) FROM images
                     WHERE status = 'ok' AND step_idx >= 1 GROUP BY recipe_id""").fetchall())
    elig_txt = dict(world["con"].execute("""SELECT recipe_id, count(*) FROM steps
                     WHERE step_idx >= 1 AND trim(title) <> '' GROUP BY recipe_id""").fetchall())
    checked = 0
    for did, rows in _by_dataset(world, lambda r: r["preset"] is None).items():
        k1 = rows[0]["k1"]
        per_recipe = defaultdict(list)
        for r in rows:
            per_recipe[r["recipe_id"]].append(r)
        for rid, qs in per_recipe.items():
            n = (elig_txt if rows[0]["task"] == "textual_cloze" else elig_img)[rid]
            assert n >= 5
            assert len(qs) <= (n // 3 if k1 else n // 2), (did, rid)
            answers = [q["prov"]["answer_step"] for q in qs]
            assert len(set(answers)) == len(answers), (did, rid)
            removed = set()
            for q in sorted(qs, key=lambda q: int(q["qid"].rsplit("-q", 1)[1])):
                assert 0 not in q["question_step_ids"]
                assert not removed & set(q["question_step_ids"]), (did, rid)
                removed.add(q["prov"]["answer_step"])
                if k1:
                    assert q["prov"]["extra_removed_step"] in q["question_step_ids"]
                    removed.add(q["prov"]["extra_removed_step"])
                checked += 1
    assert checked > 500


def test_recipeqa_preset_reuses_steps_and_takes_far_distractors(world):
    reused = 0
    for _did, rows in _by_dataset(world, lambda r: r["preset"] == "recipeqa").items():
        per_recipe = defaultdict(list)
        for r in rows:
            per_recipe[r["recipe_id"]].extend(r["question_step_ids"])
        reused += sum(len(v) - len(set(v)) for v in per_recipe.values())
        for r in rows:
            if r["task"] in ("visual_cloze", "textual_cloze"):
                a = world["vec"][r["prov"]["answer_item"]]
                for d in r["prov"]["distractors"]:
                    assert _d(a, world["vec"][d["item"]]) > r["prov"]["d_k"] - 1e-6
    assert reused > 0


def _cloze_rows(world, pred=lambda r: True):
    return [r for r in world["rows"] if r["task"] in ("visual_cloze", "textual_cloze")
            and r["preset"] is None and pred(r)]


def test_cloze_shape_and_knob2_ball_from_exported_vectors(world):
    vec = world["vec"]
    rows = _cloze_rows(world)
    assert rows
    for r in rows:
        p = r["prov"]
        assert r["question"].count("@placeholder") == 1 and len(r["choice_list"]) == 4
        assert p["choice_items"][r["answer"]] == p["answer_item"]
        assert len(set(p["choice_items"])) == 4
        a = vec[p["answer_item"]]
        lo, hi = p["ball"]
        assert lo == pytest.approx(0.0 if p["ball_sd"][0] is None else p["m_d"] + p["ball_sd"][0] * p["s_d"], abs=2e-6)
        assert hi == pytest.approx(p["m_d"] + p["ball_sd"][1] * p["s_d"], abs=2e-6)
        for d in p["distractors"]:
            dist = _d(a, vec[d["item"]])
            assert lo - 1e-5 < dist < hi + 1e-5, (r["qid"], dist, lo, hi)
            assert dist == pytest.approx(d["distance"], abs=1e-5)


def test_knob2_statistics_recomputed_from_neighbours_and_vectors(world):
    con, vec = world["con"], world["vec"]
    rows = [r for r in _cloze_rows(world) if r["task"] == "visual_cloze"][:60]
    for r in rows:
        p = r["prov"]
        nb = [n for n, in con.execute("SELECT neighbour_id FROM neighbours WHERE encoder_id = ? AND "
                                      "image_id = ? AND rank <= ? ORDER BY rank",
                                      [ENC, p["answer_item"], p["k"]]).fetchall()]
        d = np.array([_d(vec[p["answer_item"]], vec[n]) for n in nb])
        assert d.mean() == pytest.approx(p["m_d"], abs=1e-5)
        assert d.std() == pytest.approx(p["s_d"], abs=1e-5)
        # exact KNN from the exported vectors: the neighbour list really holds the nearest images
        same = [i for i, (rid, s) in _image_meta(world).items()
                if s == r["split"] and rid != r["recipe_id"]]
        allds = sorted(_d(vec[p["answer_item"]], vec[i]) for i in same)[:len(nb)]
        assert np.allclose(sorted(d), allds, atol=1e-5)


def _image_meta(world):
    if "meta" not in world:
        world["meta"] = {i: (r, s) for i, r, s in world["con"].execute(
            "SELECT i.image_id, i.recipe_id, r.split FROM images i JOIN recipes r USING (recipe_id) "
            "WHERE i.status = 'ok'").fetchall()}
    return world["meta"]


def test_knob3_closer_distractors_on_flagged_questions(world):
    vec = world["vec"]
    flagged = 0
    for r in _cloze_rows(world):
        p = r["prov"]
        ctx = [it for j, it in enumerate(p["question_items"]) if j != p["placeholder_index"]]
        qmean = np.mean([vec[i] for i in ctx], axis=0)
        d_ans = _d(qmean, vec[p["answer_item"]])
        closer = sum(_d(qmean, vec[d["item"]]) < d_ans for d in p["distractors"])
        assert closer == p["n_closer"]
        if p["n_closer_required"]:
            flagged += 1
            assert closer >= p["n_closer_required"], r["qid"]
        if p["k3_mode"] == "balanced":
            assert closer == p["n_closer_required"]
        if p["k3_mode"] == "off":
            assert p["n_closer_required"] == 0
    assert flagged > 50


def test_knob3_coin_flags_about_half_and_balanced_is_uniform(world):
    coin = [r for r in _cloze_rows(world) if r["prov"]["k3_mode"] == "coin"]
    heads = np.mean([r["prov"]["k3_heads"] for r in coin])
    # kept questions: heads questions are skipped more often (they need a closer candidate)
    assert 0.15 < heads < 0.85
    bal = [r["prov"]["n_closer"] for r in _cloze_rows(world) if r["prov"]["k3_mode"] == "balanced"]
    counts = Counter(bal)
    assert set(counts) == {0, 1, 2, 3}, counts
    assert min(counts.values()) >= 0.08 * len(bal), counts


def test_distractors_same_split_other_recipes_and_splits_disjoint(world):
    recipes = world["recipes"]
    meta = _image_meta(world)
    split_of_recipe = {}
    for r in world["rows"]:
        assert recipes[r["recipe_id"]] == r["split"]
        assert split_of_recipe.setdefault(r["recipe_id"], r["split"]) == r["split"]
        p = r["prov"]
        others = []
        if r["task"] in ("visual_cloze", "textual_cloze"):
            others = [d["recipe_id"] for d in p["distractors"]]
            assert len(set(others)) == 3
        elif r["task"] == "visual_coherence":
            others = [p["foreign_recipe_id"]]
            assert meta[p["foreign_item"]][0] == p["foreign_recipe_id"]
        for o in others:
            assert o != r["recipe_id"] and recipes[o] == r["split"]


def test_answers_balanced_over_positions(world):
    for task in ("visual_cloze", "visual_coherence", "visual_ordering", "textual_cloze"):
        # knob variants share their questions' positions (same qid, same seed): count each once
        ans = [a for _, a in {(r["qid"], r["answer"]) for r in world["rows"] if r["task"] == task}]
        c = np.bincount(ans, minlength=4)
        expected = len(ans) / 4
        chi2 = ((c - expected) ** 2 / expected).sum()
        assert chi2 < 16.3, (task, c)          # p ~ 0.001 for 3 dof


def test_coherence_variants(world):
    con, vec = world["con"], world["vec"]
    rows = [r for r in world["rows"] if r["task"] == "visual_coherence"]
    assert rows
    for r in rows:
        p = r["prov"]
        assert r["question"] == r["choice_list"] and len(r["question"]) == 4
        assert r["question"][r["answer"]] == p["foreign_item"]
        coherent = [x for j, x in enumerate(r["question"]) if j != r["answer"]]
        assert coherent == p["question_items"] and len(r["question_step_ids"]) == 3
        f = vec[p["foreign_item"]]
        if p["rule"] != "ball":
            continue
        assert p["anchor_item"] in coherent
        assert p["ball"][0] - 1e-5 < _d(f, vec[p["anchor_item"]]) < p["ball"][1] + 1e-5
        # the anchor is the coherent image nearest to the foreign one among those whose k-neighbour
        # list holds it (a coherent image that does not list it may be nearer: lists are per image)
        d_anchor = _d(f, vec[p["anchor_item"]])
        assert d_anchor == pytest.approx(p["distance"], abs=1e-5)
        listing = [c for c in coherent if con.execute(
            "SELECT count(*) FROM neighbours WHERE encoder_id = ? AND image_id = ? AND neighbour_id = ? "
            "AND rank <= ?", [ENC, c, p["foreign_item"], p["k"]]).fetchall()[0][0]]
        assert p["anchor_item"] in listing
        assert d_anchor == pytest.approx(min(_d(f, vec[c]) for c in listing), abs=1e-5)
        assert_coherence_knob3(r, vec, coherent, f)
    bal = Counter(r["prov"]["foreign_rank"] for r in rows if r["prov"].get("k3_rule") == "rank")
    assert len(bal) >= 3, bal


def test_ordering_variants_and_measured_direction(world):
    vec = world["vec"]
    mean_wrong = {}
    for _did, rows in _by_dataset(world, lambda r: r["task"] == "visual_ordering").items():
        sums = []
        for r in rows:
            choices = [json.loads(c) for c in r["choice_list"]]
            items = r["prov"]["question_items"]
            assert all(sorted(c) == sorted(items) for c in choices)
            assert len({tuple(c) for c in choices}) == 4
            assert choices[r["answer"]] == items            # the recipe order
            for j, c in enumerate(choices):
                s = sum(_d(vec[a], vec[b]) for a, b in zip(c, c[1:]))
                assert s == pytest.approx(r["prov"]["choice_summed_distance"][j], abs=1e-5)
                if j != r["answer"]:
                    sums.append(s)
        if rows[0]["preset"] is None:
            mean_wrong[(rows[0]["k1"], rows[0]["k2"])] = np.mean(sums)
    # k2=1 weights wrong orderings by their summed distance: they jump more (easier to reject)
    for k1 in (0, 1):
        assert mean_wrong[(k1, 1)] > mean_wrong[(k1, 0)]


def test_skips_are_counted_and_stored(world):
    con = world["con"]
    for did, s in world["summaries"].items():
        stored = dict(con.execute("SELECT reason, n_skipped FROM generation_skips WHERE dataset_id = ?",
                                  [did]).fetchall())
        assert stored == s["skips"]
        params = json.loads(con.execute("SELECT params FROM datasets WHERE dataset_id = ?", [did]).fetchall()[0][0])
        assert params["skips"] == s["skips"]
    assert any("too_few_closer_candidates" in s["skips"] for s in world["summaries"].values())


def test_sql_data_tests_pass(world):
    from etl.warehouse import run_sql_tests
    assert {k: v for k, v in run_sql_tests(world["con"]).items() if v} == {}


def test_determinism_idempotence_and_seed(world, tmp_path):
    con, paths = world["con"], world["paths"]
    setting = [("visual_cloze", KnobParams.preset_for("visual_cloze", 0, 1, 1)),
               ("visual_coherence", KnobParams.preset_for("visual_coherence", 1, 1, 1))]
    first = generate_datasets(con, setting, seed=0, encoder_id=ENC, lance_uri=paths.lance, progress=False)
    ids = [s["dataset_id"] for s in first]
    h1 = export_parquet(con, ids, tmp_path / "a", with_vectors=True, lance_uri=paths.lance)["sha256"]
    n_before = con.execute("SELECT count(*) FROM questions").fetchall()[0][0]
    again = generate_datasets(con, setting, seed=0, encoder_id=ENC, lance_uri=paths.lance, progress=False)
    assert con.execute("SELECT count(*) FROM questions").fetchall()[0][0] == n_before   # replaced
    assert [s["content_sha256"] for s in again] == [s["content_sha256"] for s in first]
    assert [s["content_sha256"] for s in first] == [world["summaries"][i]["content_sha256"] for i in ids]
    h2 = export_parquet(con, ids, tmp_path / "b", with_vectors=True, lance_uri=paths.lance)["sha256"]
    assert h1 == h2 == tree_sha256(tmp_path / "a")
    other = generate_datasets(con, setting, seed=1, encoder_id=ENC, lance_uri=paths.lance, progress=False)
    assert [s["dataset_id"] for s in other] != ids
    assert all(o["content_sha256"] != f["content_sha256"] for o, f in zip(other, first))
    parts = sorted(p.relative_to(tmp_path / "a").as_posix() for p in (tmp_path / "a").rglob("*.parquet"))
    assert "questions/task=visual_cloze/knobs=0-1-1/split=train/data_0.parquet" in parts
    # a setting without a knob-3 rule, generated alone, is the dataset `--all` made among the others
    # (the candidates' closeness is computed lazily and shared between the settings of one run)
    alone = generate_datasets(con, [("visual_cloze", KnobParams.preset_for("visual_cloze", 0, 1, 0))], seed=0,
                              encoder_id=ENC, lance_uri=paths.lance, progress=False)
    assert alone[0]["content_sha256"] == world["summaries"][alone[0]["dataset_id"]]["content_sha256"]


def test_recipeqa_json_export(world, tmp_path):
    con = world["con"]
    ids = [i for i in world["ids"] if i.startswith(("vc-0-1-0-s", "vord-0-0-0-s", "tc-0-0-0-s", "vcoh-0-0-0-s"))]
    res = export_recipeqa_json(con, ids, tmp_path, home=world["paths"].home, with_images=False)
    assert res["records"] and sorted(res["datasets"]) == sorted(ids)      # one folder per dataset
    keys = {"recipe_id", "task", "qid", "split", "context", "question", "choice_list", "answer",
            "question_text", "context_modality", "question_modality"}
    tasks = set()
    for did, split in ((d, s) for d in ids for s in res["datasets"][d]):
        data = json.loads((tmp_path / did / f"{split}.json").read_text())["data"]
        assert len(data) == res["datasets"][did][split]
        for rec in data:
            assert set(rec) == keys
            assert rec["qid"].startswith(did + ".") and isinstance(rec["question_text"], str)
            assert [c["id"] for c in rec["context"]][0] == 1      # RecipeQA's contexts start at step 1
            tasks.add(rec["task"])
            assert 0 <= rec["answer"] < len(rec["choice_list"])
            if rec["task"] == "visual_ordering":
                assert isinstance(rec["choice_list"][0], list)
            if rec["task"].startswith("visual"):
                for x in rec["choice_list"]:
                    for i in (x if isinstance(x, list) else [x]):
                        rid, step, k = i[:-4].rsplit("_", 2)
                        assert i.endswith(".jpg") and step.isdigit() and k.isdigit()
                assert "title" in rec["context"][0]
    assert tasks == {"visual_cloze", "visual_ordering", "textual_cloze", "visual_coherence"}


def test_threads_do_not_change_datasets(world):
    """The world was generated on the default thread count (the CPU count); one thread gives the
    same registered content hash for every dataset, in the same order."""
    settings = generation_settings(balanced=False)[:13] + EXTRA[:1]
    again = generate_datasets(world["con"], settings, seed=0, encoder_id=ENC,
                              lance_uri=world["paths"].lance, progress=False, workers=1)
    assert [s["dataset_id"] for s in again] == [s["dataset_id"] for s in world["summaries"].values()][:13] + [
        again[-1]["dataset_id"]]
    for s in again:
        assert s["content_sha256"] == world["summaries"][s["dataset_id"]]["content_sha256"], s["dataset_id"]


def test_the_whole_run_has_one_blas_thread_whatever_the_process_had(world):
    """AF's blocks hold the process-wide BLAS limit at one thread while they run; the inputs prepared
    and the datasets registered meanwhile must not be computed with a thread count that depends on
    the timing. The run holds one BLAS thread from start to end, on every thread (seen here from the
    registering one, after and between the AF blocks), and restores the process's own limit after."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from features.datasets.generate import register_dataset

    def blas() -> set[int]:
        return {m["num_threads"] for m in threadpool_info() if m["user_api"] == "blas"}
    seen = []

    def register(con, ds):
        seen.append(blas())
        return register_dataset(con, ds)
    settings = [("visual_cloze", KnobParams.preset_for("visual_cloze", 0, 1, 0)),
                ("textual_cloze", KnobParams.preset_for("textual_cloze", 0, 1, 0))]
    with threadpool_limits(2, user_api="blas"):
        assert blas() == {2}
        generate_datasets(world["con"], settings, seed=0, encoder_id=ENC, lance_uri=world["paths"].lance,
                          progress=False, workers=2, register=register)
        assert blas() == {2}
    assert seen == [{1}, {1}]


def test_register_refuses_a_repeated_qid_and_keeps_the_old_rows(world):
    """questions has no key constraint (sql/schema/091): the writer itself refuses duplicates."""
    import pyarrow as pa

    from features.datasets.generate import Generator, register_dataset
    con = world["con"]
    ds = Generator(con, ENC, world["paths"].lance).generate(
        "visual_cloze", KnobParams.preset_for("visual_cloze", 0, 1, 0), seed=0)
    before = con.execute("SELECT count(*), any_value(content_sha256) FROM questions JOIN datasets USING "
                         "(dataset_id) WHERE dataset_id = ?", [ds.dataset_id]).fetchall()[0]
    assert before[0] == ds.n_questions > 1
    qids = ds.columns["qid"].to_pylist()
    ds.columns["qid"] = pa.array([qids[0]] + qids[:-1], pa.string())
    with pytest.raises(ValueError, match="repeats a qid"):
        register_dataset(con, ds)
    after = con.execute("SELECT count(*), any_value(content_sha256) FROM questions JOIN datasets USING "
                        "(dataset_id) WHERE dataset_id = ?", [ds.dataset_id]).fetchall()[0]
    assert after == before


def test_regenerating_replaces_the_rows_kept_under_the_id_before_setting_names(world):
    """A warehouse written before setting names holds the dataset as vc-k011-s0-<enc>-p<hash> (balanced);
    generating the setting again registers vc-0-1-1-balanced-s0-<enc> with the same content hash and
    removes the old-named rows, so a setting is never listed twice."""
    from features.datasets.generate import Generator, register_dataset
    from features.datasets.knobs import dataset_id, legacy_dataset_id
    con = world["con"]
    params = KnobParams.preset_for("visual_cloze", 0, 1, 1, k3_mode="balanced")
    new_id, old_id = dataset_id("visual_cloze", params, 0, ENC), legacy_dataset_id("visual_cloze", params, 0, ENC)
    assert new_id.startswith("vc-0-1-1-balanced-s0-") and old_id.startswith("vc-k011-s0-") and old_id[-8:-6] == "-p"
    ds = Generator(con, ENC, world["paths"].lance).generate("visual_cloze", params, seed=0)
    assert ds.dataset_id == new_id
    ds.dataset_id = old_id                                      # as the generator named it before
    old = register_dataset(con, ds)
    ds.dataset_id = new_id
    new = register_dataset(con, ds)
    assert new["content_sha256"] == old["content_sha256"]
    counts = dict(con.execute("SELECT dataset_id, count(*) FROM questions WHERE dataset_id IN (?, ?) GROUP BY 1",
                              [old_id, new_id]).fetchall())
    assert counts == {new_id: ds.n_questions}
    assert con.execute("SELECT count(*) FROM datasets WHERE dataset_id = ?", [old_id]).fetchall()[0][0] == 0
    assert con.execute("SELECT setting, knob3, k3_mode FROM datasets WHERE dataset_id = ?",
                       [new_id]).fetchall()[0] == ("0-1-1-balanced", 1, "balanced")
