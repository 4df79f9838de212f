"""Knob parameters, dataset ids, deterministic randomness and knob-1 skeleton sampling."""
from __future__ import annotations

import numpy as np
import pytest

from features.datasets.knobs import KnobParams, dataset_id, recipe_rng, uniforms
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


def test_dataset_ids_are_deterministic_and_name_non_paper_params():
    p = KnobParams.preset_for("visual_cloze", 0, 1, 0)
    a = dataset_id("visual_cloze", p, 0, "enc-x")
    assert a == dataset_id("visual_cloze", KnobParams.preset_for("visual_cloze", 0, 1, 0), 0, "enc-x")
    assert a.startswith("vc-k010-s0-") and "-p" not in a[len("vc-k010-s0-"):]
    assert dataset_id("visual_cloze", p, 1, "enc-x") != a
    b = dataset_id("visual_cloze", KnobParams.preset_for("visual_cloze", 0, 1, 1, k3_mode="balanced"), 0, "enc-x")
    assert b.startswith("vc-k011-s0-") and "-p" in b
    assert dataset_id("visual_cloze", KnobParams.recipeqa_preset(), 0, "enc-x").startswith("vc-recipeqa-s0-")


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
