"""The readers' explicit step alignment (training/model.py `alignment_features`, `--align`): what the
features say about a photo's place in the recipe, that a reader with it learns a question no
question-only model can answer, and that another recipe's steps take that away (the context ablation)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from training.config import ModelConfig, resolve_configs
from training.model import ALIGN_STEPS, ALIGN_WIDTH, GM3C, alignment_features

D = 16


def _steps(n: int, s: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return F.normalize(torch.randn(n, s, D, generator=g), dim=-1)


def test_alignment_features_locate_each_photo_among_the_steps():
    ctx = _steps(1, 9, 0)                                       # a recipe of 9 steps
    c_mask = torch.ones(1, 9, dtype=torch.bool)
    ctx = torch.cat([ctx, torch.zeros(1, 3, D)], 1)             # padded to 12
    c_mask = torch.cat([c_mask, torch.zeros(1, 3, dtype=torch.bool)], 1)
    photos = [2, 4, 8]                                          # three photos of steps 2, 4, 8, then padding
    q = torch.cat([ctx[:, photos], torch.zeros(1, 1, D)], 1)[:, None]        # (1, 1, 4, D)
    q_mask = torch.tensor([[[True, True, True, False]]])
    f = alignment_features(q * 3.0, q_mask, ctx * 0.5, c_mask)             # scale-free: cosines
    assert f.shape == (1, 1, 4, ALIGN_WIDTH)
    prof = f[0, 0, :, :ALIGN_STEPS]
    assert prof[:3].argmax(-1).tolist() == photos               # each photo's profile peaks at its own step
    assert (prof[:, 9:] == 0).all() and (f[0, 0, 3] == 0).all()            # past the recipe's end / padding
    best_at = f[0, 0, :3, ALIGN_STEPS + 3]
    assert torch.allclose(best_at, torch.tensor(photos) / 8.0)
    soft_at = f[0, 0, :3, ALIGN_STEPS + 2]
    assert torch.allclose(soft_at, best_at, atol=0.02)          # exact matches: the softmax is sharp
    step_in, step_out = f[0, 0, :, ALIGN_STEPS + 4:ALIGN_STEPS + 6], f[0, 0, :, ALIGN_STEPS + 6:ALIGN_STEPS + 8]
    assert (step_in[0] == 0).all() and (step_out[2] == 0).all()            # no item before / after
    assert torch.allclose(step_in[1:3, 1], torch.tensor([2 / 8, 4 / 8]))    # forward steps between photos
    assert torch.allclose(step_out[:2, 1], step_in[1:3, 1])
    # in the wrong order the steps between neighbours turn negative: the slot does not fit
    rev = alignment_features(q[:, :, [2, 1, 0, 3]], q_mask, ctx, c_mask)
    assert (rev[0, 0, 1:3, ALIGN_STEPS + 5] < 0).all()


def test_the_slot_scores_a_photo_against_the_steps_its_place_allows():
    """Two photos that match a step of the recipe equally well: the one whose step lies between its
    neighbours' steps fits the slot, the one whose step lies after the last neighbour does not. Only the
    slot features tell them apart; the best-match features are the same."""
    ctx = _steps(1, 9, 3)
    c_mask = torch.ones(1, 9, dtype=torch.bool)
    inside, outside = ctx[:, 3], ctx[:, 8]                      # the neighbours show steps 1 and 6
    q = torch.stack([torch.stack([ctx[:, 1], c, ctx[:, 6]], 1) for c in (inside, outside)], 1)   # (1, 2, 3, D)
    q_mask = torch.ones(1, 2, 3, dtype=torch.bool)
    f = alignment_features(q, q_mask, ctx, c_mask)[0, :, 1]    # the middle item of each choice's query
    raw, slot_max, slot_mean, slot_at = (f[:, ALIGN_STEPS + 1], f[:, ALIGN_STEPS + 8], f[:, ALIGN_STEPS + 9],
                                         f[:, ALIGN_STEPS + 10])
    assert torch.allclose(raw, torch.full((2,), 10.0), atol=1e-4)   # both match a step exactly (cosine 1, x10)
    assert slot_max[0] > slot_max[1] + 1 and slot_mean[0] > slot_mean[1] + 1
    assert (1 / 8 < slot_at).all() and (slot_at < 6 / 8).all()  # the slot lies between the neighbours' steps
    # the first item's slot lies before the second's step, the last item's after it
    first, last = alignment_features(q, q_mask, ctx, c_mask)[0, 0, [0, 2], ALIGN_STEPS + 10]
    assert first < 3 / 8 < last
    # padding: an item of no query, or a step past the recipe's end, never enters the slot
    padded = alignment_features(torch.cat([q, torch.zeros(1, 2, 1, D)], 2),
                                torch.cat([q_mask, torch.zeros(1, 2, 1, dtype=torch.bool)], 2),
                                torch.cat([ctx, torch.zeros(1, 2, D)], 1),
                                torch.cat([c_mask, torch.zeros(1, 2, dtype=torch.bool)], 1))
    assert torch.allclose(padded[0, :, :3, ALIGN_STEPS + 8:],
                          alignment_features(q, q_mask, ctx, c_mask)[0, :, :, ALIGN_STEPS + 8:], atol=1e-4)
    assert (padded[0, :, 3] == 0).all()


def _planted(n: int, seed: int):
    """Cloze questions only the recipe can answer: 3 shown photos of steps in order, the placeholder's
    step between them; the answer is that step's photo, the distractors photos of the recipe's other
    steps (none between the placeholder's neighbours: AF's gap rule) and of another recipe (all drawn
    alike, so the choices alone say nothing)."""
    g = torch.Generator().manual_seed(seed)
    s = 8
    text = _steps(n, s, seed + 1)
    photos = F.normalize(text + 0.35 * torch.randn(n, s, D, generator=g) / D ** 0.5, dim=-1)
    other = F.normalize(torch.randn(n, 3, D, generator=g), dim=-1)
    queries, answers = [], []
    for i in range(n):
        order = torch.randperm(s, generator=g)
        shown = sorted(order[:4].tolist())
        slot = int(torch.randint(1, 3, (1,), generator=g))           # placeholder among the middle two
        target = shown[slot]
        outside = [j for j in order[4:].tolist() if not shown[slot - 1] < j < shown[slot + 1]]
        distractors = ([photos[i, j] for j in outside[:2]] + [other[i, k] for k in range(3)])[:3]
        pos = int(torch.randint(0, 4, (1,), generator=g))
        choices = distractors[:pos] + [photos[i, target]] + distractors[pos:]
        seq = [photos[i, j] for j in shown]
        queries.append(torch.stack([torch.stack(seq[:slot] + [c] + seq[slot + 1:]) for c in choices]))
        answers.append(pos)
    q = torch.stack(queries)                                              # (n, 4 choices, 4 items, D)
    return {"ctx": text, "ctx_mask": torch.ones(n, s, dtype=torch.bool), "query": q,
            "query_mask": torch.ones(q.shape[:3], dtype=torch.bool), "answer": torch.tensor(answers)}


def _train(cfg: ModelConfig, train: dict, steps: int = 150) -> GM3C:
    torch.manual_seed(0)
    model = GM3C(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    n = len(train["answer"])
    for i in range(steps):
        idx = torch.arange(i * 32, i * 32 + 32) % n
        batch = {k: v[idx] for k, v in train.items()}
        loss = F.cross_entropy(model(batch), batch["answer"])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def _acc(model: GM3C, data: dict) -> float:
    with torch.no_grad():
        return float((model(data).argmax(-1) == data["answer"]).float().mean())


def test_a_reader_with_the_alignment_reads_the_recipe_and_needs_it():
    torch.set_num_threads(1)
    train, test = _planted(640, 0), _planted(400, 1)
    kw = dict(text_features="vectors", text_dim=D, image_dim=D, dropout=0.0)
    reader = _train(ModelConfig.tiny(scorer="transformer", align=True, **kw), train)
    question_only = _train(ModelConfig.tiny(scorer="question_only", **kw), train)
    foreign = {**test, "ctx": test["ctx"].roll(1, 0)}                     # another recipe's steps
    assert _acc(reader, test) > 0.8
    assert _acc(question_only, test) < 0.4                                # the choices alone say nothing
    assert _acc(reader, foreign) < 0.45                                   # and the reader needs the recipe


def test_align_option_resolution_and_refusals():
    mc, _ = resolve_configs("tiny", scorer="transformer", text_features="vectors")
    assert mc.align
    assert not resolve_configs("tiny", scorer="question_only", text_features="vectors")[0].align
    assert not resolve_configs("tiny", scorer="transformer", text_features="tokens")[0].align
    assert not resolve_configs("tiny", scorer="bidaf", text_features="vectors", align=False)[0].align
    with pytest.raises(ValueError, match="--align needs --text-features vectors"):
        resolve_configs("tiny", scorer="transformer", text_features="tokens", align=True)
    with pytest.raises(ValueError, match="step-text vectors"):
        ModelConfig.tiny(align=True, text_features="tokens").validate()
    with pytest.raises(ValueError, match="one joint space"):
        GM3C(ModelConfig.tiny(align=True, text_features="vectors", text_dim=8, image_dim=D))
