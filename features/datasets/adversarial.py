"""Adversarial filtering (AF): distractors a learned question-only adversary cannot reject, inside the knobs.

The paper's knobs control distances in one fixed feature space. A model that learns its own metric
finds another cue: every photo of a recipe shares one kitchen look (on real sites, one per author), so
the foreign-looking choice is the wrong one. AF (Zellers et al. 2018, SWAG; Le Bras et al. 2020, AFLite;
hypothesis-only baselines of NLI) starts from the knob selection of a setting and, for R rounds:

1. trains an ensemble of question-only models (QuestionOnlyModel of features/diagnostics/question_only.py),
   each member one model per fold of RECIPES, trained on the other folds, so every question's choices
   and candidates are scored by models that never saw its recipe. The members see the judge's own
   features (question_only.with_set_features: the pair features of a choice and its context, plus
   the set-level cues -- the choice's distance to the question, its gaps to the nearest and to the
   mean, its rank within the question, the same of its spread among the choices, which tells the
   centre of the choice set: distractors drawn around the answer make the answer that centre, and the
   max / min / spread of its cosines to the single shown items, which the mean blurs); three
   at different penalties C, one on the 7 distance cues alone and one on the 10 choice-set cues (spread,
   similarities to the shown items) alone (a wide model dilutes them); visual cloze adds two on the stage
   cue (SEQUENCE_MEMBERS), textual cloze two on the corpus's order of titles (ORDER_MEMBERS). The
   ensemble is linear, so a candidate's score in a set is its own pair part plus the set-level part
   of the set it would form: recomputed per candidate and slot (every choice's spread moves);
2. aims each question's answer at a seeded target rank under the ensemble, uniform over 0..3 (0: the
   ensemble picks the answer), and per distractor slot swaps in the eligible candidate that brings the
   answer's rank nearest to its target, then makes the answer least distinguishable (smallest score
   gap to the nearest other choice). Never "the most plausible distractor": a filter that always
   pushes the answer below every distractor leaves the reversed cue "the least plausible-looking
   choice is the answer", which a fresh probe reads well BELOW chance. Candidate pools: `ball` (the
   setting's knob-2 ball over the answer's neighbours, as without AF), `author` (images of other
   recipes by the same author, same split), `recipe` (images of the same recipe from steps neither
   shown nor the answer's: the answer's own step never is a distractor). Every candidate passes the
   setting's knob-2 ball (distances recomputed in the dataset's feature space) and keeps its knob-3
   rule; no constraint is relaxed.

After the last round a freshly trained held-out ensemble scores the final choices. The drop rule
(AFLite: drop what stays predictable, in either direction) keeps per split at most a quarter of the
questions at its rank 0 (it picks the answer) and at most a quarter at rank 3 (it finds the answer the
least plausible choice), the least distinguishable first (`af_predictable`); in knob-3 `balanced` mode
the per-split distance-rank counts are then made equal again (`af_rank_rebalance`).

Coherence: the answer is the foreign image and the 3 coherent images are the question itself; each
candidate foreign image forms its own 4-image set (the distance cues are those of that set), and AF
picks the candidate that brings the foreign image's rank nearest to its target; pools `ball` and
`author` (an image of the same recipe would not be foreign).
Ordering (`refine_ordering`): the choices are orders of the question's own 4 photos, and knob 2 is a
sampling distribution over the 23 wrong orders (uniform, or tilted to jumpy orders), not a ball: every
wrong order is one the knob can draw, so AF's candidates are all 23, in the knob's own draw order (which
breaks ties). The photos themselves show the order (a dish goes from raw to cooked), so a question-only
model reads the plain settings at 84-91%; AF picks wrong orders it finds as plausible as the right one.

Deterministic for a seed: folds from seeded recipe keys, seeded models, ties broken by the seeded
candidate order (the same pick keys as the knob selection).

Recorded per question (provenance): `af_round` (the last round that changed its choices; 0 = the knob
selection kept), per choice `af_pools` (ball | author | recipe, `answer` / `question` for the others) and
`af_scores` (the final held-out ensemble's score), and `adversarial` {rounds, pools, ensemble, n_folds,
probe}. The dataset's params add what AF measured: the ensemble's solved share (answer at its rank 0)
per round and at the end, the final ensemble's answer-rank counts before the drop, the learned probe
before (knob selection) and after (kept questions), questions in and kept.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from features.datasets.distractors import N_RANKS, coherence_scores, pick_keys
from features.datasets.knobs import MATCHED_KINDS, md5_key, splitmix64, stable_key
from features.datasets.twins import TWIN_JACCARD
from features.diagnostics.question_only import (
    N_DISTANCE_FEATURES,
    N_SET_FEATURES,
    SEQ_RANK,
    QuestionOnlyModel,
    choice_spread,
    fill_set_features,
    item_similarity,
    others_similarity,
    pair_distance,
    pair_features,
    pair_sequence_features,
    sequence_basis,
    set_features,
    spread_after_swap,
    with_set_features,
)
from features.diagnostics.title_order import N_ORDER_FEATURES

N_FOLDS = 5
# members: the learned probe's features at three penalties, and the distance probe's features alone (the
# set-level cue: distance, gaps and rank of a choice within its question), which the wide models dilute
ENSEMBLE = ({"C": 0.1, "seed": 1, "features": "all"}, {"C": 1.0, "seed": 2, "features": "all"},
            {"C": 10.0, "seed": 3, "features": "all"}, {"C": 1.0, "seed": 4, "features": "distance"},
            {"C": 1.0, "seed": 5, "features": "choice_set"})
# visual cloze adds two members on the stage cue alone (question_only.sequence_features: the placeholder's slot and
# neighbours against the choice), which the wide members do not see: on few questions its 576 columns
# would drown their own cues
SEQUENCE_MEMBERS = ({"C": 1.0, "seed": 6, "features": "sequence"}, {"C": 0.1, "seed": 7, "features": "sequence"})
# textual cloze adds two members on the corpus's order of titles alone (title_order.TitleOrder.batch: 6 figures
# per choice from the train recipes' title counts, the question's and the choice's own recipe left out): the
# wide members read the titles' vectors, not which titles follow which in other recipes, which the order probe
# read at 36-50% of the demo's AF datasets when only the pooled drop took its list
ORDER_MEMBERS = ({"C": 1.0, "seed": 8, "features": "order"}, {"C": 0.1, "seed": 9, "features": "order"})
PROBE = {"C": 1.0, "seed": 97}          # the fresh question-only probe measured before and after AF
CLOZE_POOLS = ("ball", "author", "recipe")
COHERENCE_POOLS = ("ball", "author")
ORDERING_POOLS = ("knob",)
POOL_CAP = 64                           # candidates per question from each extra pool (seeded order)
ALT_CAP = 24                            # cloze: knob-valid alternates recorded per question (af_alternates)
BALL_CAP = 64                           # coherence: eligible ball candidates per question (seeded order)
# floats of candidates' features built at once, and of the cloze slot loop's blocks: 4 MiB of float32, so a chunk
# is built and scored while it sits in the cache (two generate threads share the L3) rather than written out to
# memory and read back; every row's figures are the same whatever the chunk (`mrqa bench af-chunks`)
FEATURE_BUDGET = 1 << 20
SLOT_BUDGET = 1 << 20
# answerability: a reader of the recipe must be able to tell the answer. In the encoder's joint space, the
# text of the answer's step (its body) must be nearer the answer photo than each distractor, by this
# cosine margin (coherence: each shown step's text nearer its own photo than the foreign photo).
# Without it AF fills the choices with photos the step text cannot separate from the answer (measured:
# a step-text oracle at 43-55% on AF visual cloze), and no reader can win.
# 0: strictly nearer. A margin of 0.05 kept 23-26% of the knob-2 = 0 settings' questions (their ball
# holds ~6 non-twin candidates per question, ~2 of them 0.05 apart), 0 keeps over 40%.
READ_MARGIN = 0.0


def config(ds) -> dict:
    """What the dataset's params/provenance record under `adversarial`."""
    pools = COHERENCE_POOLS if ds.task == "visual_coherence" else CLOZE_POOLS
    if ds.task == "visual_ordering":             # the knob's own draw of wrong orders (refine_ordering)
        pools = ORDERING_POOLS
    if ds.params.distractors in MATCHED_KINDS:   # beyond the knobs: one pool (features/datasets/matched.py)
        pools = (ds.params.distractors,)
    if ds.params.distractors == "kitchen":       # beyond the knobs: the question's own recipe (kitchen_candidates)
        pools = ("recipe",)
    out = {"rounds": ds.params.af_rounds, "pools": list(pools), "n_folds": N_FOLDS,
           "ensemble": [dict(m) for m in members(ds.task)], "probe": dict(PROBE), "twin_jaccard": TWIN_JACCARD,
           "read_margin": READ_MARGIN, "read_text": "body"}
    if ds.af_drop != "linear":                   # recorded only when not AF's own (older ids' content)
        out["drop"] = ds.af_drop
    if ds.twin_rule != "words":                  # the same: recorded only when not the words rule
        out["twin_rule"] = ds.twin_rule
    return out


