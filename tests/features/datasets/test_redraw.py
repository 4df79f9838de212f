"""`mrqa redraw` (features/datasets/redraw.py) on a real, small sample kitchen home: built, loaded, an encoder
trained and every photo embedded, the visual cloze AF setting 0-1-1-af generated; then its distractors drawn
again in each question's kitchen. Checked: the renderer gives a photo's own bytes back in its own kitchen with
its own jitter; every knob holds on the new photos' vectors; the answer and the question never change;
provenance names each photo's source and kitchen; the recipes' own stages never see the new photos;
determinism and idempotence; a home without the kitchen's ground truth is refused with the reason. Then the
same for visual coherence (features/datasets/redraw_coherence.py): 0-1-1-af's foreign photo and 0-0-0-matched-af's
drawn again, every rule recomputed on every question and alternate."""
from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import replace

import numpy as np
import pytest
from typer.testing import CliRunner

from etl.config import Paths
from etl.records import is_redrawn_image
from etl.warehouse import connect
from features.datasets.knobs import AF_DEFAULT_ROUNDS, KnobParams, parse_setting
from features.datasets.redraw import NO_TRUTH, SKIP_OUTSIDE, choose, read_truth, redraw
from features.vectors.store import FeatureStore

SETTING = "0-1-1-af"
SAMPLE = "n60-seed5"


def _generate(con, enc: str, lance: str) -> dict:
    from features.datasets.generate import generate_datasets
    p = replace(KnobParams.preset_for("visual_cloze", 0, 1, 1), af_rounds=AF_DEFAULT_ROUNDS)
    return generate_datasets(con, [("visual_cloze", p)], seed=0, encoder_id=enc, lance_uri=lance, progress=False)[0]


@pytest.fixture(scope="module")
def home(tmp_path_factory, prefect_harness):
    from sample_loader import load_sample

    from etl.sample.generate import build_sample
    from features.embed.train_encoder import TrainConfig, train_encoder
    from flows.embed import run_embed
    root = tmp_path_factory.mktemp("redraw") / "home"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MRQA_HOME", str(root))
        paths = Paths.from_env().ensure()
        sample = paths.home / "sample" / SAMPLE
        build_sample(sample, n_recipes=60, seed=5, workers=1, progress=False)
        con = connect(paths)
        load_sample(con, sample)
        enc = train_encoder(con, paths, TrainConfig(epochs=1, batch_size=32, image_size=32,
                                                    eval_max_pairs=20))["encoder_id"]
        con.close()
        run_embed(enc, k=100, num_workers=0, batch_size=64)
        con = connect(paths)
        source = _generate(con, enc, paths.lance)
        neighbours = con.execute("SELECT count(*), sum(hash(image_id || neighbour_id)) FROM neighbours").fetchall()
        first = redraw(con, SETTING, 0, paths=paths, progress=False)
        yield {"paths": paths, "con": con, "enc": enc, "source": source, "first": first, "sample": sample,
               "neighbours": neighbours, "mp": mp}
        con.close()


def _rows(con, did: str) -> dict:
    return {q: (r, s, list(qu), list(ch), a, json.loads(p)) for q, r, s, qu, ch, a, p in con.execute(
        "SELECT qid, recipe_id, split, question, choice_list, answer, provenance FROM questions "
        "WHERE dataset_id = ? ORDER BY qid", [did]).fetchall()}


