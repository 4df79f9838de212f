"""Knob parameters, setting names (and the older spellings they normalise), dataset ids, deterministic
randomness and knob-1 skeleton sampling."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from features.datasets.knobs import (
    AF_DEFAULT_ROUNDS,
    KnobParams,
    Setting,
    dataset_id,
    legacy_dataset_id,
    parse_setting,
    previous_dataset_ids,
    recipe_rng,
    setting_kind,
    setting_name,
    uniforms,
)
from features.datasets.tasks import FAMILIES, recipe_skeletons


def test_presets_follow_the_paper():
    p = KnobParams.preset_for("visual_cloze", 0, 0, 0)
    assert (p.questions_per_step, p.extra_step_removal, p.ball_lo_sd, p.ball_hi_sd) == (0.5, False, None, -1.0)
    p = KnobParams.preset_for("visual_cloze", 1, 1, 1)
    assert p.questions_per_step == pytest.approx(1 / 3) and p.extra_step_removal
    assert (p.ball_lo_sd, p.ball_hi_sd, p.k3_mode, p.k3_prob) == (-1.0, 1.0, "coin", 0.5)
    assert KnobParams.preset_for("visual_ordering", 0, 1, 0).ordering_weight_power == 1.0
    q = KnobParams.recipeqa_preset()
    assert q.preset == "recipeqa" and not q.remove_answer_step and q.distractors == "random_far"


def test_invalid_settings_are_refused():
    with pytest.raises(ValueError, match="not defined for visual_ordering"):
        KnobParams.preset_for("visual_ordering", 0, 0, 1)
    with pytest.raises(ValueError):
        KnobParams.preset_for("visual_cloze", 2, 0, 0)
    with pytest.raises(ValueError):
        KnobParams.preset_for("visual_cloze", 0, 0, 1, k3_mode="sometimes")
    with pytest.raises(ValueError, match="ball_lo_sd"):
        KnobParams(ball_lo_sd=1.0, ball_hi_sd=0.5).validate("visual_cloze")


@pytest.mark.parametrize("field, value, match", [
    ("k3_prob", -1.0, r"k3_prob \(--k3-prob\) must be in \[0, 1\], got -1.0"),
    ("k3_prob", 2.0, r"k3_prob \(--k3-prob\) must be in \[0, 1\]"),
    ("k3_prob", float("nan"), r"k3_prob \(--k3-prob\) must be a finite number, got nan"),
    ("ball_hi_sd", float("inf"), r"ball_hi_sd \(--ball-hi-sd\) must be a finite number, got inf"),
    ("ball_hi_sd", float("nan"), r"ball_hi_sd \(--ball-hi-sd\) must be a finite number"),
    ("ball_lo_sd", float("-inf"), r"ball_lo_sd \(--ball-lo-sd\) must be a finite number"),
    ("ordering_weight_power", float("nan"), r"ordering_weight_power \(--ordering-weight-power\) must be a finite"),
])
def test_non_finite_and_out_of_range_parameters_are_refused(field, value, match):
    with pytest.raises(ValueError, match=match):
        replace(KnobParams.preset_for("visual_cloze", 0, 1, 0), **{field: value}).validate("visual_cloze")


@pytest.mark.parametrize("task, name, field, value, option", [
    ("visual_cloze", "0-1-0", "k3_prob", 0.7, "--k3-prob"),                 # knob 3 off
    ("visual_cloze", "0-1-1-balanced", "k3_prob", 0.7, "--k3-prob"),         # balanced draws no coin
    ("visual_cloze", "0-1-1-all", "k3_prob", 0.7, "--k3-prob"),
    ("visual_coherence", "0-1-0", "k3_n_constrained", 2, "--k3-constrained"),
    ("visual_cloze", "0-1-1-balanced", "k3_n_constrained", 2, "--k3-constrained"),
    ("textual_cloze", "0-1-0", "ordering_weight_power", 2.0, "--ordering-weight-power"),
    ("visual_cloze", "recipeqa", "k3_prob", 0.2, "--k3-prob"),
    ("visual_coherence", "0-1-1", "k3_n_constrained", 2, "--k3-constrained"),    # one foreign image: no count
    ("visual_coherence", "0-1-1-all", "k3_n_constrained", 0, "--k3-constrained"),
    ("visual_ordering", "0-1-0", "ball_hi_sd", 2.0, "--ball-hi-sd"),           # ordering draws no ball
    ("visual_ordering", "0-0-0", "ball_lo_sd", -3.0, "--ball-lo-sd"),
    ("visual_ordering", "0-0-0", "k", 60, "--k"),                              # nor neighbours
    ("visual_ordering", "0-1-0-af", "k", 60, "--k"),
    ("visual_cloze", "recipeqa", "ball_hi_sd", 0.5, "--ball-hi-sd"),           # random far distractors
    ("visual_coherence", "recipeqa", "ball_lo_sd", -2.0, "--ball-lo-sd"),
    ("visual_coherence", "0-0-0-matched", "ball_hi_sd", 0.5, "--ball-hi-sd"),  # the matched image replaces it
    ("visual_coherence", "0-0-0-matched", "k", 60, "--k"),      # nor neighbours: the same questions and provenance
    ("visual_coherence", "1-0-0-matched-af", "k", 40, "--k"),   # on a 120-recipe home, AF included
])
def test_an_option_the_setting_does_not_use_is_refused(task, name, field, value, option):
    """It would only make a `-p` dataset, the same questions under another id."""
    from features.datasets.generate import settings_for
    preset = name if name == "recipeqa" else None
    with pytest.raises(ValueError, match=f"{option} .*this setting does not use it"):
        settings_for(task, None if preset else name, preset, None, {field: value})


@pytest.mark.parametrize("task, name, field, value", [
    ("visual_cloze", "0-1-1", "k3_prob", 0.7), ("visual_cloze", "0-1-1", "k3_n_constrained", 2),
    ("visual_cloze", "0-1-1-all", "k3_n_constrained", 2), ("visual_ordering", "0-1-0", "ordering_weight_power", 2.0),
    ("visual_coherence", "0-1-1", "k3_prob", 0.3), ("visual_cloze", "0-1-0", "ball_hi_sd", 2.0),
    ("visual_coherence", "0-1-0", "ball_lo_sd", -2.0), ("textual_cloze", "0-0-0", "k", 60),
    ("visual_cloze", "recipeqa", "k", 60), ("visual_ordering", "recipeqa", "ordering_weight_power", 1.0),
])
def test_an_option_the_setting_uses_makes_a_p_dataset(task, name, field, value):
    from features.datasets.generate import settings_for
    from features.datasets.knobs import dataset_id
    preset = name if name == "recipeqa" else None
    (_, params), = settings_for(task, None if preset else name, preset, None, {field: value})
    assert getattr(params, field) == value and "-p" in dataset_id(task, params, 0, "enc")


@pytest.mark.parametrize("seed", [-1, 2**32, 1.5, True])
def test_a_seed_numpy_cannot_take_is_refused(seed):
    from features.datasets.knobs import check_seed
    with pytest.raises(ValueError, match=r"--seed must be an integer in 0\.\.4294967295"):
        check_seed(seed)
    check_seed(0)
    check_seed(2**32 - 1)


def test_sql_literals_refuse_non_finite_numbers():
    from features.datasets.generate import _literal
    assert _literal(0.5) == "CAST(0.5 AS DOUBLE)"
    for v in (float("nan"), float("inf"), np.float64("-inf")):
        with pytest.raises(ValueError, match="non-finite"):
            _literal({"ball_hi_sd": v})


def test_dataset_ids_are_deterministic_and_name_non_paper_params():
    p = KnobParams.preset_for("visual_cloze", 0, 1, 0)
    a = dataset_id("visual_cloze", p, 0, "enc-x")
    assert a == dataset_id("visual_cloze", KnobParams.preset_for("visual_cloze", 0, 1, 0), 0, "enc-x")
    assert a.startswith("vc-0-1-0-s0-") and "-p" not in a[len("vc-0-1-0-s0-"):]
    assert dataset_id("visual_cloze", p, 1, "enc-x") != a
    # the knob-3 mode and AF are part of the name now, so their presets carry no -p<hash>
    bal = KnobParams.preset_for("visual_cloze", 0, 1, 1, k3_mode="balanced")
    b = dataset_id("visual_cloze", bal, 0, "enc-x")
    assert b.startswith("vc-0-1-1-balanced-s0-") and "-p" not in b[len("vc-0-1-1-balanced-s0-"):]
    af = dataset_id("visual_cloze", replace(bal, af_rounds=AF_DEFAULT_ROUNDS), 0, "enc-x")
    assert af.startswith("vc-0-1-1-balanced-af-s0-") and "-p" not in af[len("vc-0-1-1-balanced-af-s0-"):]
    assert dataset_id("visual_cloze", replace(bal, af_rounds=5), 0, "enc-x").startswith("vc-0-1-1-balanced-af-s0-")
    assert "-p" in dataset_id("visual_cloze", replace(bal, af_rounds=5), 0, "enc-x")[-8:]
    assert "-p" in dataset_id("visual_cloze", replace(p, k=50), 0, "enc-x")[-8:]
    assert dataset_id("visual_cloze", KnobParams.recipeqa_preset(), 0, "enc-x").startswith("vc-recipeqa-s0-")
    # the id the same dataset had before setting names (re-generating replaces its rows)
    assert legacy_dataset_id("visual_cloze", p, 0, "enc-x") == a.replace("vc-0-1-0-", "vc-k010-")
    assert legacy_dataset_id("visual_cloze", bal, 0, "enc-x").startswith("vc-k011-s0-")
    assert legacy_dataset_id("visual_cloze", bal, 0, "enc-x")[-8:-6] == "-p"


NAMES = [((0, 0, 0, "off", False), "0-0-0"), ((0, 0, 1, "coin", False), "0-0-1"),
         ((0, 0, 1, "balanced", False), "0-0-1-balanced"), ((0, 1, 1, "all", False), "0-1-1-all"),
         ((0, 1, 1, "coin", True), "0-1-1-af"), ((0, 1, 1, "balanced", True), "0-1-1-balanced-af"),
         ((1, 1, 0, "off", True), "1-1-0-af")]


@pytest.mark.parametrize("args,name", NAMES, ids=[n for _, n in NAMES])
def test_setting_names_round_trip(args, name):
    assert setting_name(*args) == name
    s = parse_setting(name)
    assert s == Setting(*args) and s.name == name
    task = "visual_cloze"
    params = s.params(task)
    assert params.setting == s and params.knobs_label == name
    assert dataset_id(task, params, 0, "enc").startswith(f"vc-{name}-s0-")


def test_matched_settings_have_their_own_name_id_and_earlier_id():
    """Coherence's matched foreign images: `K1-0-0-matched[-af]` (never a paper setting's name, id or
    partition), read from the name or from `--distractors matched`; the id they had before the name
    said it (the paper setting's name with -p<hash>) is replaced on re-generation."""
    import hashlib

    from features.datasets.knobs import params_hash
    enc8 = hashlib.sha256(b"enc").hexdigest()[:8]
    for k1, af in ((0, False), (1, True)):
        name, old = f"{k1}-0-0-matched" + ("-af" if af else ""), f"{k1}-0-0" + ("-af" if af else "")
        s = parse_setting(name)
        assert s == Setting(k1, 0, 0, "off", af, distractors="matched") and s.name == name
        assert parse_setting(old, distractors="matched") == s and parse_setting(old).distractors == "ball"
        p = s.params("visual_coherence")
        assert p.distractors == "matched" and p.setting == s
        assert dataset_id("visual_coherence", p, 0, "enc") == f"vcoh-{name}-s0-{enc8}"
        assert previous_dataset_ids("visual_coherence", p, 0, "enc")[1] == f"vcoh-{old}-s0-{enc8}-p{params_hash(p)}"
        ball = parse_setting(old).params("visual_coherence")        # the knob setting: only its legacy id
        assert len(previous_dataset_ids("visual_coherence", ball, 0, "enc")) == 1
    for text, dist, match in (("0-1-0-matched", None, "knob 2 = 0 and knob 3 = 0"),
                              ("0-0-1-matched-af", None, "knob 2 = 0 and knob 3 = 0"),
                              ("0-0-0-matched", "ball", "--distractors is 'ball'"),
                              ("0-0-0-af-matched", None, "not a knob setting")):
        with pytest.raises(ValueError, match=match):
            parse_setting(text, distractors=dist)


def test_author_settings_have_their_own_name_and_id():
    """Coherence's foreign photo matched among the recipes of the question's author: `K1-0-0-author[-af]`,
    read from the name or from `--distractors author`; only at knobs 2 and 3 = 0, for visual coherence."""
    import hashlib
    enc8 = hashlib.sha256(b"enc").hexdigest()[:8]
    for k1, af in ((0, False), (1, True)):
        name = f"{k1}-0-0-author" + ("-af" if af else "")
        s = parse_setting(name)
        assert s == Setting(k1, 0, 0, "off", af, distractors="author") and s.name == name
        assert parse_setting(f"{k1}-0-0" + ("-af" if af else ""), distractors="author") == s
        p = s.params("visual_coherence")
        assert p.distractors == "author" and p.setting == s and p.knobs_label == name
        assert dataset_id("visual_coherence", p, 0, "enc") == f"vcoh-{name}-s0-{enc8}"
        assert len(previous_dataset_ids("visual_coherence", p, 0, "enc")) == 1      # no earlier name
        assert setting_kind(name) == "author"
    for text, dist, match in (("0-1-0-author", None, "knob 2 = 0 and knob 3 = 0"),
                              ("0-0-1-author-af", None, "knob 2 = 0 and knob 3 = 0"),
                              ("0-0-0-author", "matched", "--distractors is 'matched'"),
                              ("0-0-0-af-author", None, "not a knob setting")):
        with pytest.raises(ValueError, match=match):
            parse_setting(text, distractors=dist)
    for task in ("visual_cloze", "textual_cloze", "visual_ordering"):
        with pytest.raises(ValueError, match="--distractors author is defined for visual coherence"):
            parse_setting("0-0-0-author").params(task).validate(task)
    with pytest.raises(ValueError, match="--distractors author"):
        KnobParams.recipeqa_preset(distractors="author").validate("visual_coherence")
    with pytest.raises(ValueError, match="--k"):          # the matched rule draws from no neighbours
        parse_setting("0-0-0-author").params("visual_coherence", k=40).validate("visual_coherence")


# every older spelling of a setting, and the name it is read as
OLD_SPELLINGS = [
    (("0,0,1", "balanced", None), "0-0-1-balanced"),        # --knobs 0,0,1 --k3-mode balanced
    (("0-0-1:balanced", None, None), "0-0-1-balanced"),     # the old knob label (datasets.knob3 = '1:balanced')
    (("0-0-1balanced", None, None), "0-0-1-balanced"),      # the old export partition knobs=0-0-1balanced
    (("0-0-1(balanced)", None, None), "0-0-1-balanced"),    # the old AF report label
    (("0-1-1:all", None, None), "0-1-1-all"),
    (("0-1-1balanced-af", None, None), "0-1-1-balanced-af"),  # the old partition of a balanced AF dataset
    (("0,1,1", None, True), "0-1-1-af"),                    # --knobs 0,1,1 --adversarial
    (("0,1,1", "coin", None), "0-1-1"),                     # --k3-mode coin is the paper's default
    (("0,1,0", "coin", None), "0-1-0"),                     # the CLI's old default mode at k3=0
    (("0-0-1-coin", None, None), "0-0-1"),
    ((" 1, 0, 1 ", None, None), "1-0-1"),
    (("RecipeQA", None, None), "recipeqa"),
]


@pytest.mark.parametrize("args,name", OLD_SPELLINGS, ids=[a[0] for a, _ in OLD_SPELLINGS])
def test_old_spellings_are_normalised(args, name):
    assert parse_setting(*args).name == name
    assert parse_setting(name) == parse_setting(*args)


@pytest.mark.parametrize("text,mode,af,match", [
    ("0-0-0-balanced", None, None, "needs k3=1"),
    ("0,0,0", "all", None, "needs k3=1"),
    ("0-0-2", None, None, "k3 must be 0 or 1"),
    ("0-0-1-sometimes", None, None, "not a knob setting"),
    ("0-0-1-af-balanced", None, None, "not a knob setting"),    # one order only: mode, then -af
    ("0,1", None, None, "not a knob setting"),
    ("0-0-1:all", "balanced", None, "--k3-mode is 'balanced'"),
    ("0-1-1-af", None, False, "--no-adversarial"),
    ("recipeqa", "balanced", None, "preset has no knob-3 mode"),
])
def test_bad_setting_names_are_refused(text, mode, af, match):
    with pytest.raises(ValueError, match=match):
        parse_setting(text, mode, af)


def test_uniforms_are_pure_functions_of_key_and_stream():
    keys = np.arange(1000, dtype=np.uint64) * np.uint64(7919)
    u = uniforms(keys, 3, 4)
    assert u.shape == (1000, 4) and (u >= 0).all() and (u < 1).all()
    assert np.array_equal(u, uniforms(keys, 3, 4))
    assert np.array_equal(u[500:], uniforms(keys[500:], 3, 4))      # order/subset independent
    assert not np.array_equal(u, uniforms(keys, 4, 4))
    assert abs(u.mean() - 0.5) < 0.03
    r1, r2 = recipe_rng(0, "t", "v", "r"), recipe_rng(0, "t", "v", "r")
    assert r1.integers(1 << 30) == r2.integers(1 << 30)


@pytest.mark.parametrize("k1", [0, 1])
def test_knob1_skeletons(k1):
    fam = FAMILIES["visual_cloze"]
    p = KnobParams.preset_for("visual_cloze", k1, 0, 0)
    for n in range(5, 13):
        steps = list(range(1, n + 1))
        sk, reason = recipe_skeletons(f"r{n}", "train", steps, fam, p, seed=3)
        assert reason is None
        cap = n // 3 if k1 else n // 2
        assert 1 <= len(sk) <= cap
        answers = [s.answer_step for s in sk]
        assert len(set(answers)) == len(answers)                      # no answer step reused
        removed = set()
        for s in sk:
            assert not removed & set(s.steps)                         # removed steps never come back
            assert s.answer_step in s.steps and list(s.steps) == sorted(s.steps) and 0 not in s.steps
            removed.add(s.answer_step)
            if k1:
                assert s.extra_removed in s.steps and s.extra_removed != s.answer_step
                removed.add(s.extra_removed)
            else:
                assert s.extra_removed is None
    assert recipe_skeletons("short", "train", [1, 2, 3, 4], fam, p, 0) == ([], "too_few_steps")


def test_recipeqa_preset_reuses_steps():
    fam = FAMILIES["visual_cloze"]
    reused = 0
    for r in range(30):
        sk, _ = recipe_skeletons(f"r{r}", "train", list(range(1, 9)), fam, KnobParams.recipeqa_preset(), 0)
        shown = [st for s in sk for st in s.steps]
        reused += len(shown) - len(set(shown))
    assert reused > 0