def twin_table(sp, ds):
    """The cloze twin rule of dataset `ds` over space `sp`: the steps' words (twins.py, AF's rule) or, with
    `twin_rule` "items", the sample kitchen's ground truth (twins.ItemTwins, set on the space by the
    generator)."""
    return sp.item_twins if ds.twin_rule == "items" else sp.step_words


def readable(sp, ans: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """(K, M): can the text of answer ans[k]'s step tell the answer from candidate cand[k, m]? Its cosine
    to the answer photo exceeds its cosine to the candidate by READ_MARGIN (a step with no text: never).
    All true where the space has no step text (title space, or an encoder without a text tower)."""
    if sp.step_text is None:
        return np.ones(cand.shape, dtype=bool)
    t = sp.step_text[ans]                                            # (K, d)
    s_ans = (sp.vecs[ans] * t).sum(-1)
    s_c = sp.dots(cand, t[:, None, :])[..., 0]
    has = np.abs(t).sum(-1) > 0
    return (s_c < (s_ans - READ_MARGIN)[:, None]) & has[:, None]


def readable_coherence(sp, items: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """(K, M): would a reader of the shown steps' texts tell candidate cand[k, m] as the foreign photo?
    For every shown step, its own photo items[k, i] is more similar to the step's text than the
    candidate is, by READ_MARGIN: the reader that matches each photo to its step leaves the candidate
    out (the candidate is no better a photo of any shown step than that step's own). A step with no
    text: never. All true without step text."""
    if sp.step_text is None:
        return np.ones(cand.shape, dtype=bool)
    T = sp.step_text[items]                                          # (K, 3, d)
    has = (np.abs(T).sum(-1) > 0).all(-1)
    own = np.einsum("kid,kid->ki", sp.vecs[items], T)                # each coherent photo to its own step
    f = sp.dots(cand, T)                                             # (K, M, 3)
    return (f < (own - READ_MARGIN)[:, None, :]).all(-1) & has[:, None]


def members(task: str) -> tuple:
    return ENSEMBLE + {"visual_cloze": SEQUENCE_MEMBERS, "textual_cloze": ORDER_MEMBERS}.get(task, ())


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)).astype(np.float32)


def _r(x) -> np.ndarray:
    return np.round(np.asarray(x, dtype=np.float64), 6)


def _lists(mat, typ=None) -> pa.ListArray:
    mat = np.asarray(mat)
    vals = mat.reshape(-1)
    arr = pa.array(vals.tolist() if vals.dtype == object else vals, typ)
    return pa.ListArray.from_arrays(pa.array(np.arange(len(mat) + 1, dtype=np.int32) * mat.shape[1]), arr)