def test_a_photo_drawn_again_in_its_own_kitchen_with_its_own_jitter_is_its_own_bytes(home):
    truth = read_truth(home["sample"])
    site = home["sample"] / "site"
    checked = 0
    for line in (home["sample"] / "ground_truth.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["recipe_id"] not in truth.recipes:
            continue
        for s in rec["steps"]:
            for im in s["images"]:
                if im["expected"] != "ok" or checked >= 150:
                    continue
                got = truth.renderer(rec["recipe_id"]).render(im["depicts"])
                assert got == (site / im["url_path"].lstrip("/")).read_bytes(), im["image_id"]
                checked += 1
    assert checked == 150


def test_every_knob_holds_on_the_redrawn_photos_and_the_answer_never_changes(home):
    con, first = home["con"], home["first"]
    assert first["setting"] == "0-1-1-redrawn-af" and first["dataset_id"].startswith("vc-0-1-1-redrawn-af-s0-")
    src, new = _rows(con, first["source_dataset_id"]), _rows(con, first["dataset_id"])
    assert 0 < len(new) <= len(src) and first["source_questions"] == len(src)
    assert first["n_questions"] + first["skips"][SKIP_OUTSIDE] == len(src)
    assert _check_knobs(home, src, new) > len(new)


def _check_knobs(home, src: dict, new: dict) -> int:
    """Assert every knob and provenance rule on the questions `new` (their source's `src`); returns how many
    redrawn photos they show."""
    con = home["con"]
    ids, mat = FeatureStore(home["paths"].lance).image_vectors(home["enc"])
    vec = dict(zip(ids, np.asarray(mat, dtype=np.float64)))
    photos = {i: (s, r, st, k, p, sha) for i, s, r, st, k, p, sha in con.execute(
        "SELECT image_id, source_image_id, recipe_id, step_idx, kitchen_recipe_id, path, sha256 FROM redrawn_images"
    ).fetchall()}
    split_of = dict(con.execute("SELECT recipe_id, split FROM recipes").fetchall())
    redrawn_shown, neighbours = 0, {}

    def d(a, b):
        return 1.0 - float(a @ b) / (np.linalg.norm(a) * np.linalg.norm(b))

    for qid, (rid, split, question, choices, answer, p) in new.items():
        s_rid, s_split, s_question, s_choices, s_answer, s_p = src[qid]
        # the question and the answer are the source's, untouched
        assert (rid, split, question, answer) == (s_rid, s_split, s_question, s_answer)
        assert choices[answer] == s_choices[answer] == p["answer_item"]
        assert len(set(choices)) == 4 and p["choice_items"] == choices
        a = vec[p["answer_item"]]
        ctx = [vec[i] for j, i in enumerate(p["question_items"]) if j != p["placeholder_index"]]
        qm = np.mean([v / np.linalg.norm(v) for v in ctx], axis=0)
        d_aq = d(a, qm)
        # knob 2's ball, measured again in the question's kitchen: its sample is the answer's neighbours there
        nd = np.array([d(a, vec[i]) for i in p["ball_sample"]])
        assert len(nd) >= 8 and nd.mean() == pytest.approx(p["m_d"], abs=1e-5)
        assert nd.std() == pytest.approx(p["s_d"], abs=1e-5)
        knn = neighbours.setdefault(p["answer_item"], {n for (n,) in con.execute(
            "SELECT neighbour_id FROM neighbours WHERE encoder_id = ? AND image_id = ? AND rank <= ?",
            [home["enc"], p["answer_item"], p["k"]]).fetchall()})
        for i in p["ball_sample"]:
            assert photos[i][3] == rid and photos[i][0] in knn
        lo, hi = p["ball"]
        assert lo == pytest.approx(0.0 if p["ball_sd"][0] is None else p["m_d"] + p["ball_sd"][0] * p["s_d"], abs=2e-6)
        assert hi == pytest.approx(p["m_d"] + p["ball_sd"][1] * p["s_d"], abs=2e-6)
        assert p["source_ball"]["ball"] == s_p["ball"]
        closer = 0
        for col, dis in zip([c for c in range(4) if c != answer], p["distractors"]):
            item = choices[col]
            assert dis["item"] == item
            dist = d(a, vec[item])
            assert lo - 1e-5 < dist < hi + 1e-5, (qid, item, dist, lo, hi)          # knob 2 on the new photo
            assert dist == pytest.approx(dis["distance"], abs=1e-5)
            assert (d(qm, vec[item]) < d_aq) == dis["closer"]
            closer += dis["closer"]
            source = dis["source"]
            if is_redrawn_image(item):
                redrawn_shown += 1
                s_img, s_rec, s_step, kitchen, path, sha = photos[item]
                assert source == s_img and kitchen == rid and s_rec == dis["recipe_id"]
                assert hashlib.sha256((home["paths"].home / path).read_bytes()).hexdigest() == sha
            else:                                                      # a photo of the question's own recipe
                assert source is None and dis["recipe_id"] == rid
                s_rec, s_step = rid, int(item.rsplit("_", 2)[1])
            assert (s_rec, s_step) != (rid, p["answer_step"])          # never the answer's own step
            assert s_rec == rid or split_of[s_rec] == split            # another recipe of the split, or its own
        assert p["redrawn"]["kitchen_recipe_id"] == rid
        assert closer == p["n_closer"] >= (p["n_closer_required"] or 0)  # knob 3
        for alt in p["af_alternates"]:                                  # what a swap may take keeps knob 2 too
            assert lo - 1e-5 < d(a, vec[alt["item"]]) < hi + 1e-5
    return redrawn_shown


def test_the_recipes_own_stages_never_see_the_redrawn_photos(home):
    con, paths = home["con"], home["paths"]
    n_red = con.execute("SELECT count(*) FROM redrawn_images").fetchone()[0]
    assert n_red > 0
    assert con.execute("SELECT count(*) FROM images WHERE image_id IN (SELECT image_id FROM redrawn_images)"
                       ).fetchone()[0] == 0
    store = FeatureStore(paths.lance)
    own = store.image_rows(home["enc"])["id"].to_pylist()
    assert not any(is_redrawn_image(i) for i in own)
    assert len(store.image_vectors(home["enc"])[0]) == len(own) + n_red
    assert len(store.image_vectors(home["enc"], redrawn=False)[0]) == len(own)
    from features.diagnostics.background_cue import background_cue, encoder_cue
    from features.diagnostics.bias import VectorLookup
    ids, mat = store.image_vectors(home["enc"], redrawn=False)          # the background cue: own photos only
    mat = np.asarray(mat, dtype=np.float32)
    alone = background_cue(con, ids, mat / np.linalg.norm(mat, axis=1, keepdims=True), "encoder", home["enc"])
    for lookup in (None, VectorLookup(paths.lance, home["enc"], "image")):
        assert encoder_cue(con, paths.lance, home["enc"], lookup).as_row() == alone.as_row()
    again = _generate(con, home["enc"], paths.lance)                    # the generator's space: own photos only
    assert again["content_sha256"] == home["source"]["content_sha256"]
    assert con.execute("SELECT count(*), sum(hash(image_id || neighbour_id)) FROM neighbours").fetchall() == \
        home["neighbours"]


def test_the_redrawn_photos_table_is_read_by_id_and_keeps_no_ann_index(home):
    """The redrawn photos' vectors are read by id, never searched by vector: finish_writes builds no ANN index on
    their table and drops one an older version built (optimizing it cost time on each redraw), and the vectors
    read back are the same; the scalar indexes stay."""
    from features.vectors.store import REDRAWN_TABLE
    store = FeatureStore(home["paths"].lance)
    tbl = store.find_table(REDRAWN_TABLE, home["enc"])
    ids = sorted(store.keys(REDRAWN_TABLE, home["enc"]))
    got, before = store.image_vectors(home["enc"], ids=ids)
    assert got == ids
    store.ensure_indexes(tbl, force_ann=True)                 # as an older version built it
    assert any(ix.columns[0] == "vector" for ix in tbl.list_indices())
    store.finish_writes(REDRAWN_TABLE, home["enc"])
    tbl = store.find_table(REDRAWN_TABLE, home["enc"])
    assert {ix.columns[0] for ix in tbl.list_indices()} == {"split", "encoder_id", "recipe_id", "id"}
    again, after = store.image_vectors(home["enc"], ids=ids)
    assert again == ids and np.array_equal(before, after)


def test_redraw_is_deterministic_and_idempotent(home):
    con, paths, first = home["con"], home["paths"], home["first"]
    victim = con.execute("SELECT path, sha256 FROM redrawn_images ORDER BY image_id LIMIT 1").fetchone()
    (paths.home / victim[0]).unlink()                        # a lost file is drawn again, byte for byte
    again = redraw(con, SETTING, 0, paths=paths, progress=False)
    assert again["content_sha256"] == first["content_sha256"] and again["dataset_id"] == first["dataset_id"]
    assert again["photos_drawn"] == 1 and again["photos_embedded"] == 0
    assert hashlib.sha256((paths.home / victim[0]).read_bytes()).hexdigest() == victim[1]
    other = redraw(con, SETTING, 0, paths=paths, progress=False)
    assert other["photos_drawn"] == 0 and other["content_sha256"] == first["content_sha256"]


def test_the_look_space_projects_redrawn_photos_on_the_own_photos_axes(home):
    from features.diagnostics.look_probe import look_space
    con, paths = home["con"], home["paths"]
    space = look_space(con, paths.home, progress=False)
    assert space.own is not None and (~space.own).sum() == con.execute(
        "SELECT count(*) FROM redrawn_images").fetchone()[0]
    tmp = paths.home / "no-redrawn.duckdb"
    con.execute(f"ATTACH '{tmp}' AS plain")                 # the same photos without the redrawn ones
    try:
        con.execute("CREATE TABLE plain.images AS SELECT * FROM images")
        con.execute("USE plain")
        alone = look_space(con, paths.home, progress=False)
    finally:
        con.execute("USE warehouse")
        con.execute("DETACH plain")
    keep = [space.index[i] for i in alone.ids]
    np.testing.assert_allclose(space.mat[keep], alone.mat, atol=1e-5)     # own photos' rows as without them


def test_a_home_without_the_kitchens_ground_truth_is_refused_with_the_reason(home):
    con, paths, sample = home["con"], home["paths"], home["sample"]
    away = sample.parent.parent / "sample-away"          # out of MRQA_HOME/sample/
    shutil.move(sample, away)
    try:
        with pytest.raises(ValueError, match="segmentation and inpainting") as e:
            redraw(con, SETTING, 0, paths=paths, progress=False)
        assert NO_TRUTH in str(e.value)
        from flows.cli import app
        con.close()
        r = CliRunner().invoke(app, ["redraw", "--knobs", SETTING])
        assert r.exit_code != 0 and "ground truth" in r.output, r.output
        r = CliRunner().invoke(app, ["redraw", "--knobs", "0-1-1"])
        assert r.exit_code != 0 and "AF setting" in r.output, r.output
    finally:
        shutil.move(away, sample)
        home["con"] = connect(paths)
    with pytest.raises(ValueError, match="mrqa redraw"):
        parse_setting("0-1-1-redrawn-af").params("visual_cloze").validate("textual_cloze")
    from features.datasets.generate import settings_for
    with pytest.raises(ValueError, match="`mrqa generate` does not draw photos"):
        settings_for("visual_cloze", "0-1-1-redrawn-af")
    with pytest.raises(ValueError, match="mrqa redraw"):
        parse_setting("0-1-1-redrawn")


def test_ball_candidates_add_the_samples_photos_inside_the_ball_and_every_rule_holds_on_them(home):
    """`ball_candidates`: the ball sample's own photos inside the ball stand as distractors after the source's
    candidates. Every knob holds as before; each such distractor is one of the ball sample's photos, of another
    recipe than the question's and its other distractors', no intro, no text twin of the answer's step, and the
    answer step's text is nearer the answer photo than it; a question the source's candidates kept keeps its
    choices; the count is recorded. Then the plain redraw is made again (the home's other tests read it)."""
    from features.datasets.redraw import SAMPLE_POOL, read_truth
    from features.datasets.twins import StepWords
    con, paths, first = home["con"], home["paths"], home["first"]
    try:
        out = redraw(con, SETTING, 0, paths=paths, progress=False, ball_candidates=True)
        assert out["dataset_id"] == first["dataset_id"] and out["photos_ball_candidates"] is True
        src, new = _rows(con, first["source_dataset_id"]), _rows(con, out["dataset_id"])
        _check_knobs(home, src, new)
        truth, words = read_truth(home["sample"]), StepWords.from_warehouse(con)
        ids, mat = FeatureStore(paths.lance).image_vectors(home["enc"])
        vec = {i: v / np.linalg.norm(v) for i, v in zip(ids, np.asarray(mat, dtype=np.float64))}
        tids, tmat = FeatureStore(paths.lance).text_vectors(home["enc"], "body")
        text = {i: v / np.linalg.norm(v) for i, v in zip(tids, np.asarray(tmat, dtype=np.float64))}
        photo_src = dict(con.execute("SELECT image_id, source_image_id FROM redrawn_images").fetchall())
        n_sample = 0
        for rid, _split, _question, _choices, answer, p in new.values():
            recipes = [d["recipe_id"] for d in p["distractors"]]
            for col, d in zip([c for c in range(4) if c != answer], p["distractors"]):
                if p["af_pools"][col] != SAMPLE_POOL:
                    continue
                n_sample += 1
                assert d["item"] in p["ball_sample"] and photo_src[d["item"]] == d["source"]
                s_rec, s_step, _ = truth.photos[d["source"]]
                assert s_rec == d["recipe_id"] != rid and recipes.count(s_rec) == 1 and s_step != 0
                a_rec, a_step, _ = truth.photos[p["answer_item"]]
                assert not words.twins(words.rows([a_rec], [a_step]), words.rows([s_rec], [s_step]))[0]
                t = text[f"{a_rec}_{a_step}_body"]
                assert float(t @ vec[d["item"]]) < float(t @ vec[p["answer_item"]])
        assert n_sample == out["photos_distractors_from_sample"] > 0
        assert out["n_questions"] >= first["n_questions"]
        params = json.loads(con.execute("SELECT params FROM datasets WHERE dataset_id = ?",
                                        [out["dataset_id"]]).fetchall()[0][0])
        assert params["redraw"]["ball_candidates"] is True
    finally:
        again = redraw(con, SETTING, 0, paths=paths, progress=False)
    assert again["content_sha256"] == first["content_sha256"] and "photos_ball_candidates" not in again
    plain_new = _rows(con, first["dataset_id"])
    kept = [q for q in plain_new if q in new]
    assert len(kept) == len(plain_new)                       # the sample's photos only add questions
    assert all(new[q][3] == plain_new[q][3] for q in kept)   # and those the source's candidates kept stay


def test_a_larger_candidate_sample_only_adds_questions_and_every_knob_holds_on_them(home):
    """`candidate_sample`: more of the answer's neighbours drawn in the question's kitchen as candidates, the
    first BALL_SAMPLE of them still measuring the ball. At knob 2 = 0 with knob 3 (0-0-1-af, where the redraw
    loses most questions: few photos lie in the ball's near tail) every question the default sample kept is kept
    with the same choices and the same ball, more are kept, every knob holds on them, each distractor from the
    sample is one of the answer's first `candidate_sample` neighbours by the sample's order, and the option is
    recorded (absent at the default, so the datasets made before stay byte for byte). Out-of-range values and
    the option outside its rule are refused."""
    from features.datasets.generate import generate_datasets, settings_for
    from features.datasets.redraw import BALL_SAMPLE, SAMPLE_POOL, ball_sample
    con, paths = home["con"], home["paths"]
    setting = "0-0-1-af"
    try:
        src_ds = generate_datasets(con, settings_for("visual_cloze", setting), seed=0, encoder_id=home["enc"],
                                   lance_uri=paths.lance, progress=False)[0]
        src = _rows(con, src_ds["dataset_id"])
        plain = redraw(con, setting, 0, paths=paths, progress=False)
        assert plain["photos_ball_candidates"] is True and "photos_candidate_sample" not in plain
        assert redraw(con, setting, 0, paths=paths, progress=False, candidate_sample=BALL_SAMPLE)[
            "content_sha256"] == plain["content_sha256"]
        few = _rows(con, plain["dataset_id"])
        n = 48
        more = redraw(con, setting, 0, paths=paths, progress=False, candidate_sample=n)
        assert more["dataset_id"] == plain["dataset_id"] and more["photos_candidate_sample"] == n
        new = _rows(con, more["dataset_id"])
        assert set(few) < set(new), (len(few), len(new))                    # only added, and some
        for q, r in few.items():
            assert new[q][3] == r[3]                                         # the same choices
            assert {k: new[q][5][k] for k in ("ball", "m_d", "s_d", "ball_sample")} == \
                {k: r[5][k] for k in ("ball", "m_d", "s_d", "ball_sample")}
        _check_knobs(home, src, new)
        photo_src = dict(con.execute("SELECT image_id, source_image_id FROM redrawn_images").fetchall())
        beyond = 0
        for qid, (_rid, _split, _question, _choices, answer, p) in new.items():
            knn = [i for (i,) in con.execute("SELECT neighbour_id FROM neighbours WHERE encoder_id = ? AND "
                                             "image_id = ? AND rank <= ?", [home["enc"], p["answer_item"],
                                                                           p["k"]]).fetchall()]
            first_n = ball_sample(knn, 0, qid, n)
            for col, d in zip([c for c in range(4) if c != answer], p["distractors"]):
                if p["af_pools"][col] == SAMPLE_POOL:
                    assert photo_src[d["item"]] == d["source"] and d["source"] in first_n
                    beyond += d["source"] not in first_n[:BALL_SAMPLE]
        assert beyond > 0                                  # the added questions stand on the larger sample
        params = json.loads(con.execute("SELECT params FROM datasets WHERE dataset_id = ?",
                                        [more["dataset_id"]]).fetchall()[0][0])
        assert params["redraw"]["candidate_sample"] == n
        for kw in ({"candidate_sample": BALL_SAMPLE - 1}, {"candidate_sample": n, "ball_candidates": False}):
            with pytest.raises(ValueError, match="candidate_sample"):
                redraw(con, setting, 0, paths=paths, progress=False, **kw)
        from flows.cli import app
        con.close()
        for args in (["--task", "visual_coherence", "--knobs", SETTING], ["--no-ball-candidates", "--knobs", setting]):
            r = CliRunner().invoke(app, ["redraw", "--candidate-sample", "48", *args])
            assert r.exit_code != 0 and "--candidate-sample is a visual_cloze rule" in r.output, r.output
    finally:
        home["con"] = con = connect(paths)
        for t in ("questions", "datasets", "generation_skips", "bias_metrics"):
            con.execute(f"DELETE FROM {t} WHERE dataset_id LIKE 'vc-0-0-1-%'")


def test_choose_keeps_valid_distractors_and_meets_knob_three():
    # candidates 0-2 are the source's distractors, the rest alternates in order
    assert choose([True, True, True, True], [False] * 4, 0, False) == [0, 1, 2]
    assert choose([True, False, True, True, True], [False] * 5, 0, False) == [0, 3, 2]
    assert choose([False, False, True, True], [False] * 4, 0, False) is None            # too few left
    # knob 3 asks for a closer one: the latest-chosen far one gives its slot
    assert choose([True, True, True, True, True], [False, False, False, False, True], 1, False) == [0, 1, 4]
    assert choose([True, True, True, True], [False] * 4, 1, False) is None
    # balanced: exactly `need` closer ones
    assert choose([True, True, True, True], [True, True, False, False], 1, True) == [0, 3, 2]
    assert choose([True, True, True], [True, True, False], 1, True) is None


def _pipeline_redrawn(home, monkeypatch, af_pooled_drop=(), items=None, **pool):
    """The pipeline's redrawn step (`flows.pipeline._redrawn`) on the test home with a small pooled step (the
    home's connection closed by the caller; `items`: its REDRAWN_ITEMS, none by default; `pool`: more of its
    pooled steps' arguments); returns its summary and the home's connection, opened again."""
    from flows import pipeline
    monkeypatch.setattr(pipeline, "REDRAWN_ITEMS", items or {})
    monkeypatch.setattr(pipeline, "REDRAWN_POOL", {**pipeline.REDRAWN_POOL, "size": "tiny", "folds": 2,
                                                   "adversaries": 1, "tree": False, **pool})
    try:
        out = pipeline._redrawn(home["paths"], {"seed": 0, "encoder_id": home["enc"]}, af_pooled_drop)
    finally:
        home["con"] = con = connect(home["paths"])
    return out, con


@pytest.mark.slow      # the pipeline's redrawn step with its pooled step, a swap round (~1 min)
def test_the_pipelines_redrawn_step_swaps_among_redrawn_photos_and_keeps_the_knobs(home, monkeypatch):
    """`mrqa demo/pipeline --redrawn`: the redrawn datasets, then their own pooled step: it keeps at least 40%
    of the plain setting's questions, its swaps take only photos drawn in the question's kitchen (or of its
    own recipe), and every knob still holds on what it kept. Without the flag the generate stage's parameters
    (its fingerprint) are what they were."""
    import inspect

    from features.datasets.generate import generate_datasets
    from flows import pipeline
    con, paths = home["con"], home["paths"]
    plain = generate_datasets(con, [("visual_cloze", KnobParams.preset_for("visual_cloze", 0, 1, 1))], seed=0,
                              encoder_id=home["enc"], lance_uri=paths.lance, progress=False)[0]
    con.close()
    monkeypatch.setattr(pipeline, "REDRAWN_SETTINGS", {"visual_cloze": (SETTING,)})
    # every question the adversary solves is aimed at another rank (solved share 0): on the small home the tiny
    # adversary reads the redrawn setting near chance (~30%), so at the default quarter its swap round may have
    # nothing to move, and this test is about where the swaps take their photos from
    out, con = _pipeline_redrawn(home, monkeypatch, solved_share=0.0)
    did = home["first"]["dataset_id"]
    assert out["skipped"] == {} and list(out["datasets"]) == [did]
    params = json.loads(con.execute("SELECT params FROM datasets WHERE dataset_id = ?", [did]).fetchone()[0])
    step = params["af_pooled"]
    assert step["distractors"] == "redrawn" and step["rounds"] == 1 and step["solved_share"] == 0.0
    n = out["datasets"][did]
    # the floor: 40% of the plain setting, or every question the redraw kept where it kept fewer (a property of
    # the small home's vectors, which a new release of a dependency moves)
    floor = int(np.ceil(0.4 * plain["n_questions"]))
    assert n >= min(floor, home["first"]["n_questions"]) and out["af_pool"]["visual_cloze"][did]["kept"] == n
    src, new = _rows(con, home["first"]["source_dataset_id"]), _rows(con, did)
    assert len(new) == n
    swaps = [s for r in new.values() for s in r[5].get("af_pooled_swaps", [])]
    assert swaps, "the swap rounds swapped nothing"
    for r in new.values():
        for sw in r[5].get("af_pooled_swaps", []):
            assert is_redrawn_image(sw["in"]) or sw["in"].startswith(r[0] + "_"), sw
    _check_knobs(home, src, new)
    defaults = {k: v.default for k, v in inspect.signature(pipeline.pipeline_flow.fn).parameters.items()}
    gen = {m: next(s for s in pipeline.build_stages({**defaults, "redrawn": m}, paths) if s.name == "generate")
           for m in (False, True)}
    assert "redrawn" not in gen[False].params
    assert gen[True].params["redrawn"]["settings"] == {"visual_cloze": [SETTING]}
    assert {k: v for k, v in gen[True].params.items() if k != "redrawn"} == gen[False].params
    redraw(con, SETTING, 0, paths=paths, progress=False)           # the dataset as the other tests expect it


@pytest.mark.slow      # four AF generations of the small home, a redraw and its pooled step (~1 min)
def test_the_pipelines_balanced_redrawn_setting_is_drawn_from_a_source_made_for_the_pooled_drop(home, monkeypatch):
    """A setting of REDRAWN_POOLED_SOURCES: the redrawn step generates it for the pooled drop, draws that
    again, then generates it with the stage's own drop again. The redrawn dataset records that source (its
    drop, its content hash, its question count); the stage's own dataset is, byte for byte, what it was."""
    from features.datasets.generate import generate_datasets, settings_for
    from flows import pipeline
    con, paths = home["con"], home["paths"]
    bal = "0-1-1-balanced-af"
    kw = {"seed": 0, "encoder_id": home["enc"], "lance_uri": paths.lance, "progress": False}
    pooled_src = generate_datasets(con, settings_for("visual_cloze", bal), af_pooled_drop=("visual_cloze",), **kw)[0]
    own = generate_datasets(con, settings_for("visual_cloze", bal), **kw)[0]
    assert pooled_src["dataset_id"] == own["dataset_id"] and pooled_src["n_questions"] > own["n_questions"]
    con.close()
    monkeypatch.setattr(pipeline, "REDRAWN_SETTINGS", {"visual_cloze": (bal,)})
    monkeypatch.setattr(pipeline, "REDRAWN_POOLED_SOURCES", {"visual_cloze": (bal,)})
    out, con = _pipeline_redrawn(home, monkeypatch)
    assert out["skipped"] == {} and out["pooled_sources"] == {"visual_cloze": [bal]}
    did = next(d for d in out["datasets"] if "-balanced-redrawn-af-" in d)
    params = json.loads(con.execute("SELECT params FROM datasets WHERE dataset_id = ?", [did]).fetchall()[0][0])
    assert params["adversarial"]["drop"] == "pooled"
    assert params["redraw"]["source_dataset_id"] == own["dataset_id"]
    assert params["redraw"]["source_content_sha256"] == pooled_src["content_sha256"]
    assert params["redraw"]["source_questions"] == pooled_src["n_questions"]
    sha, n, sp = con.execute("SELECT content_sha256, n_questions, params FROM datasets WHERE dataset_id = ?",
                             [own["dataset_id"]]).fetchall()[0]
    assert (sha, n) == (own["content_sha256"], own["n_questions"])
    assert "drop" not in json.loads(sp)["adversarial"]
    # a stage whose AF datasets were made for the pooled drop draws them as they are: no source made again
    con.close()
    again, con = _pipeline_redrawn(home, monkeypatch, ("visual_cloze",))
    assert again["pooled_sources"] == {}
    src = json.loads(con.execute("SELECT params FROM datasets WHERE dataset_id = ?",
                                 [next(iter(again["datasets"]))]).fetchall()[0][0])["redraw"]
    assert src["source_content_sha256"] == own["content_sha256"]
    redraw(con, SETTING, 0, paths=paths, progress=False)           # the dataset as the other tests expect it


@pytest.mark.slow      # three AF generations of 0-0-0, two redraws and two pooled steps on the small home (~2 min)
def test_the_pipelines_items_rule_settings_are_drawn_from_items_rule_sources_in_a_pooled_step_of_their_own(
        home, monkeypatch):
    """REDRAWN_ITEMS: after REDRAWN_SETTINGS' redraw and pooled step, the redrawn step generates 0-0-0-af for the
    pooled drop by AF's items twin rule, draws it again with 100 of the answer's neighbours as candidates, generates
    it again as the stage made it (byte for byte), and filters the redrawn dataset in a pooled step of its own (the
    minimax drop order, the centre rule's list in the drop), which leaves the dataset
    the first step filtered as it was. No distractor of what it keeps shows an item twin of the answer's step, and
    every knob holds."""
    from features.datasets.generate import generate_datasets, settings_for
    from flows import pipeline
    con, paths = home["con"], home["paths"]
    kw = {"seed": 0, "encoder_id": home["enc"], "lance_uri": paths.lance, "progress": False}
    try:
        items_src = generate_datasets(con, settings_for("visual_cloze", "0-0-0-af"), af_pooled_drop=("visual_cloze",),
                                      twin_rule="items", **kw)[0]
        src = _rows(con, items_src["dataset_id"])                     # the redraw's source, before it is made again
        own = generate_datasets(con, settings_for("visual_cloze", "0-0-0-af"), **kw)[0]
        con.close()
        monkeypatch.setattr(pipeline, "REDRAWN_SETTINGS", {"visual_cloze": (SETTING,)})
        out, con = _pipeline_redrawn(home, monkeypatch, items={"visual_cloze": ("0-0-0-af",)})
        assert out["skipped"] == {} and out["items_sources"] == {"visual_cloze": ["0-0-0-af"]}
        first, items = (list(out[k]["visual_cloze"]) for k in ("af_pool", "af_pool_items"))
        assert first == [home["first"]["dataset_id"]]
        assert len(items) == 1 and items[0].startswith("vc-0-0-0-redrawn-af-")
        did = items[0]
        params = {d: json.loads(p) for d, p in con.execute(
            "SELECT dataset_id, params FROM datasets WHERE list_contains(?, dataset_id)", [first + items]).fetchall()}
        assert params[did]["adversarial"]["twin_rule"] == "items" and params[did]["adversarial"]["drop"] == "pooled"
        assert params[did]["redraw"]["source_content_sha256"] == items_src["content_sha256"]
        assert params[did]["af_pooled"]["drop_order"].startswith("the list whose adversary")
        assert params[did]["af_pooled"]["rules"] == "centre" and not params[first[0]]["af_pooled"].get("rules")
        assert params[did]["redraw"]["candidate_sample"] == 100                  # REDRAWN_ITEMS_REDRAW
        assert "candidate_sample" not in params[first[0]]["redraw"]
        assert not params[first[0]]["af_pooled"]["drop_order"].startswith("the list whose adversary")
        assert "twin_rule" not in params[first[0]]["adversarial"]
        assert con.execute("SELECT content_sha256, n_questions FROM datasets WHERE dataset_id = ?",
                           [own["dataset_id"]]).fetchall()[0] == (own["content_sha256"], own["n_questions"])
        new = _rows(con, did)
        assert len(new) == out["datasets"][did] == out["af_pool_items"]["visual_cloze"][did]["kept"] > 0
        assert _check_knobs(home, src, new) > 0
        truth = read_truth(home["sample"])
        triples = _step_triples(truth)
        for _rid, _split, _question, choices, answer, pr in new.values():
            a_rec, a_step, _ = truth.photos[choices[answer]]
            for d in pr["distractors"]:                                 # as shown, after the swaps (_check_knobs)
                s_rec, s_step, _ = truth.photos[d["source"]] if d["source"] else truth.photos[d["item"]]
                assert not triples[(a_rec, a_step)] & triples[(s_rec, s_step)], (choices[answer], d)
    finally:
        for t in ("questions", "datasets", "generation_skips", "bias_metrics"):
            con.execute(f"DELETE FROM {t} WHERE dataset_id LIKE 'vc-0-0-0-%'")
        redraw(con, SETTING, 0, paths=paths, progress=False)       # the dataset as the other tests expect it


def test_the_pipelines_redrawn_step_on_a_home_without_ground_truth_skips_each_setting_with_the_reason(
        home, monkeypatch):
    """On a home without the sample kitchen's ground truth (a real site's photos) the redrawn step makes no
    dataset: each setting of REDRAWN_SETTINGS and REDRAWN_ITEMS is skipped with the reason, neither pooled step
    runs, no items-rule source is kept, and the stage's own AF dataset of an items setting, which the step
    generates for the pooled drop only where it can read the ground truth, is byte for byte what it was."""
    from features.datasets.generate import generate_datasets, settings_for
    from flows import pipeline
    con, paths, sample = home["con"], home["paths"], home["sample"]
    kw = {"seed": 0, "encoder_id": home["enc"], "lance_uri": paths.lance, "progress": False}
    own = generate_datasets(con, settings_for("visual_cloze", "0-0-0-af"), **kw)[0]
    did = home["first"]["dataset_id"]
    before = con.execute("SELECT dataset_id, content_sha256, n_questions FROM datasets ORDER BY 1").fetchall()
    con.close()
    away = sample.parent.parent / "sample-away"          # out of MRQA_HOME/sample/
    shutil.move(sample, away)
    try:
        monkeypatch.setattr(pipeline, "REDRAWN_SETTINGS", {"visual_cloze": (SETTING,)})
        out, con = _pipeline_redrawn(home, monkeypatch, items={"visual_cloze": ("0-0-0-af",)})
    finally:
        shutil.move(away, sample)
    try:
        assert out["datasets"] == {} and out["items_sources"] == {} and out["pooled_sources"] == {}
        assert set(out["skipped"]) == {f"visual_cloze {SETTING}", "visual_cloze 0-0-0-af"}, out["skipped"]
        assert "--twin-rule items" in out["skipped"]["visual_cloze 0-0-0-af"]
        assert "ground truth" in out["skipped"]["visual_cloze 0-0-0-af"]
        assert NO_TRUTH in out["skipped"][f"visual_cloze {SETTING}"]
        assert out["af_pool"] == out["af_pool_items"] == {"visual_cloze": {"skipped": "no redrawn datasets"}}
        after = con.execute("SELECT dataset_id, content_sha256, n_questions FROM datasets ORDER BY 1").fetchall()
        assert after == before                               # the redrawn dataset made before it too
        assert (own["dataset_id"], own["content_sha256"], own["n_questions"]) in after
        assert any(d == did for d, _, _ in after)
        assert not [d for d, _, _ in after if d.startswith("vc-0-0-0-redrawn-af-")]
    finally:
        for t in ("questions", "datasets", "generation_skips", "bias_metrics"):
            con.execute(f"DELETE FROM {t} WHERE dataset_id LIKE 'vc-0-0-0-%'")


# ----------------------------------------------------------------------------- visual coherence

@pytest.fixture(scope="module")
def coherence(home):
    """The visual coherence AF setting 0-1-1-af of the same home, and its foreign photos drawn again."""
    from features.datasets.generate import generate_datasets
    from features.datasets.redraw_coherence import redraw_coherence
    con, paths = home["con"], home["paths"]
    p = replace(KnobParams.preset_for("visual_coherence", 0, 1, 1), af_rounds=AF_DEFAULT_ROUNDS)
    source = generate_datasets(con, [("visual_coherence", p)], seed=0, encoder_id=home["enc"], lance_uri=paths.lance,
                               progress=False)[0]
    first = redraw_coherence(con, SETTING, 0, paths=paths, progress=False)
    m = replace(parse_setting("0-0-0-matched-af").params("visual_coherence"))
    matched_source = generate_datasets(con, [("visual_coherence", m)], seed=0, encoder_id=home["enc"],
                                       lance_uri=paths.lance, progress=False)[0]
    matched = redraw_coherence(con, "0-0-0-matched-af", 0, paths=paths, progress=False)
    return {"source": source, "first": first, "matched_source": matched_source, "matched": matched}


def _coherence_fields(shown: list[np.ndarray], c: np.ndarray) -> tuple[int, float, float, int, bool]:
    """A foreign photo's nearest shown photo, its distance, its distance to the shown photos' mean, its foreign
    rank and whether the photo farthest from the mean of the other three is it (computed here on its own)."""
    def cos(a, b):
        return float(a @ b) / (np.linalg.norm(a) * np.linalg.norm(b))
    four = [*shown, c]
    loo = [1.0 - cos(four[i], sum(four[j] for j in range(4) if j != i)) for i in range(4)]
    d3 = [1.0 - cos(s, c) for s in shown]
    near = int(np.argmin(d3))
    return near, d3[near], loo[3], sum(x > loo[3] for x in loo[:3]), int(np.argmax(loo)) == 3


def _check_coherence(home, src: dict, new: dict, items: bool = False, steps: bool = False) -> int:
    """Assert every knob and provenance rule on the redrawn coherence questions `new` (their source's `src`);
    with `steps`, the foreign-pool rule (each candidate shows what a held-out step of the recipe does, no text
    twin of a step of it, and the shown steps' texts tell it from the shown photos). Returns how many show a
    redrawn foreign photo."""
    con = home["con"]
    ids, mat = FeatureStore(home["paths"].lance).image_vectors(home["enc"])
    vec = {i: v / np.linalg.norm(v) for i, v in zip(ids, np.asarray(mat, dtype=np.float64))}
    photos = {i: (s, r, k, p, sha) for i, s, r, k, p, sha in con.execute(
        "SELECT image_id, source_image_id, recipe_id, kitchen_recipe_id, path, sha256 FROM redrawn_images").fetchall()}
    shown_redrawn, knn, truth = 0, {}, read_truth(home["sample"])
    for qid, (rid, split, question, choices, answer, p) in new.items():
        s_rid, s_split, s_question, s_choices, s_answer, s_p = src[qid]
        assert (rid, split, answer) == (s_rid, s_split, s_answer) and question == choices and len(set(choices)) == 4
        shown_ids = [c for j, c in enumerate(choices) if j != answer]
        assert shown_ids == p["question_items"] == [c for j, c in enumerate(s_choices) if j != s_answer]
        shown = [vec[i] for i in shown_ids]
        foreign = choices[answer]
        sources = {s_p["foreign_item"], *(a["item"] for a in s_p["af_alternates"])}
        entries = [{"item": foreign, "source": p["foreign_source"], "recipe_id": p["foreign_recipe_id"],
                    "anchor_item": p["anchor_item"], "distance": p["distance"], "dist_q": p["dist_q"],
                    "foreign_rank": p["foreign_rank"], "distance_probe_hit": p["distance_probe_hit"],
                    "items_share": p["items_share"], "items_shown_min": p["items_shown_min"],
                    **({"match_l1": p["match_l1"]} if "match_l1" in p else {}),
                    **({"step_match": p["step_match"]} if "step_match" in p else {})}, *p["af_alternates"]]
        if "match_bound" in p:          # matched: each photo's profile as near the reference's as the source's were
            ref = p["reference_item"]
            assert ref == s_p["reference_item"] and ref.startswith(rid + "_") and "ball" not in p
            assert p["match_bound"] == pytest.approx(max(_l1(shown, vec[i], vec[ref]) for i in sources), abs=1e-5)
            for e in entries:
                assert _l1(shown, vec[e["item"]], vec[ref]) == pytest.approx(e["match_l1"], abs=1e-5)
                assert e["match_l1"] <= p["match_bound"] + 1e-5
            lo, hi = 0.0, np.inf
        else:
            lo, hi = _coherence_ball(home, p, s_p, rid, shown_ids, vec, photos, knn)
        assert p["redrawn"]["kitchen_recipe_id"] == rid and p["foreign_item"] == foreign
        for e in entries:                      # the foreign photo, and every alternate a swap may take
            # never the odd one out by its ingredients alone (the steps' ground truth)
            names = [{it["name"] for it in truth.photos[i][2].get("items") or ()} for i in [*shown_ids, e["source"]]]
            share = [len(names[j] & set().union(*(names[k] for k in range(4) if k != j))) / max(len(names[j]), 1)
                     for j in range(4)]
            assert (e["items_share"], e["items_shown_min"]) == (pytest.approx(share[3], abs=1e-5),
                                                                pytest.approx(min(share[:3]), abs=1e-5))
            assert share[3] >= min(share[:3]) - 1e-9 or not items
            near, dist, dq, rank, hit = _coherence_fields(shown, vec[e["item"]])
            assert lo - 1e-5 < dist < hi + 1e-5, (qid, e["item"], dist, lo, hi)        # knob 2 on the new photo
            assert (shown_ids[near], dist, dq, rank) == (e["anchor_item"], pytest.approx(e["distance"], abs=1e-5),
                                                         pytest.approx(e["dist_q"], abs=1e-5), e["foreign_rank"])
            assert hit == e["distance_probe_hit"]
            if p["k3_rule"] == "paper":                                                 # knob 3
                assert dq < p["min_pair"] + 1e-6
            elif p["k3_rule"] == "rank":
                assert rank == p["target_rank"]
            assert e["recipe_id"] != rid and (e["source"] in sources or steps)
            if steps:
                _check_step_match(home, truth, rid, split, shown_ids, shown, e, vec[e["item"]])
            s_img, s_rec, kitchen, path, sha = photos[e["item"]]
            assert (s_img, s_rec, kitchen) == (e["source"], e["recipe_id"], rid)
            assert hashlib.sha256((home["paths"].home / path).read_bytes()).hexdigest() == sha
        shown_redrawn += is_redrawn_image(foreign)
    return shown_redrawn


def _check_step_match(home, truth, rid: str, split: str, shown_ids: list[str], shown: list[np.ndarray], e: dict,
                      c: np.ndarray) -> None:
    """A step-pool foreign photo: its source shows the kind and action of a held-out step of the recipe (as many
    of state, vessel and tool as recorded), of a recipe of the same split, no text twin of a step of the recipe,
    and every shown step's text is closer to its own photo than to it."""
    from features.datasets.twins import TWIN_JACCARD, StepWords
    con = home["con"]
    if "words" not in home:
        home["words"] = StepWords.from_warehouse(con)
        ids, mat = FeatureStore(home["paths"].lance).text_vectors(home["enc"], "body")
        home["body"] = {i: v / np.linalg.norm(v) for i, v in zip(ids, np.asarray(mat, dtype=np.float64))}
    src_rid, _, dep = truth.photos[e["source"]]
    held = e["step_match"]["step_idx"]
    shown_steps = {truth.photos[i][1] for i in shown_ids}
    assert held not in shown_steps
    own = [d for r, s, d in truth.photos.values() if r == rid and s == held]
    assert own and (dep["kind"], dep["action"]) == (own[0]["kind"], own[0]["action"])
    assert e["step_match"]["fields"] == sum(dep.get(k) == own[0].get(k) for k in ("state", "vessel", "tool"))
    assert con.execute("SELECT split FROM recipes WHERE recipe_id = ?", [src_rid]).fetchone()[0] == split
    words = home["words"]
    cand = words.rows([src_rid], [truth.photos[e["source"]][1]])
    assert (words.jaccard(cand, words.recipe_rows([rid])[0]) < TWIN_JACCARD).all()
    for v, i in zip(shown, shown_ids):
        t = home["body"][f"{rid}_{truth.photos[i][1]}_body"]
        assert float(c @ t) < float(v @ t)


def _l1(shown: list[np.ndarray], c: np.ndarray, ref: np.ndarray) -> float:
    """The L1 distance of photo c's sorted cosines to the shown photos from the reference's (computed here)."""
    v = np.stack(shown)
    return float(np.abs(np.sort(v @ c) - np.sort(v @ ref)).sum())


def _coherence_ball(home, p, s_p, rid, shown_ids, vec, photos, knn) -> tuple[float, float]:
    """Assert the ball of a redrawn coherence question (measured again in its kitchen on the shown photos'
    neighbours drawn there); returns it."""
    con = home["con"]
    nd = []
    for anchor, photo in p["ball_sample"]:
        assert anchor in shown_ids and photos[photo][2] == rid
        near = knn.setdefault(anchor, {n for (n,) in con.execute(
            "SELECT neighbour_id FROM neighbours WHERE encoder_id = ? AND image_id = ? AND rank <= ?",
            [home["enc"], anchor, p["k"]]).fetchall()})
        assert photos[photo][0] in near
        nd.append(1.0 - float(vec[anchor] @ vec[photo]))
    assert len(nd) >= 8 and np.mean(nd) == pytest.approx(p["m_d"], abs=1e-5)
    assert np.std(nd) == pytest.approx(p["s_d"], abs=1e-5)
    lo, hi = p["ball"]
    assert lo == pytest.approx(0.0 if p["ball_sd"][0] is None else p["m_d"] + p["ball_sd"][0] * p["s_d"], abs=2e-6)
    assert hi == pytest.approx(p["m_d"] + p["ball_sd"][1] * p["s_d"], abs=2e-6)
    assert p["source_ball"]["ball"] == s_p["ball"]
    return lo, hi


def test_coherence_every_knob_holds_on_the_redrawn_foreign_photo_and_the_shown_photos_never_change(home, coherence):
    con, first = home["con"], coherence["first"]
    assert first["setting"] == "0-1-1-redrawn-af" and first["dataset_id"].startswith("vcoh-0-1-1-redrawn-af-s0-")
    assert first["task"] == "visual_coherence" and first["source_dataset_id"] == coherence["source"]["dataset_id"]
    src, new = _rows(con, first["source_dataset_id"]), _rows(con, first["dataset_id"])
    assert 0 < len(new) <= len(src)
    assert first["n_questions"] + first["skips"][SKIP_OUTSIDE] + first["skips"]["redrawn_items_odd"] == len(src)
    assert _check_coherence(home, src, new) == len(new)
    hits = np.mean([r[5]["distance_probe_hit"] for r in new.values()])
    params = json.loads(con.execute("SELECT params FROM datasets WHERE dataset_id = ?",
                                    [first["dataset_id"]]).fetchone()[0])
    assert params["distance_probe_accuracy"] == round(hits, 4) and params["distractors"] == "redrawn"


def test_coherence_matched_redraw_keeps_the_match_to_the_recipes_own_reference_photo(home, coherence):
    con, m = home["con"], coherence["matched"]
    assert m["setting"] == "0-0-0-matched-redrawn-af" and m["dataset_id"].startswith("vcoh-0-0-0-matched-redrawn-af-")
    assert m["source_dataset_id"] == coherence["matched_source"]["dataset_id"]
    src, new = _rows(con, m["source_dataset_id"]), _rows(con, m["dataset_id"])
    assert 0 < len(new) <= len(src)
    assert m["n_questions"] + m["skips"][SKIP_OUTSIDE] + m["skips"]["redrawn_items_odd"] == len(src)
    assert _check_coherence(home, src, new) == len(new)
    for r in new.values():          # the best match in the question's kitchen, the alternates in its order
        ranks = [r[5]["match_l1"]] + [a["match_l1"] for a in r[5]["af_alternates"]]
        assert ranks == sorted(ranks)
    assert parse_setting("0-0-0-matched-redrawn-af").distractors == "matched-redrawn"
    with pytest.raises(ValueError, match="mrqa redraw"):
        parse_setting("0-1-0-matched-redrawn-af")


def test_coherence_items_rule_leaves_out_the_odd_one_by_its_ingredients(home, coherence):
    from features.datasets.redraw_coherence import SKIP_ITEMS, redraw_coherence
    con, paths, first = home["con"], home["paths"], coherence["first"]
    try:
        r = redraw_coherence(con, SETTING, 0, paths=paths, progress=False, items=True)
        assert r["dataset_id"] == first["dataset_id"] and r["photos_items_rule"] is True
        assert r["skips"][SKIP_ITEMS] > 0 and r["n_questions"] < first["n_questions"]
        _check_coherence(home, _rows(con, r["source_dataset_id"]), _rows(con, r["dataset_id"]), items=True)
    finally:
        redraw_coherence(con, SETTING, 0, paths=paths, progress=False)      # as the other tests expect it


def test_coherence_step_pool_shows_what_a_held_out_step_of_the_recipe_does(home, coherence):
    from features.datasets.redraw_coherence import SKIP_NO_STEP, redraw_coherence
    con, paths, first = home["con"], home["paths"], coherence["first"]
    try:
        r = redraw_coherence(con, SETTING, 0, paths=paths, progress=False, pool="steps")
        assert r["dataset_id"] == first["dataset_id"] and r["photos_foreign_pool"] == "steps"
        src, new = _rows(con, r["source_dataset_id"]), _rows(con, r["dataset_id"])
        assert 0 < len(new) and r["n_questions"] + sum(r["skips"].values()) == len(src)
        assert SKIP_NO_STEP in r["skips"]
        assert _check_coherence(home, src, new, steps=True) == len(new)
        assert all(q[5]["af_pools"][q[4]] == "step" for q in new.values())
        truth = read_truth(home["sample"])
        act = lambda i: truth.photos[i][2]["action"]
        for q in new.values():      # a swap keeps the foreign photo's action (the balance of the actions)
            assert all(act(a["source"]) == act(q[5]["foreign_source"]) for a in q[5]["af_alternates"])
        assert "redrawn_action_quota" in r["skips"]
        # the twin rule by the ground truth: no step of the recipe does the same to an item the photo shows
        it = redraw_coherence(con, SETTING, 0, paths=paths, progress=False, pool="steps", twin_rule="items")
        assert it["photos_twin_rule"] == "items" and it["n_questions"] > 0
        names = lambda d: {x["name"] for x in d.get("items") or ()}
        for q in _rows(con, it["dataset_id"]).values():
            rid, p = q[0], q[5]
            for e in [{"source": p["foreign_source"]}, *p["af_alternates"]]:
                d = truth.photos[e["source"]][2]
                assert not any((o["kind"], o["action"]) == (d["kind"], d["action"]) and names(o) & names(d)
                               for r, _, o in truth.photos.values() if r == rid)
        again = redraw_coherence(con, SETTING, 0, paths=paths, progress=False, pool="steps")
        assert _rows(con, again["dataset_id"]) == new
        # matched: the reference's step alone, the best match in the question's kitchen
        m = redraw_coherence(con, "0-0-0-matched-af", 0, paths=paths, progress=False, pool="steps")
        src, new = _rows(con, m["source_dataset_id"]), _rows(con, m["dataset_id"])
        assert 0 < len(new) and _check_coherence(home, src, new, steps=True) == len(new)
        for r in new.values():
            p = r[5]
            held = truth.photos[p["reference_item"]][1]
            assert {e["step_match"]["step_idx"] for e in [p, *p["af_alternates"]]} == {held}
            ranks = [p["match_l1"]] + [a["match_l1"] for a in p["af_alternates"]]
            assert ranks == sorted(ranks)
    finally:
        redraw_coherence(con, SETTING, 0, paths=paths, progress=False)      # as the other tests expect it
        redraw_coherence(con, "0-0-0-matched-af", 0, paths=paths, progress=False)


def test_coherence_redraw_is_deterministic_and_idempotent(home, coherence):
    from features.datasets.redraw_coherence import redraw_coherence
    con, paths, first = home["con"], home["paths"], coherence["first"]
    again = redraw_coherence(con, SETTING, 0, paths=paths, progress=False)
    assert again["content_sha256"] == first["content_sha256"] and again["dataset_id"] == first["dataset_id"]
    assert again["photos_drawn"] == again["photos_embedded"] == 0 and again["photos_photos"] == first["photos_photos"]
    from flows.cli import app
    con.close()
    try:
        r = CliRunner().invoke(app, ["redraw", "--task", "visual_ordering", "--knobs", SETTING])
        assert r.exit_code != 0 and "visual coherence foreign photos" in r.output, r.output
        r = CliRunner().invoke(app, ["redraw", "--items-rule", "--knobs", SETTING])
        assert r.exit_code != 0 and "--task visual_coherence" in r.output, r.output
        r = CliRunner().invoke(app, ["redraw", "--unremarkable", "--knobs", SETTING])
        assert r.exit_code != 0 and "--task visual_coherence" in r.output, r.output
        r = CliRunner().invoke(app, ["redraw", "--task", "visual_coherence", "--foreign-pool", "ball"])
        assert r.exit_code != 0 and "one of af, steps" in r.output, r.output
        r = CliRunner().invoke(app, ["redraw", "--task", "visual_coherence", "--twin-rule", "items"])
        assert r.exit_code != 0 and "--foreign-pool steps" in r.output, r.output
        r = CliRunner().invoke(app, ["redraw", "--task", "visual_coherence", "--knobs", "1-0-1-balanced-af"])
        assert r.exit_code != 0 and "mrqa generate --task visual_coherence" in r.output, r.output
        r = CliRunner().invoke(app, ["redraw", "--task", "visual_coherence", "--ball-candidates"])
        assert r.exit_code != 0 and "a visual_cloze rule" in r.output, r.output
    finally:
        home["con"] = connect(paths)


@pytest.mark.slow      # the pooled step on the redrawn coherence dataset, a swap round (~1 min)
def test_coherence_pooled_step_swaps_among_redrawn_photos_and_keeps_the_knobs(home, coherence):
    from features.datasets.redraw_coherence import redraw_coherence
    from flows import pipeline
    con, paths, did = home["con"], home["paths"], coherence["first"]["dataset_id"]
    con.close()
    try:
        out = pipeline._pooled_step("visual_coherence", 0, "redrawn coherence", distractors="redrawn",
                                    **{**pipeline.REDRAWN_POOL, "size": "tiny", "folds": 2, "adversaries": 1,
                                       "tree": False, "min_kept": 0.0, "tau": 0.9})
    finally:
        home["con"] = con = connect(paths)
    assert list(out) == [did], out
    src, new = _rows(con, coherence["first"]["source_dataset_id"]), _rows(con, did)
    swaps = [(r, s) for r in new.values() for s in r[5].get("af_pooled_swaps", [])]
    assert swaps, "the swap round swapped nothing"
    for r, sw in swaps:             # a foreign photo of the question's kitchen for another
        assert is_redrawn_image(sw["in"]) and is_redrawn_image(sw["out"]), sw
        assert sw["out"] in {x["item"] for x in r[5]["af_alternates"]} and r[3][r[4]] == r[5]["foreign_item"]
    _check_coherence(home, src, new)
    redraw_coherence(con, SETTING, 0, paths=paths, progress=False)     # as the other tests expect it


def test_the_step_pool_balances_the_foreign_photos_actions_to_the_shown_ones():
    """40 questions whose shown photos are half slicing, half serving; 30 can only take a slicing foreign
    photo, 10 either: the 10 take serving, and slicing keeps as many, rounded up (the rest dropped), so a model of which
    actions are foreign learns nothing; without the balance each takes its first valid candidate."""
    from types import SimpleNamespace

    from features.datasets.redraw_coherence import pick_foreign
    photos, pending = {}, []
    for k in range(40):
        shown = [f"r{k}_{j}.jpg" for j in range(3)]
        for j, i in enumerate(shown):
            photos[i] = (f"r{k}", j, {"action": ("slice", "serve")[(j + k) % 2]})
        acts = ("slice", "serve") if k < 10 else ("slice", "slice")
        out = []
        for m, a in enumerate(acts):
            photos[f"o{k}_{m}.jpg"] = (f"o{k}", m, {"action": a})
            out.append((f"n{k}_{m}.jpg", f"o{k}_{m}.jpg", "step", f"o{k}"))
        pending.append(((f"q{k}",), {"question_items": shown}, out, [{}, {}], [True, True], [True, True], {}))
    truth = SimpleNamespace(photos=photos)
    picks = pick_foreign(pending, truth, False, 0, balance=True)
    kept = [(k, p) for k, p in enumerate(picks) if p is not None]
    acts = [photos[pending[k][2][p][1]][2]["action"] for k, p in kept]
    assert sorted(acts) == ["serve"] * 10 + ["slice"] * 11
    assert all(photos[pending[k][2][p][1]][2]["action"] == "serve" for k, p in kept if k < 10)
    assert picks == pick_foreign(pending, truth, False, 0, balance=True)
    assert pick_foreign(pending, truth, False, 0, balance=False) == [0] * 40


def test_a_foreign_photo_is_remarkable_when_a_distance_rule_singles_it_out():
    """In the closest pair, nearest the others' mean, or farthest from it: remarkable; among the shown
    photos' own spread: not."""
    from features.datasets.redraw_coherence import remarkable

    def unit(*x):
        v = np.array(x, dtype=np.float64)
        return v / np.linalg.norm(v)
    shown = [unit(1, 0, 0, 0), unit(0, 1, 0, 0), unit(0, 0, 1, 0)]
    assert remarkable(shown, unit(1, 0.05, 0, 0))            # a near twin of a shown photo: the closest pair
    assert remarkable(shown, unit(1, 1, 1, 0))               # the centre of the three
    close = [unit(1, 0.4, 0.4, 0), unit(0.4, 1, 0.4, 0), unit(0.4, 0.4, 1, 0)]
    assert remarkable(close, unit(0, 0, 0, 1))               # far from all: the distance probe's pick
    # the shown photos spread unevenly (a close pair among them); the candidate sits like a fourth step
    shown = [unit(1, 0.3, 0, 0), unit(0.3, 1, 0, 0), unit(0, 0, 1, 0.2)]
    assert not remarkable(shown, unit(0.2, 0, 0.3, 1))


def _step_triples(truth) -> dict:
    """(recipe_id, step_idx) -> the (kind, action, item name) its photos show, read from the ground truth."""
    out: dict = {}
    for _iid, (rid, step, d) in truth.photos.items():
        out.setdefault((rid, int(step)), set()).update((d.get("kind"), d.get("action"), it["name"])
                                                       for it in d.get("items") or ())
    return out


def test_the_items_twin_rule_never_shows_an_item_twin_and_lets_other_items_of_the_action_in(home):
    """`mrqa generate --twin-rule items` (twins.ItemTwins): 0-0-0-af generated with the sample kitchen's ground
    truth as AF's twin rule. No distractor and no alternate shows the answer's kind and action done to an item of
    the same name (recomputed from the ground truth), every one lies in the knob-2 ball, yet some are text twins by
    the words rule (the rule is another one); the params record it, the words rule's params do not; it is
    deterministic; and its redraw (the ball sample's photos as candidates at knob 2 = 0) keeps every knob and takes
    no item twin from the sample either. Both datasets are removed after (the home's other tests read 0-1-1)."""
    from features.datasets.generate import generate_datasets
    from features.datasets.redraw import SAMPLE_POOL
    from features.datasets.twins import StepWords
    con, paths, enc = home["con"], home["paths"], home["enc"]
    p = replace(KnobParams.preset_for("visual_cloze", 0, 0, 0), af_rounds=AF_DEFAULT_ROUNDS)

    def gen(rule):
        return generate_datasets(con, [("visual_cloze", p)], seed=0, encoder_id=enc, lance_uri=paths.lance,
                                 progress=False, twin_rule=rule)[0]
    try:
        by_words = gen("words")
        words_params = json.loads(con.execute("SELECT params FROM datasets WHERE dataset_id = ?",
                                              [by_words["dataset_id"]]).fetchall()[0][0])
        out = gen("items")
        assert out["dataset_id"] == by_words["dataset_id"] and gen("items")["content_sha256"] == out["content_sha256"]
        params = json.loads(con.execute("SELECT params FROM datasets WHERE dataset_id = ?",
                                        [out["dataset_id"]]).fetchall()[0][0])
        assert params["adversarial"]["twin_rule"] == "items" and "twin_rule" not in words_params["adversarial"]
        truth, words = read_truth(home["sample"]), StepWords.from_warehouse(con)
        triples = _step_triples(truth)
        ids, mat = FeatureStore(paths.lance).image_vectors(enc)
        vec = {i: v / np.linalg.norm(v) for i, v in zip(ids, np.asarray(mat, dtype=np.float64))}
        src = _rows(con, out["dataset_id"])
        n_cand = n_words_twins = 0
        for _rid, _split, _question, choices, answer, pr in src.values():
            a_rec, a_step, _ = truth.photos[choices[answer]]
            lo, hi = pr["ball"]
            for item in [d["item"] for d in pr["distractors"]] + [a["item"] for a in pr["af_alternates"]]:
                c_rec, c_step, _ = truth.photos[item]
                n_cand += 1
                assert not triples[(a_rec, a_step)] & triples[(c_rec, c_step)], (choices[answer], item)
                assert lo - 1e-5 < 1.0 - float(vec[item] @ vec[choices[answer]]) < hi + 1e-5      # knob 2
                n_words_twins += bool(words.twins(words.rows([a_rec], [a_step]), words.rows([c_rec], [c_step]))[0])
        assert n_cand > 0 and n_words_twins > 0
        new = redraw(con, "0-0-0-af", 0, paths=paths, progress=False)
        new_rows = _rows(con, new["dataset_id"])
        assert new["n_questions"] > 0 and _check_knobs(home, src, new_rows) > 0
        n_sample = 0
        for _rid, _split, _question, choices, answer, pr in new_rows.values():
            a_rec, a_step, _ = truth.photos[choices[answer]]
            for col, d in zip([c for c in range(4) if c != answer], pr["distractors"]):
                s_rec, s_step, _ = truth.photos[d["source"]] if d["source"] else truth.photos[d["item"]]
                assert not triples[(a_rec, a_step)] & triples[(s_rec, s_step)]
                n_sample += pr["af_pools"][col] == SAMPLE_POOL
        assert n_sample == new["photos_distractors_from_sample"]
        assert json.loads(con.execute("SELECT params FROM datasets WHERE dataset_id = ?", [new["dataset_id"]]
                                      ).fetchall()[0][0])["adversarial"]["twin_rule"] == "items"
    finally:
        for t in ("questions", "datasets", "generation_skips", "bias_metrics"):
            con.execute(f"DELETE FROM {t} WHERE dataset_id LIKE 'vc-0-0-0-%'")


def test_the_items_twin_rule_is_refused_where_it_is_not_a_rule_of_the_run(home):
    """--twin-rule items only with a visual cloze AF setting of the ball, by the CLI before any work; an unknown rule
    by the generator."""
    from features.datasets.generate import Generator
    from flows.cli import app
    for args in (["--task", "visual_coherence", "--knobs", "0-0-0-af"], ["--task", "visual_cloze", "--knobs", "0-0-0"],
                 ["--task", "visual_cloze", "--knobs", "0-0-0-kitchen-af"], ["--all"]):
        res = CliRunner().invoke(app, ["--no-prefect", "--home", str(home["paths"].home), "generate", *args,
                                       "--twin-rule", "items"])
        assert res.exit_code != 0 and "--twin-rule items is a rule of AF's visual cloze" in res.output, args
    with pytest.raises(ValueError, match="--twin-rule item: one of words, items"):
        Generator(home["con"], home["enc"], twin_rule="item")