def _insert(others: np.ndarray, value: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """(n, 3) + (n,) -> (n, 4) with value at column pos (the choice order of the datasets)."""
    j = np.arange(4)[None, :]
    src = np.clip(j - (j > pos[:, None]), 0, others.shape[1] - 1)
    return np.where(j == pos[:, None], value[:, None], np.take_along_axis(others, src, axis=1))


def recipe_keys(recipe_ids: np.ndarray) -> np.ndarray:
    """Stable 64-bit key per question's recipe (folds are drawn from these)."""
    uniq, inv = np.unique(recipe_ids, return_inverse=True)
    return np.array([md5_key(str(r)) for r in uniq], dtype=np.uint64)[inv]


# ----------------------------------------------------------------------------- the adversary

def member_columns(features: str, f: int, n_seq: int = 0) -> np.ndarray:
    """The feature columns (of f) a member fits on: `all` (but the stage cue); `distance`, the distance
    probe's 7 cues of the choice's distance to the question; `choice_set`, the 7 of its spread among the
    choices and its 3 similarities to the shown items; `sequence` (visual cloze's stage cue) or `order` (textual
    cloze's title order), the `n_seq` columns that sit just before the set-level ones. The narrow members see
    a cue the wide ones dilute."""
    start = f - N_SET_FEATURES
    if features == "distance":
        return np.arange(start, start + N_DISTANCE_FEATURES)
    if features == "choice_set":
        return np.arange(start + N_DISTANCE_FEATURES, f)
    if features in ("sequence", "order"):
        return np.arange(start - n_seq, start)
    return np.concatenate([np.arange(start - n_seq), np.arange(start, f)])


def _widen(model: QuestionOnlyModel, cols: np.ndarray, f: int) -> QuestionOnlyModel:
    """A model fitted on the columns `cols` only, as a model of all f features (zero weight elsewhere)."""
    if len(cols) < f:
        w, mu, sd = np.zeros(f), np.zeros(f), np.ones(f)
        w[cols], mu[cols], sd[cols] = model.w, model.mu, model.sd
        model.w, model.mu, model.sd = w, mu, sd
    return model


def _narrow(model: QuestionOnlyModel, cols: np.ndarray) -> QuestionOnlyModel:
    """A narrow member's previous model, cut back to its own columns (its warm start)."""
    out = QuestionOnlyModel(model.C, model.seed, model.max_iter)
    out.w, out.mu, out.sd = (a[cols] for a in (model.w, model.mu, model.sd))
    return out


def _fold_rows(Xt: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The rows `rows` (a mask) of a feature-major (f, n, c) array, as (n_rows, c, f) laid out as
    `X[rows][..., cols]` lays them out (features outermost), the same values in the same places."""
    out = np.empty((Xt.shape[0], int(rows.sum()), Xt.shape[2]), dtype=Xt.dtype)
    np.compress(rows, Xt, axis=1, out=out)
    return np.moveaxis(out, 0, -1)


class Adversary:
    """A held-out question-only ensemble: per member one model per fold of recipes, trained on the others.

    A question is scored, per member, by the model of its fold (which never saw its recipe). A member's
    folds are the same in every round, so its fold models start from the previous round's weights
    (`previous`): the choices change a little per round, and the fit takes a few steps, not a full one."""

    def __init__(self, X: np.ndarray, y: np.ndarray, rkeys: np.ndarray, seed: int,
                 previous: Adversary | None = None, n_seq: int = 0, narrow: tuple = SEQUENCE_MEMBERS):
        n_groups = len(np.unique(rkeys))
        self.n_folds = min(N_FOLDS, n_groups)
        self.folds, self.models = [], []
        for m, spec in enumerate(ENSEMBLE + (narrow if n_seq else ())):
            salt = np.uint64(stable_key("af-folds", seed, m))
            fold = (splitmix64(rkeys ^ salt) % np.uint64(self.n_folds)).astype(np.int64)
            models = []
            cols = member_columns(spec["features"], X.shape[-1], n_seq)
            # the member's columns, cut once, feature-major: each fold's rows are then cut as
            # X[train][..., cols] lays them out (a model's float sums follow the layout of its input)
            Xt = np.ascontiguousarray(np.moveaxis(X[..., cols], -1, 0))
            for k in range(self.n_folds):
                train = fold != k
                init = previous.models[m][k] if previous is not None else None
                if init is not None and len(cols) < X.shape[-1]:
                    init = _narrow(init, cols)
                models.append(None if not train.any() else
                              _widen(QuestionOnlyModel(C=spec["C"], seed=spec["seed"] + 7919 * seed)
                                     .fit(_fold_rows(Xt, train), y[train], init=init), cols, X.shape[-1]))
            self.folds.append(fold)
            self.models.append(models)

    def weights(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The member-averaged model of each question `rows`, as a linear score: (V (n, f), c (n,)) with
        score(x) = x . V - c (each member's model is the one of the question's fold)."""
        f = next(m for ms in self.models for m in ms if m is not None).w.shape[0]
        V, c = np.zeros((len(rows), f)), np.zeros(len(rows))
        for fold, models in zip(self.folds, self.models):
            fr = fold[rows]
            for k in np.unique(fr):
                if models[k] is not None:
                    v = models[k].w / models[k].sd
                    V[fr == k] += v
                    c[fr == k] += models[k].mu @ v
        return V / len(self.models), c / len(self.models)

    def score_built(self, X: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Mean member score (len(rows), c) of the built features X of the questions `rows`."""
        acc = np.zeros(X.shape[:2])
        for fold, models in zip(self.folds, self.models):
            fr = fold[rows]
            for k in np.unique(fr):
                sel = fr == k
                if models[k] is not None:
                    acc[sel] += models[k].scores(X[sel])
        return acc / len(self.models)


def ensemble_weights(advs: list, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The round's ensemble as one linear score per question (V (n, f) float32, c (n,)): this round's
    adversary and those of the earlier rounds (AFLite-style memory, so a distractor chosen against one
    cue is not traded back for another), averaged. Every member is linear in the features, so is their
    mean: a candidate's pair part and its set-level distance part can be scored apart."""
    parts = [a.weights(rows) for a in advs]
    return (np.mean([p[0] for p in parts], axis=0).astype(np.float32),
            np.mean([p[1] for p in parts], axis=0))


def _mean_scores(advs: list, rows: np.ndarray, build, width: int) -> np.ndarray:
    """Scores (n, c) of the questions `rows` by the round's ensemble (`ensemble_weights`). `build(rows)`
    gives features (n, c, f) for any number c of choices or candidates; `width` = c * f bounds the rows
    built at once."""
    chunk = max(1, FEATURE_BUDGET // max(width, 1))
    V, c = ensemble_weights(advs, rows)
    out = []
    for s in range(0, len(rows), chunk):
        X = build(rows[s:s + chunk])
        out.append(np.einsum("ncf,nf->nc", X, V[s:s + chunk]) - c[s:s + chunk, None])
    return np.concatenate(out) if out else np.zeros((0, 0))


def answer_rank(S: np.ndarray, col: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(..., c) scores and the answer's column (...,) -> (the answer's rank: how many other choices score
    above it, 0 = the adversary picks it; the gap to the nearest other score: how distinguishable it is)."""
    sa = np.take_along_axis(S, col[..., None], -1)
    other = np.arange(S.shape[-1]) != col[..., None]
    rank = ((S > sa) & other).sum(-1)
    gap = np.where(other, np.abs(S - sa), np.inf).min(-1)
    return rank, gap


def target_ranks(qkeys: np.ndarray, seed: int) -> np.ndarray:
    """The adversary rank AF aims each question's answer at: uniform over 0..3 from the seeded question
    key, so the adversary's pick is the answer for a quarter of the questions -- never all (solvable),
    never none (the answer then is the choice that looks least like one: a reversed cue)."""
    return (splitmix64(qkeys ^ np.uint64(stable_key("af-target", seed))) % np.uint64(N_RANKS)).astype(np.int64)


def objective(rank: np.ndarray, gap: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Lexicographic: distance of the answer's rank to its target first, then its score gap to the
    nearest other choice (an indistinguishable answer is best); lower is better."""
    return np.abs(rank - target) + gap / (1.0 + gap)


def probe_accuracy(X: np.ndarray, y: np.ndarray, rkeys: np.ndarray, seed: int) -> float | None:
    """The learned question-only probe (cross-fitted, 5 folds by recipe): the share of questions it solves."""
    if len(y) == 0 or len(np.unique(rkeys)) < 2:
        return None
    s = cross_fitted_scores(X, y, rkeys.astype(np.int64), n_folds=min(N_FOLDS, len(np.unique(rkeys))),
                            seed=PROBE["seed"] + seed, C=PROBE["C"])
    return round(float((np.argmax(s, axis=1) == y).mean()), 4)


# ----------------------------------------------------------------------------- candidate pools

def _members(item_group: np.ndarray, query_group: np.ndarray) -> np.ndarray:
    """(n, W) items whose group equals each query's group (-1 padding; a query group < 0 has none)."""
    order = np.argsort(item_group, kind="stable")
    g = item_group[order]
    start = np.searchsorted(g, query_group, "left")
    cnt = np.where(query_group >= 0, np.searchsorted(g, query_group, "right") - start, 0)
    j = np.arange(max(int(cnt.max()) if len(cnt) else 0, 1))[None, :]
    return np.where(j < cnt[:, None], order[np.minimum(start[:, None] + j, len(order) - 1)], -1)


def _first_by_key(cand: np.ndarray, qkeys: np.ndarray, item_keys: np.ndarray, cap: int) -> np.ndarray:
    """Per row, the first `cap` valid candidates in seeded pick order (-1 padding)."""
    order = np.argsort(pick_keys(qkeys, item_keys, cand), axis=1, kind="stable")[:, :cap]
    out = np.take_along_axis(cand, order, 1)
    width = max(int((out >= 0).sum(1).max()) if len(out) else 0, 1)
    return out[:, :width]


def _dedupe(cand: np.ndarray) -> np.ndarray:
    """Per row, keep the first occurrence of each item (pools are concatenated in preference order)."""
    order = np.argsort(np.where(cand >= 0, cand, np.iinfo(np.int64).max), axis=1, kind="stable")
    s = np.take_along_axis(cand, order, 1)
    dup = np.zeros_like(s, dtype=bool)
    dup[:, 1:] = (s[:, 1:] == s[:, :-1]) & (s[:, 1:] >= 0)
    out = cand.copy()
    np.put_along_axis(out, order, np.where(dup, -1, s), 1)
    return out


def extra_pools(sp, pools: tuple, anchor: np.ndarray, shown_steps: np.ndarray, qkeys: np.ndarray,
                block: int = 2048) -> dict[str, np.ndarray]:
    """The `author` and `recipe` pools of n questions, each (n, <=POOL_CAP) item rows in seeded order.
    anchor (n,): an item of the question's recipe (its recipe, split and author); shown_steps (n, s):
    steps the question shows (the answer's included) -- never in the `recipe` pool."""
    out = {}
    split_code = np.unique(sp.splits, return_inverse=True)[1]
    n_split = int(split_code.max()) + 1 if len(split_code) else 1
    groups = {"author": (np.where(sp.author_code >= 0, sp.author_code * n_split + split_code, -1),
                         lambda rows: np.where(sp.author_code[anchor[rows]] >= 0,
                                               sp.author_code[anchor[rows]] * n_split + split_code[anchor[rows]], -1)),
              "recipe": (sp.recipe_code, lambda rows: sp.recipe_code[anchor[rows]])}
    for name in pools:
        if name not in groups:
            continue
        item_group, query = groups[name]
        parts = []
        for s in range(0, len(anchor), block):
            rows = np.arange(s, min(s + block, len(anchor)))
            cand = _members(item_group, query(rows))
            own = sp.recipe_code[np.maximum(cand, 0)] == sp.recipe_code[anchor[rows]][:, None]
            if name == "author":
                cand = np.where(own, -1, cand)
            else:
                at_shown = (sp.step_idx[np.maximum(cand, 0)][..., None] == shown_steps[rows][:, None, :]).any(-1)
                cand = np.where(at_shown, -1, cand)
            parts.append(_first_by_key(cand, qkeys[rows], sp.item_keys, POOL_CAP))
        width = max(p.shape[1] for p in parts) if parts else 1
        out[name] = np.concatenate([np.pad(p, ((0, 0), (0, width - p.shape[1])), constant_values=-1)
                                    for p in parts]) if parts else np.full((0, 1), -1, dtype=np.int64)
    return out


def intro(sp, items: np.ndarray) -> np.ndarray:
    """(K, M): is item items[k, m] of a recipe's intro (step 0)? No question shows or asks about an intro
    (sql/queries/eligible_recipes.sql), so a distractor from one is a choice that is never the answer. Its
    title is the recipe's name: on the demo 14-24% of the textual cloze distractors were, and a question-only
    model on the titles' words read them as wrong (features/diagnostics/words_probe.py). Padding (-1): False."""
    return (items >= 0) & (sp.step_idx[np.maximum(items, 0)] == 0)


def _off_gap(sp, b, keep: np.ndarray, rc: np.ndarray) -> np.ndarray:
    """The `recipe` pool rc (K, M) without the steps between the placeholder's shown neighbours: such a
    step could fill the placeholder as well as the answer's step, for a reader of the recipe."""
    K = len(keep)
    steps_q, col_a, n_cols = b.sk.steps[keep], b.answer_col[keep], b.sk.steps.shape[1]
    gap_lo = np.where(col_a > 0, steps_q[np.arange(K), np.maximum(col_a - 1, 0)], -1)
    gap_hi = np.where(col_a < n_cols - 1, steps_q[np.arange(K), np.minimum(col_a + 1, n_cols - 1)],
                      np.iinfo(np.int64).max)
    rs = sp.step_idx[np.maximum(rc, 0)]
    return np.where((rc >= 0) & (rs > gap_lo[:, None]) & (rs < gap_hi[:, None]), -1, rc)


def answerable(sp, ans: np.ndarray, cand: np.ndarray, twins=None) -> np.ndarray:
    """cand (K, M) without what a reader could not tell from answer ans[k]: a text twin of the answer's
    step (the same step in another recipe, said the same way, is as right an answer: twins.py; `twins`: the
    rule's table, default the words) and a photo the answer step's text cannot tell from the answer's
    (READ_MARGIN)."""
    a_row = sp.word_row[ans][:, None]
    twins = sp.step_words if twins is None else twins
    cand = np.where((cand >= 0) & twins.twins(a_row, sp.word_row[np.maximum(cand, 0)]), -1, cand)
    return np.where((cand >= 0) & readable(sp, ans, np.maximum(cand, 0)), cand, -1)


def kitchen_candidates(sp, b, rows: np.ndarray, ans: np.ndarray) -> np.ndarray:
    """Visual cloze beyond the knobs (`distractors = "kitchen"`): per question of batch rows `rows`, the
    photos of its own recipe -- its kitchen, counter, light and framing -- from steps it neither shows
    nor could fill the placeholder with (between the placeholder's shown neighbours), that the answer
    step's text tells from the answer and that are no text twin of it; (K, <=POOL_CAP) in the seeded
    pick order of the question (-1 padding). A photo of the answer's own step is never one."""
    rc = extra_pools(sp, ("recipe",), ans, b.sk.steps[rows], b.qkeys[rows])["recipe"]
    return _compact(answerable(sp, ans, _off_gap(sp, b, rows, rc)))


def _compact(cand: np.ndarray) -> np.ndarray:
    """Valid cells first in each row, their order kept (-1 padding)."""
    order = np.argsort(cand < 0, axis=1, kind="stable")
    out = np.take_along_axis(cand, order, 1)
    width = max(int((out >= 0).sum(1).max()) if len(out) else 0, 1)
    return out[:, :width]


def _pool_label(sp, cand: np.ndarray, anchor: np.ndarray) -> np.ndarray:
    """What a candidate is, whichever pool listed it first: 0 ball (another author's recipe, or no
    author recorded), 1 author (another recipe by the question's author), 2 recipe (the question's recipe)."""
    c = np.maximum(cand, 0)
    same_recipe = sp.recipe_code[c] == sp.recipe_code[anchor][:, None]
    a = sp.author_code[anchor][:, None]
    same_author = (a >= 0) & (sp.author_code[c] == a)
    return np.where(same_recipe, 2, np.where(same_author, 1, 0))


def _dist(sp, cand: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Exact cosine distance of candidates (n, M) to one reference item per row (as DenseKnn computes it)."""
    d = 1.0 - np.einsum("qmd,qd->qm", sp.vecs[np.maximum(cand, 0)], sp.vecs[ref]).astype(np.float64)
    return np.where(cand >= 0, d, np.nan)


def _rebalance(ranks: np.ndarray, splits: np.ndarray, keys: np.ndarray, alive: np.ndarray) -> np.ndarray:
    """Keep per split the same number of questions per rank (0..3), the first in `keys` order."""
    keep = alive.copy()
    for s in np.unique(splits[alive]):
        in_s = alive & (splits == s)
        n = min(int((in_s & (ranks == r)).sum()) for r in range(N_RANKS))
        for r in range(N_RANKS):
            members = np.flatnonzero(in_s & (ranks == r))
            keep[members[np.argsort(keys[members], kind="stable")][n:]] = False
    return keep


def _cap_extremes(adv_rank: np.ndarray, splits: np.ndarray, gap: np.ndarray) -> np.ndarray:
    """Keep per split at most a quarter of the kept questions at the adversary's rank 0 (it picks the
    answer) and at most a quarter at rank 3 (the answer is the choice it finds least plausible: the
    reversed cue), the least distinguishable (smallest `gap`) first; ranks 1 and 2 are all kept.
    The largest such subset: (n0, n3) is the greatest fixed point of n0 = min(c0, (m + n3) // 3),
    n3 = min(c3, (m + n0) // 3) with m the questions at ranks 1-2."""
    keep = np.ones(len(adv_rank), dtype=bool)
    for sp_ in np.unique(splits):
        in_s = splits == sp_
        c = np.bincount(adv_rank[in_s], minlength=N_RANKS)
        m = int(c[1:N_RANKS - 1].sum())
        n0, n3 = int(c[0]), int(c[-1])
        while True:
            a, z = min(int(c[0]), (m + n3) // 3), min(int(c[-1]), (m + n0) // 3)
            if (a, z) == (n0, n3):
                break
            n0, n3 = a, z
        for r, n in ((0, n0), (N_RANKS - 1, n3)):
            members = np.flatnonzero(in_s & (adv_rank == r))
            keep[members[np.argsort(gap[members], kind="stable")][n:]] = False
    return keep


def _nothing(ds) -> np.ndarray:
    """No knob-valid question: nothing to filter (recorded as such)."""
    ds.adversarial = {**config(ds), "n_knob_questions": 0, "n_kept": 0, "kept_share": None}
    return np.zeros(0, dtype=np.int64)


def _in_proportion(adv_rank: np.ndarray, groups: np.ndarray, gap: np.ndarray, alive: np.ndarray) -> np.ndarray:
    """A trim order (lower first kept) that takes every adversary rank of a group in proportion, the least
    distinguishable first: the i-th of c alive questions of a (group, rank) gets (i + 0.5) / c. Trimming
    a group to its first n keeps its rank shares, so the cap of `_cap_extremes` still holds (+-1)."""
    key = np.full(len(adv_rank), np.inf)
    for g in np.unique(groups):
        for r in range(N_RANKS):
            m = np.flatnonzero(alive & (groups == g) & (adv_rank == r))
            key[m[np.argsort(gap[m], kind="stable")]] = (np.arange(len(m)) + 0.5) / max(len(m), 1)
    return key


def _finish(ds, b, keep, adv_rank, gap, rank, exact, K, stats, bad: dict | None = None) -> np.ndarray:
    """The drop rule (AFLite: drop what stays predictable, in either direction): `_cap_extremes` on the
    answer's rank under the final held-out ensemble (`adv_rank`), the least distinguishable kept first
    (smallest score `gap` to the nearest other choice): the ensemble picks the answer of at most a
    quarter of the kept questions and finds it the least plausible choice for at most a quarter. In
    knob-3 balanced mode the cap holds per split and distance rank (`rank`), and the distance ranks are
    then made equal again, each trimmed group keeping its adversary ranks in proportion. Returns the
    kept rows. `bad` {skip reason: rows} (`af_text_twin`: a text twin left among the choices;
    `af_unreadable`: a choice the step text cannot tell from the answer) are dropped first, under the
    first reason that holds, in their own group, so the caps hold on the others. With `ds.af_drop`
    "pooled" there is no cap: the pooled GM3C adversary (`mrqa af-pool`) drops instead, and the room this
    drop would have taken (9-10% of a knob-2 = 0 setting, already near the 40% floor after the twins)
    is its."""
    splits = b.splits[keep]
    groups = np.char.add(np.char.add(splits.astype(str), "|"), rank.astype(str)) if exact else splits
    bad_any = np.zeros(len(adv_rank), dtype=bool)
    for reason, rows_bad in (bad or {}).items():
        ds.skip(reason, (rows_bad & ~bad_any).sum())
        bad_any |= rows_bad
    bad = bad_any
    groups = np.where(bad, "\x00twin", np.asarray(groups).astype(str))
    # "pooled": the drop of what stays predictable is the pooled adversary's (`mrqa af-pool`), with the room
    alive = (_cap_extremes(adv_rank, groups, gap) if ds.af_drop == "linear" else np.ones(len(bad), bool)) & ~bad
    ds.skip("af_predictable", (~alive & ~bad).sum())
    stats = {**stats, "adversary_rank_counts": np.bincount(adv_rank, minlength=N_RANKS).tolist()}
    if exact:
        kept = _rebalance(rank, splits, _in_proportion(adv_rank, groups, gap, alive), alive)
        ds.skip("af_rank_rebalance", (alive & ~kept).sum())
        alive = kept
        ds.notes = {**ds.notes, "rank_counts": np.bincount(rank[alive], minlength=N_RANKS).tolist()}
    ds.adversarial = {**config(ds), **stats, "n_knob_questions": int(K), "n_kept": int(alive.sum()),
                      "kept_share": round(float(alive.mean()), 4) if K else None}
    return np.flatnonzero(alive)


# ----------------------------------------------------------------------------- cloze

def _single_blas_thread(fn):
    """Run AF with one BLAS thread (`one_blas_thread`): its many small solves and products are slower
    threaded (on 2 busy cores, 6x in wall time), and the datasets run on several threads already."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from features.diagnostics.question_only import one_blas_thread
        with one_blas_thread():
            return fn(*args, **kwargs)
    return wrapper


@_single_blas_thread
def refine_cloze(ds, b, sp, P: dict, keep: np.ndarray, picks: np.ndarray, need: np.ndarray, exact: bool,
                 lo: np.ndarray | None, hi: np.ndarray | None, kitchen: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray, dict]:
    """AF of the cloze questions `keep` (batch rows) with knob-selected distractors `picks` (K, 3).
    need (K,): closer-to-the-question distractors required (exactly, when `exact`); lo/hi (K,): the ball.
    kitchen (K, M): beyond the knobs, the candidates instead of the ball and its pools (`kitchen_candidates`).
    Returns (rows of `keep` kept, their distractors, provenance columns)."""
    K, R, seed = len(keep), ds.params.af_rounds, ds.seed
    if K == 0:
        return _nothing(ds), picks, {}
    ans, pos, qkeys = P["ans"][keep], b.pos[keep], b.qkeys[keep]
    ctx = _unit(P["qmean"][keep])
    d_ans_q = P["d_ans_q"][keep]
    rkeys = recipe_keys(b.recipe_ids[keep])
    title = sp.name == "title"
    if kitchen is None:
        # candidates: the ball pool as the setting, then the extra pools; every one inside the ball
        ball = np.where((P["C"][keep] >= 0) & (P["D"][keep] > lo[:, None]) & (P["D"][keep] < hi[:, None]),
                        P["C"][keep], -1)
        extra = extra_pools(sp, CLOZE_POOLS, ans, b.sk.steps[keep], qkeys)
        extra["recipe"] = _off_gap(sp, b, keep, extra["recipe"])
        parts = [ball]
        for name in CLOZE_POOLS[1:]:
            c = extra[name]
            d = _dist(sp, c, ans)
            ok = (c >= 0) & (d > lo[:, None]) & (d < hi[:, None])
            if title:                                 # never the answer's own text
                ok &= sp.text_code[np.maximum(c, 0)] != sp.text_code[ans][:, None]
            parts.append(np.where(ok, c, -1))
        cand = answerable(sp, ans, _dedupe(np.concatenate(parts, axis=1)), twin_table(sp, ds))
        if title:                       # a recipe's name (its intro's title) is never an answer: never a choice
            cand = np.where(intro(sp, cand), -1, cand)
    else:                               # beyond the knobs: the recipe's own photos, answerable already
        cand = kitchen
    # a text twin of the answer step, or a photo its text cannot tell from the answer's: knob picks that
    # are must be replaced
    a_row = sp.word_row[ans][:, None]
    cur_twin = twin_table(sp, ds).twins(a_row, sp.word_row[picks])
    n_twin_picks = int(cur_twin.sum())
    cur_unread = ~readable(sp, ans, picks)
    n_unread_picks = int(cur_unread.sum())
    cur_intro = intro(sp, picks) if title else np.zeros(picks.shape, dtype=bool)
    n_intro_picks = int(cur_intro.sum())
    pool = _pool_label(sp, cand, ans)
    cand_closer = sp.cos_to(cand, P["qmean"][keep]) < d_ans_q[:, None]
    cand_txt = sp.text_code[np.maximum(cand, 0)]
    d = sp.vecs.shape[1]
    rows = np.arange(K)
    aim = target_ranks(qkeys, seed)         # the answer's adversary rank AF aims at
    # the stage cue (sequence_features): the placeholder's slot and its neighbouring shown items
    n_slots, slot = b.items.shape[1], b.answer_col[keep]
    staged = ds.task == "visual_cloze"
    # textual cloze: the corpus's order of titles (ORDER_MEMBERS), a block where visual cloze has the stage cue
    ordered = title and sp.order is not None
    basis = sequence_basis(sp.vecs) if staged else None
    nb = {}
    for name, step in (("prev", -1), ("next", 1)):
        j = slot + step
        ok = (j >= 0) & (j < n_slots)
        it = b.items[keep][rows, np.clip(j, 0, n_slots - 1)]
        nb[name] = np.where(ok[:, None], sp.vecs[np.maximum(it, 0)], 0.0).astype(np.float32)

    # the shown items of each question (the question's items but the answer's)
    shown_cols = np.arange(b.items.shape[1])[None, :] != b.answer_col[keep][:, None]
    shown = b.items[keep][shown_cols].reshape(K, -1)
    if ordered:
        o_shown = sp.order_row[shown]
        o_len = np.full(K, shown.shape[1], np.int64)
        o_rec = np.array([sp.order.recipe_index.get(r, -1) for r in b.recipe_ids[keep]], np.int64)

    def order_of(ch, r):                     # (len(r), c, N_ORDER_FEATURES): the order figures of choices ch[r]
        o = np.where(ch[r] >= 0, sp.order_row[np.maximum(ch[r], 0)], -1)
        return sp.order.batch(o_shown[r], o_len[r], slot[r], o, o_rec[r]).astype(np.float32)

    n_ord = N_ORDER_FEATURES if ordered else 0
    cand_ord = order_of(cand, rows) if ordered else None

    def build_pairs(ch, room: int = 0):      # room: columns left for the set-level cues (fill_set_features)
        def build(r):
            V = sp.vecs[np.maximum(ch[r], 0)]
            if not staged:
                X = pair_features(np.broadcast_to(ctx[r][:, None, :], (len(r), ch.shape[1], d)), V, room + n_ord)
                if ordered:
                    X[..., 4 * d:4 * d + n_ord] = cand_ord[r] if ch is cand else order_of(ch, r)
                return X
            return pair_sequence_features(ctx[r], V, nb["prev"][r], nb["next"][r], slot[r], n_slots, basis, room)
        return build

    def build_choices(ch):                   # the judge's features: pairs + the set-level cues
        def build(r):
            X = build_pairs(ch, N_SET_FEATURES)(r)
            V = sp.vecs[np.maximum(ch[r], 0)]
            return fill_set_features(X, pair_distance(X, d), choice_spread(V), item_similarity(sp.vecs[shown[r]], V))
        return build

    # pair part of a candidate's score and its distance to the context: the same in every set
    n_seq = 2 * SEQ_RANK ** 2 + n_slots * SEQ_RANK if staged else n_ord
    narrow = ORDER_MEMBERS if ordered else SEQUENCE_MEMBERS
    Xc_width = cand.shape[1] * (4 * d + n_seq)
    chunk = max(1, FEATURE_BUDGET // max(Xc_width, 1))
    cand_dist = np.concatenate([pair_distance(build_pairs(cand)(rows[s:s + chunk]), d)
                                for s in range(0, K, chunk)]) if K else np.zeros(cand.shape)
    cand_sim = np.concatenate([item_similarity(sp.vecs[shown[s:s + chunk]], sp.vecs[np.maximum(cand[s:s + chunk], 0)])
                               for s in range(0, K, chunk)]) if K else np.zeros(cand.shape + (3,), np.float32)

    def cand_pair_scores(Vp):
        return np.concatenate([np.einsum("nmf,nf->nm", build_pairs(cand)(rows[s:s + chunk]), Vp[s:s + chunk])
                               for s in range(0, K, chunk)]) if K else np.zeros(cand.shape)

    cur = picks.copy()
    cur_pool = _pool_label(sp, picks, ans)
    cur_closer = sp.cos_to(cur, P["qmean"][keep]) < d_ans_q[:, None]
    changed_in = np.zeros(K, dtype=np.int64)
    solved_by_round, advs = [], []
    for rnd in range(1, R + 1):
        choices = _insert(cur, ans, pos)
        X = build_choices(choices)(rows)
        advs.append(Adversary(X, pos, rkeys, seed, advs[-1] if advs else None, n_seq, narrow))
        V, c0 = ensemble_weights(advs, rows)
        Vp, Vd = V[:, :-N_SET_FEATURES], V[:, -N_SET_FEATURES:]
        sp_ch = np.einsum("ncf,nf->nc", X[..., :-N_SET_FEATURES], Vp)       # (K, 4) pair parts
        dist_ch = pair_distance(X[..., :-N_SET_FEATURES], d)
        sim_ch = X[..., -cand_sim.shape[-1]:].copy()                          # (K, 4, 3) item similarities
        S = sp_ch + np.einsum("ncf,nf->nc", X[..., -N_SET_FEATURES:], Vd) - c0[:, None]
        solved_by_round.append(round(float((answer_rank(S, pos)[0] == 0).mean()), 4) if K else None)
        sp_c = cand_pair_scores(Vp)
        for s in range(3):                       # each distractor slot in turn
            col = s + (s >= pos)                 # its column among the choices
            used = (cand[..., None] == cur[:, None, :]).any(-1)
            n_new = cur_closer.sum(1)[:, None] - cur_closer[rows, s][:, None] + cand_closer
            elig = (cand >= 0) & ~used & ((n_new == need[:, None]) if exact else (n_new >= need[:, None]))
            if title:                                # choices keep distinct texts
                others = np.where(np.arange(3)[None, :] == s, -2, sp.text_code[cur])
                elig &= ~(cand_txt[..., None] == others[:, None, :]).any(-1)
            # every candidate in the slot: the new set's scores (the others' set-level cues move too:
            # distances ranked within the set, and every choice's spread among the choices)
            U = sp.vecs[_insert(cur, ans, pos)]          # the space's vectors are unit already
            gram = np.einsum("ncd,nkd->nck", U, U)
            obj = np.full(cand.shape, np.inf)
            blk = max(1, SLOT_BUDGET // max(cand.shape[1] * d, 1))
            for b0 in range(0, K, blk):
                r = rows[b0:b0 + blk]
                one = np.arange(4)[None, None, :] == col[r][:, None, None]
                sp_set = np.where(one, sp_c[r][..., None], sp_ch[r][:, None, :])
                d_set = np.where(one, cand_dist[r][..., None], dist_ch[r][:, None, :])
                cand_cos = np.einsum("nmd,ncd->nmc", sp.vecs[np.maximum(cand[r], 0)], U[r])
                s_set = spread_after_swap(gram[r], cand_cos, col[r])
                i_set = np.where(one[..., None], cand_sim[r][:, :, None, :], sim_ch[r][:, None, :, :])
                S_set = (sp_set + np.einsum("nmcf,nf->nmc", set_features(d_set, s_set, i_set), Vd[r])
                         - c0[r][:, None, None])
                rk, gp = answer_rank(S_set, np.broadcast_to(pos[r][:, None], cand[r].shape))
                obj[r] = np.where(elig[r], objective(rk, gp, aim[r][:, None]), np.inf)
            now = np.where(cur_twin[:, s] | cur_unread[:, s] | cur_intro[:, s], np.inf,
                           objective(*answer_rank(S, pos), aim))
            best = np.argmin(obj, axis=1)
            do = np.flatnonzero(obj[rows, best] < now - 1e-9)
            cc = best[do]
            cur[do, s] = cand[do, cc]
            cur_pool[do, s] = pool[do, cc]
            cur_closer[do, s] = cand_closer[do, cc]
            cur_twin[do, s] = False
            cur_unread[do, s] = False
            cur_intro[do, s] = False
            sp_ch[do, col[do]] = sp_c[do, cc]
            dist_ch[do, col[do]] = cand_dist[do, cc]
            sim_ch[do, col[do]] = cand_sim[do, cc]
            spread_ch = choice_spread(sp.vecs[_insert(cur, ans, pos)])
            S = sp_ch + np.einsum("ncf,nf->nc", set_features(dist_ch, spread_ch, sim_ch), Vd) - c0[:, None]
            changed_in[do] = rnd
    choices = _insert(cur, ans, pos)
    X = build_choices(choices)(rows)
    final = Adversary(X, pos, rkeys, seed ^ 0x5EED, None, n_seq, narrow).score_built(X, rows)
    adv_rank, gap = answer_rank(final, pos)
    base_X = build_choices(_insert(picks, ans, pos))(rows)
    stats = {"solved_share_by_round": solved_by_round,
             "solved_share_final": round(float((adv_rank == 0).mean()), 4) if K else None,
             "probe_before": probe_accuracy(base_X, pos, rkeys, seed),
             "twin_distractors_in_knob_picks": n_twin_picks, "unreadable_distractors_in_knob_picks": n_unread_picks,
             "answerability_rule": sp.step_text is not None,
             **({"intro_titles_in_knob_picks": n_intro_picks} if title else {})}
    sub = _finish(ds, b, keep, adv_rank, gap, cur_closer.sum(1), exact, K, stats,
                  bad={"af_text_twin": cur_twin.any(1), "af_unreadable": cur_unread.any(1),
                       **({"af_intro_title": cur_intro.any(1)} if title else {})})
    ds.adversarial["probe_after"] = probe_accuracy(X[sub], pos[sub], rkeys[sub], seed)
    ds.adversarial["distractors_by_pool"] = {name: int((cur_pool[sub] == i).sum())
                                             for i, name in enumerate(CLOZE_POOLS)}
    names = np.array(CLOZE_POOLS + ("answer",), dtype=object)
    choice_pool = _insert(cur_pool[sub], np.full(len(sub), len(CLOZE_POOLS)), pos[sub])
    prov = {"af_round": pa.array(changed_in[sub]), "af_pools": _lists(names[choice_pool], pa.string()),
            "af_scores": _lists(_r(final[sub]))}
    prov["af_alternates"] = alternates(sp, cand[sub], cur[sub], pool[sub], cand_closer[sub], ans[sub],
                                       P["qmean"][keep][sub])
    return sub, cur[sub], prov


def alternates(sp, cand: np.ndarray, cur: np.ndarray, pool: np.ndarray, closer: np.ndarray, ans: np.ndarray,
               qmean: np.ndarray, cap: int = ALT_CAP) -> pa.ListArray:
    """Per question, the first `cap` (seeded candidate order) knob-valid candidates that are not among its
    final distractors: every one inside the setting's ball, no text twin of the answer step, told from the
    answer by the step text, never the answer's own step nor one that could fill the placeholder. A later
    step that replaces distractors (the pooled adversary, features/datasets/af_pooled.py) swaps within
    this list, so it needs no feature space: a swap that keeps the `closer` count keeps knob 3. Textual
    cloze (the title space): each alternate also records its title (`text`), which a swap writes as the
    choice; no alternate's title is the answer's (refine_cloze leaves those out of the candidates)."""
    alive = (cand >= 0) & ~(cand[..., None] == cur[:, None, :]).any(-1)
    take = alive & (np.cumsum(alive, axis=1) <= cap)
    qi, ci = np.nonzero(take)
    it = cand[qi, ci]
    dist = 1.0 - np.einsum("nd,nd->n", sp.vecs[it], sp.vecs[ans[qi]]).astype(np.float64)
    dq = sp.cos_to(it[:, None], qmean[qi])[:, 0]
    names = np.array(CLOZE_POOLS, dtype=object)
    cols = [pa.array(closer[qi, ci]), pa.array(_r(dq)), pa.array(_r(dist)),
            pa.array(sp.item_ids[it].tolist(), pa.string()), pa.array(names[pool[qi, ci]].tolist(), pa.string()),
            pa.array(sp.recipe_ids[it].tolist(), pa.string())]
    fields = ["closer", "dist_q", "distance", "item", "pool", "recipe_id"]
    if sp.name == "title":
        cols.append(pa.array(sp.labels[it].tolist(), pa.string()))
        fields.append("text")
    rows = pa.StructArray.from_arrays(cols, names=fields)
    offsets = np.concatenate([[0], np.cumsum(take.sum(1))]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), rows)


# ----------------------------------------------------------------------------- coherence

def _coherence_build(sp, items: np.ndarray, cand: np.ndarray):
    """Features of each candidate as the foreign image among the 3 coherent ones: (n, M*4, 4d + 7), per
    candidate the 3 coherent images (context: the other two + the candidate), then the candidate
    (context: the 3 coherent); each with the pair features and the distance probe's cues within its
    4-image set (distance to the mean of the other three, gaps, rank) -- the judge's features."""
    def build(r):
        v = sp.vecs[items[r]].astype(np.float32)                         # (n, 3, d)
        c = sp.vecs[np.maximum(cand[r], 0)].astype(np.float32)           # (n, M, d)
        tot = v.sum(1)                                                   # (n, d)
        ctx_coh = _unit((tot[:, None, None, :] - v[:, None, :, :]) + c[:, :, None, :])   # (n, M, 3, d)
        ctx_c = np.broadcast_to(_unit(tot)[:, None, None, :], c.shape[:2] + (1, v.shape[2]))
        ctx = np.concatenate([ctx_coh, ctx_c], axis=2)
        ch = np.concatenate([np.broadcast_to(v[:, None], ctx_coh.shape), c[:, :, None, :]], axis=2)
        n, m = c.shape[:2]
        X = pair_features(ctx, ch, N_SET_FEATURES)                       # (n, M, 4, 4d + the set-level cues)
        return fill_set_features(X, pair_distance(X, v.shape[2]), choice_spread(ch),
                                 others_similarity(ch)).reshape(n, m * 4, -1)
    return build


def foreign_fields(sp, P: dict, keep: np.ndarray, cand: np.ndarray) -> tuple[np.ndarray, ...]:
    """What the provenance records of candidate foreign images cand (K, M) of the coherence questions
    `keep` (rows of the pool P): the column of the nearest coherent image (anchor), its cosine distance,
    the distance to the question mean and the foreign rank (`coherence_scores`), each (K, M)."""
    dd = sp.dots(cand, P["qv"][keep])                                            # (K, M, 4)
    dq, frank, _ = coherence_scores({"dd": dd, "cs": P["cs"][keep], "ss": P["ss"][keep]}, np.arange(len(keep)))
    dist3 = 1.0 - dd[..., 1:]
    near = np.argmin(dist3, axis=-1)
    return near, np.take_along_axis(dist3, near[..., None], -1)[..., 0], dq, frank


def twin_of_recipe(sp, cand: np.ndarray, recipe_ids: np.ndarray, block: int = 256) -> np.ndarray:
    """(K, M): is candidate item cand[k, m] a text twin of any step of recipe_ids[k]?"""
    steps = sp.step_words.recipe_rows(recipe_ids)
    out = np.zeros(cand.shape, dtype=bool)
    for s in range(0, len(cand), block):
        c = np.where(cand[s:s + block] >= 0, sp.word_row[np.maximum(cand[s:s + block], 0)], -1)
        out[s:s + block] = sp.step_words.twins(c[:, :, None], steps[s:s + block][:, None, :]).any(-1)
    return out


def _foreign_rank(S: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """(n, M*4) scores in _coherence_build's layout -> the foreign image's `answer_rank` (n, M) in each
    candidate's set: its rank (0 = the adversary spots it) and its score gap to the nearest coherent one."""
    S = S.reshape(len(S), m, 4)
    return answer_rank(S, np.full(S.shape[:2], 3))


@_single_blas_thread
def refine_coherence(ds, b, sp, P: dict, keep: np.ndarray, foreign: np.ndarray, ball_elig: np.ndarray | None,
                     rule: np.ndarray | None, target: np.ndarray | None, lo: np.ndarray | None,
                     hi: np.ndarray | None, exact: bool, matched: np.ndarray | None = None):
    """AF of the coherence questions `keep` with knob-selected foreign images `foreign` (K,).
    ball_elig (K, W): the ball pool's eligible cells (knob 2 and knob 3 of the setting); rule (K,):
    the knob-3 rule per question (paper | none | rank); target (K,): the rank under `rank`.
    matched (K, M): beyond the knobs (features/datasets/matched.py), the candidates instead of the ball
    and author pools (valid cells only; `foreign` among them); the knob arguments are then unused, and their
    pool is named by the setting's distractors (`matched`, or `author`: the matched rule among the author's).
    Returns (rows of `keep` kept, {foreign, anchor, distance, dist_q, foreign_rank} of the kept, provenance)."""
    K, R, seed = len(keep), ds.params.af_rounds, ds.seed
    if K == 0:
        return _nothing(ds), {k: foreign for k in ("foreign", "anchor", "D", "dq", "frank")}, {}
    items, pos, qkeys = b.items[keep], b.pos[keep], b.qkeys[keep]
    rkeys = recipe_keys(b.recipe_ids[keep])
    rows = np.arange(K)
    d = sp.vecs.shape[1]
    # ball pool: the setting's eligible cells, with their anchors and knob-3 scores
    # (the knob pick, then the first eligible cells in the seeded pick order, BALL_CAP in all: the union
    # of 3 neighbour lists is long)
    if matched is None:
        is_pick = P["C"][keep] == foreign[:, None]
        first = np.argsort(np.where(is_pick, 0, np.where(ball_elig, 1, 2)), axis=1, kind="stable")[:, :BALL_CAP]
        take = lambda a: np.take_along_axis(a[keep], first, 1)
        cand_b = np.where(np.take_along_axis(ball_elig, first, 1), take(P["C"]), -1)
        fields_b = {"anchor": take(P["anchor"]), "D": take(P["D"]), "dq": take(P["dq"]), "frank": take(P["frank"])}
        # author pool: recomputed distances (anchor = the nearest coherent image), same knob-2/3 tests
        ca = extra_pools(sp, ("author",), items[:, 0], b.sk.steps[keep], qkeys)["author"]
    else:                                   # the matched pool alone, its fields computed as the author pool's
        cand_b = np.zeros((K, 0), dtype=np.int64)
        fields_b = {"anchor": cand_b, "D": np.zeros((K, 0)), "dq": np.zeros((K, 0)), "frank": cand_b}
        ca = matched
    near, D, dq, frank = foreign_fields(sp, P, keep, ca)
    if matched is None:
        ok = (ca >= 0) & (D > lo[:, None]) & (D < hi[:, None])
        ok &= np.where((rule == "paper")[:, None], dq < P["min_pair"][keep][:, None], True)
        ok &= np.where((rule == "rank")[:, None], frank == target[:, None], True)
    else:
        ok = ca >= 0
    cand = _dedupe(np.concatenate([cand_b, np.where(ok, ca, -1)], axis=1))
    pool = _pool_label(sp, cand, items[:, 0]) if matched is None else np.zeros(cand.shape, dtype=np.int64)
    pool_names = COHERENCE_POOLS if matched is None else (ds.params.distractors,)
    fields = {"anchor": np.concatenate([fields_b["anchor"], np.take_along_axis(items, near, 1) if K else near], 1),
              "D": np.concatenate([fields_b["D"], D], 1), "dq": np.concatenate([fields_b["dq"], dq], 1),
              "frank": np.concatenate([fields_b["frank"], frank], 1)}
    cur_col = np.argmax(cand == foreign[:, None], axis=1)       # the knob pick is a ball (or matched) cell
    if K and not (cand[rows, cur_col] == foreign).all():
        raise AssertionError("adversarial: a knob-selected foreign image is not among its eligible cells")
    # a foreign photo whose step twins a step of the question's recipe reads as belonging to it: never
    # used (twins.py); a knob pick that is one must be replaced
    twin = (cand >= 0) & twin_of_recipe(sp, cand, b.recipe_ids[keep])
    n_twin_picks = int(twin[rows, cur_col].sum())
    # and the shown steps' texts must tell the foreign photo from the coherent ones (READ_MARGIN)
    unread = (cand >= 0) & ~readable_coherence(sp, items, np.maximum(cand, 0))
    n_unread_picks = int(unread[rows, cur_col].sum())
    changed_in = np.zeros(K, dtype=np.int64)
    solved_by_round = []

    def build_current(col):
        return _coherence_build(sp, items, np.take_along_axis(cand, col[:, None], 1))

    advs = []
    aim = target_ranks(qkeys, seed)         # the answer's adversary rank AF aims at
    width = cand.shape[1] * 4 * (4 * d + N_SET_FEATURES)
    for rnd in range(1, R + 1):
        cur = build_current(cur_col)
        X = cur(rows)                                            # (K, 4, f): coherent x3, foreign
        y = np.full(K, 3)
        advs.append(Adversary(X, y, rkeys, seed, advs[-1] if advs else None))
        rank_now = _foreign_rank(_mean_scores(advs, rows, cur, 4 * X.shape[2]), 1)[0][:, 0]
        solved_by_round.append(round(float((rank_now == 0).mean()), 4) if K else None)
        # every eligible candidate: the foreign image's rank in its own 4-image set, aimed at the target
        obj = np.where((cand >= 0) & ~twin & ~unread, objective(*_foreign_rank(_mean_scores(
            advs, rows, _coherence_build(sp, items, cand), width), cand.shape[1]), aim[:, None]), np.inf)
        best = np.argmin(obj, axis=1)
        do = np.flatnonzero(obj[rows, best] < obj[rows, cur_col] - 1e-9)
        cur_col[do] = best[do]
        changed_in[do] = rnd
    cur = build_current(cur_col)
    X = cur(rows)
    y = np.full(K, 3)
    final = Adversary(X, y, rkeys, seed ^ 0x5EED, None).score_built(X, rows)
    adv_rank, gap = (a[:, 0] for a in _foreign_rank(final, 1))
    g = lambda a: a[rows, cur_col]
    stats = {"solved_share_by_round": solved_by_round,
             "solved_share_final": round(float((adv_rank == 0).mean()), 4) if K else None,
             "probe_before": probe_accuracy(_coherence_build(sp, items, foreign[:, None])(rows), y, rkeys, seed),
             "twin_distractors_in_knob_picks": n_twin_picks, "unreadable_distractors_in_knob_picks": n_unread_picks,
             "answerability_rule": sp.step_text is not None}
    sub = _finish(ds, b, keep, adv_rank, gap, g(fields["frank"]), exact, K, stats,
                  bad={"af_text_twin": g(twin), "af_unreadable": g(unread)})
    ds.adversarial["probe_after"] = probe_accuracy(X[sub], y[sub], rkeys[sub], seed)
    ds.adversarial["foreign_by_pool"] = {name: int((g(pool)[sub] == i).sum()) for i, name in enumerate(pool_names)}
    # scores in choice order (the foreign image at pos)
    coh, fs = final[:, :3], final[:, 3]
    choice_scores = _insert(coh, fs, pos)[sub]
    names = np.array(pool_names + ("question",), dtype=object)
    choice_pool = _insert(np.full((K, 3), len(pool_names)), g(pool), pos)[sub]
    out = {"foreign": g(cand)[sub], "anchor": g(fields["anchor"])[sub], "D": g(fields["D"])[sub],
           "dq": g(fields["dq"])[sub], "frank": g(fields["frank"])[sub]}
    prov = {"af_round": pa.array(changed_in[sub]), "af_pools": _lists(names[choice_pool], pa.string()),
            "af_scores": _lists(_r(choice_scores))}
    valid = (cand >= 0) & ~twin & ~unread
    prov["distance_probe_hit"] = pa.array(_probe_hits(sp, items[sub], g(cand)[sub][:, None])[:, 0])
    prov["af_alternates"] = coherence_alternates(sp, items[sub], cand[sub], valid[sub] & (
        np.arange(cand.shape[1])[None, :] != cur_col[sub][:, None]), pool[sub], {k: v[sub] for k, v in fields.items()},
        names=pool_names)
    return sub, out, prov


def _probe_hits(sp, items: np.ndarray, cand: np.ndarray, block: int = 128) -> np.ndarray:
    """(K, M): would the distance probe (the image farthest from the mean of the other three) pick
    candidate cand[k, m] as the foreign image among the 3 coherent items[k]?"""
    out = np.zeros(cand.shape, dtype=bool)
    for s in range(0, len(cand), block):
        v = sp.vecs[items[s:s + block]].astype(np.float64)                     # (n, 3, d)
        c = sp.vecs[np.maximum(cand[s:s + block], 0)].astype(np.float64)       # (n, M, d)
        vv = np.concatenate([np.broadcast_to(v[:, None], (len(v), c.shape[1], 3, v.shape[-1])), c[:, :, None]], 2)
        rest = vv.sum(2, keepdims=True) - vv
        loo = 1.0 - (vv * rest).sum(-1) / np.maximum(np.linalg.norm(vv, axis=-1) * np.linalg.norm(rest, axis=-1),
                                                     1e-12)
        out[s:s + block] = np.argmax(loo, axis=-1) == 3
    return out & (cand >= 0)


def coherence_alternates(sp, items: np.ndarray, cand: np.ndarray, valid: np.ndarray, pool: np.ndarray,
                         fields: dict, cap: int = ALT_CAP, names: tuple = COHERENCE_POOLS) -> pa.ListArray:
    """Per coherence question, the first `cap` knob-valid foreign images (the setting's ball and knob-3
    rule, no text twin of a step of the recipe, told apart by the shown steps' texts) other than the
    chosen one, with what the provenance records of a foreign image: its anchor, distance, dist_q,
    foreign_rank, pool and whether the distance probe would spot it. The pooled adversary
    (features/datasets/af_pooled.py) swaps the foreign image within this list."""
    take = valid & (np.cumsum(valid, axis=1) <= cap)
    qi, ci = np.nonzero(take)
    it = cand[qi, ci]
    hits = _probe_hits(sp, items, np.where(take, cand, -1))[qi, ci]
    names = np.array(names, dtype=object)
    rows = pa.StructArray.from_arrays(
        [pa.array(sp.item_ids[fields["anchor"][qi, ci]].tolist(), pa.string()), pa.array(_r(fields["D"][qi, ci])),
         pa.array(_r(fields["dq"][qi, ci])), pa.array(hits), pa.array(fields["frank"][qi, ci].astype(np.int64)),
         pa.array(sp.item_ids[it].tolist(), pa.string()), pa.array(names[pool[qi, ci]].tolist(), pa.string()),
         pa.array(sp.recipe_ids[it].tolist(), pa.string())],
        names=["anchor_item", "distance", "dist_q", "distance_probe_hit", "foreign_rank", "item", "pool", "recipe_id"])
    offsets = np.concatenate([[0], np.cumsum(take.sum(1))]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), rows)


# ----------------------------------------------------------------------------- question-only models
# pair_features and QuestionOnlyModel come from features/diagnostics/question_only.py (the shared
# API); the folds below are AF's own (a seeded key per recipe), so its datasets stay as generated.

def cross_fitted_scores(X: np.ndarray, y: np.ndarray, groups: np.ndarray, n_folds: int = 5, seed: int = 0,
                        C: float = 1.0) -> np.ndarray:
    """(n, c) scores where each question is scored by a model that never saw its group (recipe):
    folds drawn per group from a seeded key."""
    uniq, inv = np.unique(groups, return_inverse=True)
    fold = np.array([stable_key("qo-folds", seed, g) % n_folds for g in uniq.tolist()], dtype=np.int64)[inv]
    out = np.zeros(X.shape[:2])
    for k in range(n_folds):
        test = fold == k
        if test.any() and (~test).any():
            out[test] = QuestionOnlyModel(C, seed).fit(X[~test], y[~test]).scores(X[test])
    return out


# ----------------------------------------------------------------------------- ordering

ORDER_POOL = 23                         # ordering: candidate wrong orders, the first of the knob's own draw (all)


def ordering_perm_features(sp, items: np.ndarray, perms: np.ndarray) -> np.ndarray:
    """(K, P, 4d + 3) the learned probe's per-order features (`question_only.ordering_features`) of
    every permutation `perms` (P, 4) of each question's 4 images `items` (K, 4)."""
    from features.diagnostics.question_only import ordering_features
    v = sp.vecs[items].astype(np.float32)                                # (K, 4, d)
    out = np.empty((len(items), len(perms), 4 * v.shape[2] + 3), dtype=np.float32)
    for s in range(0, len(items), 512):
        out[s:s + 512] = ordering_features(v[s:s + 512][:, perms])
    return out


def _ordering_sets(F: np.ndarray, sets: np.ndarray) -> np.ndarray:
    """F (n, P, f) per-order features, sets (n, M, 4) permutation numbers -> (n, M*4, f + 17): each
    set's 4 orders with the set-level cues of their mean consecutive cosine (the judge's features)."""
    n, m = sets.shape[:2]
    X = np.take_along_axis(F, sets.reshape(n, m * 4)[..., None], 1).reshape(n, m, 4, -1)
    return with_set_features(X, 1.0 - X[..., -2], None, None).reshape(n, m * 4, -1)


@_single_blas_thread
def refine_ordering(ds, b, sp, perms: np.ndarray, draw: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict]:
    """AF of visual ordering questions (every row of the batch `b`). perms (24, 4): the permutations,
    perms[0] the recipe order (the answer); draw (Q, 23): the wrong orders' numbers in the knob's own
    seeded draw (Efraimidis-Spirakis with the setting's weights: uniform at knob 2 = 0, summed
    consecutive distance at knob 2 = 1), whose first 3 are the plain setting's choices.

    The candidates of a question are the first ORDER_POOL wrong orders of that draw: all 23, since each is
    one the knob can draw (with the first 12 or 16, which keep knob 2's tilt, AF kept 33-36% / 40-44%);
    the draw's order breaks ties and its first 3 are the starting choices. Each round an `Adversary` (the
    ensemble, cross-fitted by recipe, on the learned probe's ordering features with their set-level
    cues) is trained on the current choices; then slot by slot each wrong order is replaced by the
    candidate that brings the answer's rank nearest its seeded target (`target_ranks`), ties to the
    least distinguishable answer. The drop rule, records and determinism are those of the other tasks
    (`_finish`). Returns (kept rows, their 3 wrong orders (n, 3) in slot order, provenance)."""
    Q, R, seed = len(b.qids), ds.params.af_rounds, ds.seed
    if Q == 0:
        return _nothing(ds), np.zeros((0, 3), dtype=np.int64), {}
    rows = np.arange(Q)
    rkeys = recipe_keys(b.recipe_ids)
    pool = draw[:, :ORDER_POOL]
    F = ordering_perm_features(sp, b.items, perms)
    wrong = draw[:, :3].copy()
    changed_in = np.zeros(Q, dtype=np.int64)
    aim = target_ranks(b.qkeys, seed)
    f = F.shape[2] + N_SET_FEATURES

    def current(w):
        return np.concatenate([np.zeros((len(w), 1), dtype=np.int64), w], axis=1)       # answer at column 0

    solved_by_round, advs = [], []
    for rnd in range(1, R + 1):
        X = _ordering_sets(F, current(wrong)[:, None, :])
        advs.append(Adversary(X, np.zeros(Q, dtype=np.int64), rkeys, seed, advs[-1] if advs else None))
        S = _mean_scores(advs, rows, lambda r: X[r], 4 * f)     # noqa: B023 - used at once, in this round
        solved_by_round.append(round(float((answer_rank(S, np.zeros(Q, dtype=np.int64))[0] == 0).mean()), 4))
        for slot in range(3):
            sets = np.repeat(current(wrong)[:, None, :], pool.shape[1], axis=1)            # (Q, M, 4)
            sets[:, :, slot + 1] = pool
            taken = np.zeros(pool.shape, dtype=bool)
            for other in range(3):
                if other != slot:
                    taken |= pool == wrong[:, other:other + 1]
            S = _mean_scores(advs, rows, lambda r, sets=sets: _ordering_sets(F[r], sets[r]), pool.shape[1] * 4 * f)
            rank, gap = answer_rank(S.reshape(Q, pool.shape[1], 4), np.zeros(pool.shape, dtype=np.int64))
            obj = np.where(taken, np.inf, objective(rank, gap, aim[:, None]))
            best = np.argmin(obj, axis=1)
            cur = np.argmax(pool == wrong[:, slot:slot + 1], axis=1)     # the knob's picks are the draw's first 3
            do = np.flatnonzero(obj[rows, best] < obj[rows, cur] - 1e-9)
            wrong[do, slot] = pool[do, best[do]]
            changed_in[do] = rnd
    X = _ordering_sets(F, current(wrong)[:, None, :])
    y = np.zeros(Q, dtype=np.int64)
    final = Adversary(X, y, rkeys, seed ^ 0x5EED, None).score_built(X, rows)
    adv_rank, gap = answer_rank(final, y)
    stats = {"solved_share_by_round": solved_by_round,
             "solved_share_final": round(float((adv_rank == 0).mean()), 4),
             "probe_before": probe_accuracy(_ordering_sets(F, current(draw[:, :3])[:, None, :]), y, rkeys, seed),
             "order_pool": ORDER_POOL}
    sub = _finish(ds, b, rows, adv_rank, gap, np.zeros(Q, dtype=np.int64), False, Q, stats)
    ds.adversarial["probe_after"] = probe_accuracy(X[sub], y[sub], rkeys[sub], seed)
    pos = b.pos[sub]
    names = np.array(["knob", "answer"], dtype=object)
    prov = {"af_round": pa.array(changed_in[sub]),
            "af_pools": _lists(names[_insert(np.zeros((len(sub), 3), dtype=np.int64), np.ones(len(sub), np.int64),
                                             pos)], pa.string()),
            "af_scores": _lists(_r(_insert(final[sub, 1:], final[sub, 0], pos))),
            "af_candidates": _lists(pool[sub])}
    return sub, wrong[sub], prov
