"""Prefect flows `af-pool` (the pooled adversary over a task's AF datasets) and `af-check` (its check).

For `rounds` rounds: export the task's AF datasets with vectors (a temporary folder) -> out-of-fold
GM3C question-only logits over all of them at once, for the choices and for each question's recorded
knob-valid alternates (training/af_pooled.py) -> in each dataset, the questions it solves beyond
`solved_share` (a quarter; most confident first) are aimed at the answer ranks short of their share:
cloze, alternates it scores above the answer replace distractors it scores below (swaps_for);
coherence, the alternate foreign image that puts the answer's rank nearest the target
(coherence_swap_for); ordering, as cloze, with the wrong orders AF considered and does not show as
alternates (the ones it can move first) -> write back (features/datasets/af_pooled.apply_swaps). Then drop the questions
it solves with probability >= tau, never below `min_kept` x the plain setting (and, with `keep_solved`,
never below that share of the kept questions solved): as judged by the last
round's model with the swapped choices' logits put in, or (`fresh_drop`, or no rounds) by a model
trained anew on the questions as they now are; with `linear`, also what the linear learned probe
solves (cross-fitted on folds of its own). `adversaries`: the mean logits of several such models, each
its own seed and fold split. Run after `mrqa generate` of the AF settings (with `--af-drop pooled`, AF
leaves its own drop to this one) and before `mrqa report`.

Flow `af-check`: GM3C question-only on every question of a task's AF settings, cross-fitted by recipe
with seeds apart from the adversary's, the mean over seeds with a 95% interval (read-only).
"""
from __future__ import annotations

import logging
import tempfile
import time
from pathlib import Path

import numpy as np
from prefect import flow

from etl.config import Paths
from etl.warehouse import connect
from features.datasets.af_pooled import af_datasets, alternates, apply_drops, apply_swaps, split_counts
from features.datasets.export import export_parquet
from training.af_pooled import (
    ADVERSARIES,
    DROP_ORDERS,
    FLOOR_BY,
    FOLDS,
    MIN_KEPT,
    ROUNDS,
    SOLVED_SHARE,
    SWAP_FIRST,
    TAU,
    above_all_share,
    check_args,
    check_fold_by,
    drop_plan,
    drop_plan_by_split,
    guided_scores,
    linear_verdicts,
    mean_scores,
    member_seed,
    out_of_fold_scores,
    swap_plan,
    swapped_scores,
    verdicts,
)
from training.config import CLOZE_TASKS
from training.procs import in_turn, spawn_map, spawn_shares

log = logging.getLogger(__name__)


@flow(name="af-pool", log_prints=True)
def af_pool_flow(task: str = "visual_cloze", tau: float = TAU, min_kept: float = MIN_KEPT, folds: int = FOLDS,
                 seed: int = 0, size: str = "small", rounds: int = ROUNDS,
                 solved_share: float = SOLVED_SHARE, fresh_drop: bool = False, keep_solved: float = 0.0,
                 adversaries: int = ADVERSARIES, linear: bool = False, distractors: str = "ball",
                 workers: int | None = None, floor_by: str = "dataset", fold_by: str = "recipe",
                 swap_first: str = "auto", tree: bool = False, jobs_out: str | None = None,
                 scores_from: str | None = None, words: bool = False, rules: bool = False,
                 drop_order: str = "votes", look: bool = False, order: bool = False, pixel: int = 0,
                 pixel_swaps: bool = False) -> dict:
    """Swap (`rounds` rounds) and filter the AF datasets of `task` (seed `seed`) with the pooled
    out-of-fold adversary. The drop reads the last round's model, its logits of the swapped choices
    put in (`fresh_drop`: a model trained anew on the swapped questions; one more pass). `linear`: the
    drop also takes what the linear question-only probe solves (`_linear_oof`). `distractors`: the AF
    datasets of the knob settings (ball), of coherence's matched variants (matched) or of visual cloze's
    kitchen ones (kitchen), each pooled apart.
    `floor_by`: the `min_kept` floor holds per dataset, or in each of its splits (`drop_plan_by_split`).
    `fold_by`: the adversary's folds, of recipes or with the val and test splits held out whole
    (`out_of_fold_scores`). `swap_first`: which solved questions the rounds move first, the most
    confident or those an alternate can move (`swap_plan`); auto: movable for ordering (the adversary
    reads the recipe order whatever the wrong orders on 69% of the demo's questions), confident
    otherwise (the demo's visual cloze step and the matched coherence figures). `tree`: the drop also
    takes what the tree probe solves (`_tree_oof`: gradient-boosted trees on the choice-set cues, pooled
    over the task's AF datasets), a third list in turn. `jobs_out` / `scores_from`: the pass's GM3C models
    trained on another machine (training/af_jobs.py): write their jobs to that folder and stop before
    anything is written, or go on from the logits in that scores file; one GM3C pass only. `words` (textual
    cloze): the drop also takes what the words probe solves (`_words_oof`: the linear model and the trees in
    the space of the titles' own words, features/diagnostics/words_probe.py), two more lists in turn.
    `rules` (cloze and coherence): the drop also takes what the report's distance rule of the task solves
    (`_rules_oof`: the centre of the choices for cloze, the closest pair for coherence), one more list.
    `look` (visual tasks): the drop also takes what the look probe solves (`_look_oof`: the linear model and
    the trees on the photos' own pixel statistics, features/diagnostics/look_probe.py), two more lists.
    `pixel` (visual tasks; a side in pixels, 0: not): the drop also takes what the pixel probe solves
    (`_pixel_oof`: a CNN trained on each dataset's photos at `pixel` x `pixel`, out of fold with the val and
    test splits held out whole, features/diagnostics/pixel_probe.py), one more list. `pixel_swaps` (coherence,
    with `pixel`): each round's swaps also read that CNN (`_pixel_scores`: its own out-of-fold models score
    every alternate foreign photo), the mean of its and the GM3C ensemble's log-probabilities
    (`guided_scores`), so a swap picks a foreign photo both find plausible; the drop's lists stay apart.
    `order` (textual cloze): and what the order probe solves (`_order_oof`: the corpus's title-order counts,
    features/diagnostics/order_probe.py), one more list.
    `drop_order` (training/af_pooled.py `drop_plan`): votes, the questions on more lists first; minimax, each
    next question off the list whose adversary solves the largest share of the kept questions."""
    check_kind(task, distractors)
    if rules and task == "visual_ordering":
        raise ValueError("--rules: ordering has no distance rule (its choices are orders of the same images)")
    if words and task != "textual_cloze":
        raise ValueError("--words reads step titles: only textual cloze shows them")
    if look and task == "textual_cloze":
        raise ValueError("--look reads photos: textual cloze shows none")
    if pixel and task == "textual_cloze":
        raise ValueError("--pixel reads photos: textual cloze shows none")
    if pixel and not 8 <= pixel <= 128:
        raise ValueError(f"--pixel must be a side of 8 to 128 pixels (or 0: not), got {pixel}")
    if pixel_swaps and (not pixel or task != "visual_coherence"):
        raise ValueError("--pixel-swaps: the CNN scores alternate foreign photos, so it needs --pixel SIDE and "
                         "--task visual_coherence")
    if order and task != "textual_cloze":
        raise ValueError("--order reads the order of step titles: only textual cloze shows them")
    paths = Paths.from_env()
    check_args(tau, min_kept, rounds, solved_share, keep_solved, adversaries)
    if drop_order not in DROP_ORDERS:
        raise ValueError(f"--drop-order must be one of {', '.join(DROP_ORDERS)}, got {drop_order!r}")
    offload = _offload(task, rounds, fresh_drop, jobs_out, scores_from)
    if floor_by not in FLOOR_BY:
        raise ValueError(f"--floor-by must be one of {', '.join(FLOOR_BY)}, got {floor_by!r}")
    check_fold_by(fold_by, "--fold-by")
    first = ("movable" if task == "visual_ordering" else "confident") if swap_first == "auto" else swap_first
    if first not in SWAP_FIRST:
        raise ValueError(f"--swap-first must be one of auto, {', '.join(SWAP_FIRST)}, got {swap_first!r}")
    if not paths.warehouse.exists():     # never a new empty warehouse (nor its folders) for a mistyped --home
        raise ValueError(f"no warehouse at {paths.warehouse}: run `mrqa demo`, or `mrqa generate --all`, first")
    con = connect(paths.ensure())
    try:
        rows = af_datasets(con, task, seed, distractors)
        if not rows:
            raise ValueError(f"no AF datasets of {task} (seed {seed}, {distractors} distractors) in the warehouse: "
                             f"run {_example(task, distractors)} first")
        # a dataset filtered already is left as it is (named in the log and the summary), so a setting made
        # since (e.g. `mrqa generate` and `mrqa redraw` of one more) is filtered beside it; all filtered: refused
        done = [r["dataset_id"] for r in rows if r["params"].get("af_pooled")]
        if done and len(done) == len(rows):
            raise ValueError(f"already filtered by the pooled adversary: {', '.join(done)}; regenerate them "
                             "(`mrqa generate`) to filter again")
        if done:
            log.warning("af-pool: %d dataset(s) filtered by the pooled adversary already, left as they are: %s",
                        len(done), ", ".join(done))
            rows = [r for r in rows if r["dataset_id"] not in done]
        rows = [r for r in rows if r["n_questions"]]
        if not rows:
            raise ValueError(f"the AF datasets of {task} (seed {seed}) hold no questions: nothing to filter")
        ids = [r["dataset_id"] for r in rows]
        recipe_of = {(d, q): r for d, q, r in con.execute(
            "SELECT dataset_id, qid, recipe_id FROM questions WHERE list_contains(?, dataset_id)", [ids]).fetchall()}
        swap_log: dict[str, list[dict]] = {d: [] for d in ids}
        scores: dict = {}
        for rnd in range(1, rounds + 1):
            alts = alternates(con, ids)
            if not any(alts.values()):
                log.info("af-pool: no recorded alternates (datasets generated before they were): no swaps")
                break
            if task == "visual_ordering":            # an alternate is an order: its image ids in turn
                items = {k: [x["seq"] for x in a["alts"]] for k, a in alts.items()}
                need = {i for al in items.values() for seq in al for i in seq}
            else:
                items = {k: [x["item"] for x in a["alts"]] for k, a in alts.items()}
                need = {i for k, a in alts.items() for i in items[k] + (a["choices"] if task in CLOZE_TASKS
                                                                        else [])}
            vectors = _vectors(con, paths, ids, sorted(need), "title" if task == "textual_cloze" else "image")
            scores = _scores(con, paths, ids, recipe_of, folds, seed + 1000 * rnd, size, items, vectors,
                             adversaries, workers, fold_by, offload)
            guide, px_acc = scores, None
            if pixel_swaps:
                px = _pixel_scores(con, paths, ids, PIXEL_SEED + seed + 1000 * rnd, pixel, items)
                guide, px_acc = guided_scores(scores, px), verdicts(px)
            plan = swap_plan(guide, alts, solved_share, vectors if task in CLOZE_TASKS else None, first)
            done_n = apply_swaps(con, plan, guide, rnd, vectors)
            acc = verdicts(scores)
            scores = swapped_scores(scores, plan)      # that model's logits of the questions as they now are
            top = above_all_share(scores) if task in ("visual_ordering", "visual_coherence") else {}
            for d in ids:
                swap_log[d].append({"round": rnd, "swapped": done_n.get(d, 0),
                                    "oof_question_only_acc": _solved_share(acc[d]),
                                    **({"answer_above_all": top[d]} if d in top else {}),
                                    **({"pixel_oof_acc": _solved_share(px_acc[d])} if px_acc else {})})
                if d in top:
                    log.info("af-pool round %d %s: the answer above every choice and alternate (no swap can move "
                             "it) on %.3f of the questions", rnd, d, top[d])
                log.info("af-pool round %d %s: out-of-fold question-only %.3f%s, swapped %d questions", rnd, d,
                         swap_log[d][-1]["oof_question_only_acc"],
                         f", the pixel probe {swap_log[d][-1]['pixel_oof_acc']:.3f}" if px_acc else "",
                         done_n.get(d, 0))
        fresh = bool(fresh_drop or not scores)            # no round ran: the drop's own pass
        if fresh:
            scores = _scores(con, paths, ids, recipe_of, folds, seed, size, adversaries=adversaries, workers=workers,
                             fold_by=fold_by, offload=offload)
        t_lin = time.perf_counter()
        # the linear probe and the rule read the same resolved questions: resolved once when both run
        resolved = _resolved(con, paths, ids, task) if linear and rules else None
        lin = _linear_oof(con, paths, ids, task, seed, resolved) if linear else None
        if linear:
            log.info("af-pool: the linear probe scored the questions in %.1f s", time.perf_counter() - t_lin)
        trees = _tree_oof(con, paths, ids, task, TREE_SEED + seed, fold_by, TREE_MEMBERS) if tree else None
        more = _words_oof(con, ids, WORDS_SEED + seed, fold_by, WORDS_TREE_MEMBERS) if words else ()
        if rules:
            more = (*more, _rules_oof(con, paths, ids, task, resolved))
        if look:
            more = (*more, *_look_oof(con, paths, ids, task, LOOK_SEED + seed, fold_by))
        if pixel:
            more = (*more, _pixel_oof(con, paths, ids, PIXEL_SEED + seed, pixel))
        if order:
            more = (*more, _order_oof(con, ids, ORDER_SEED + seed))
        oof = verdicts(scores)
        if floor_by == "split":
            split_of, n_split = split_counts(con, rows)
            plan = drop_plan_by_split(oof, split_of, n_split, tau, min_kept, keep_solved, lin, trees, more, drop_order)
        else:
            plan = drop_plan(oof, {r["dataset_id"]: r["n_plain"] or 0 for r in rows}, tau, min_kept, keep_solved, lin,
                             trees, more, drop_order)
        info = {"tau": tau, "folds": folds, "seed": seed, "size": size, "min_kept": min_kept, "floor_by": floor_by,
                "rounds": rounds, "adversaries": adversaries, "linear": linear, "distractors": distractors,
                # the drop's order (training/af_pooled.py drop_plan): with the linear probe, the two lists in turn
                "drop_order": ("the list whose adversary solves the most kept questions first"
                               if drop_order == "minimax" else
                               "questions on more lists first, then in turn" if tree or words or look or pixel else
                               "lists in turn" if linear else "confidence"),
                "solved_share": solved_share, "keep_solved": keep_solved, "fresh_drop": fresh,
                "adversary": "GM3C question_only"
                             + (" (the titles' vectors)" if task == "textual_cloze" else "")
                             + ", pooled over the task's AF datasets, out of fold by "
                             + ("recipe" if fold_by == "recipe" else "split (val and test each a fold of their own, "
                                "the train split's recipes the others)"),
                # recorded only when not the default, so datasets filtered before the option keep their hash
                **({"fold_by": fold_by} if fold_by != "recipe" else {}),
                **({"swap_first": first} if rounds and first != "confident" else {}),
                **({"tree": True, "tree_seed": TREE_SEED + seed, "tree_members": TREE_MEMBERS} if tree else {}),
                **({"words": True, "words_seed": WORDS_SEED + seed} if words else {}),
                # recorded only when not one, so datasets filtered before keep their hash
                **({"words_tree_members": WORDS_TREE_MEMBERS} if words and WORDS_TREE_MEMBERS != 1 else {}),
                **({"rules": RULES[task]} if rules else {}),
                **({"look": True, "look_seed": LOOK_SEED + seed} if look else {}),
                **({"pixel_side": pixel, "pixel_seed": PIXEL_SEED + seed} if pixel else {}),
                **({"pixel_swaps": True} if pixel_swaps else {}),
                **({"order": True, "order_seed": ORDER_SEED + seed} if order else {})}
        t_drop = time.perf_counter()
        res = apply_drops(con, plan, oof, info, {d: {"swap_rounds": swap_log[d]} for d in ids if swap_log[d]})
        log.info("af-pool: dropped %d questions and rewrote %d datasets in %.1f s", sum(len(q) for q in plan.values()),
                 len(res), time.perf_counter() - t_drop)
    except JobsWritten as w:        # --jobs-out: nothing written to the warehouse; the jobs wait for a GPU host
        log.info("af-pool: the jobs of %d model run(s) written to %s", w.n, w.path)
        return {"task": task, "jobs_written": str(w.path), "runs": w.n, "datasets": []}
    finally:
        con.close()
    for r in res:
        log.info("af-pool %s: dropped %d, kept %d (out-of-fold question-only %.3f -> %.3f)", r["dataset_id"],
                 r["dropped"], r["kept"], r["oof_question_only_acc"] or 0, r["oof_question_only_acc_kept"] or 0)
    return {"task": task, "datasets": res, **info, **({"left_as_they_were": done} if done else {})}


KIND_TASKS = {"matched": ("visual_coherence",), "author": ("visual_coherence",),  # the tasks each kind beyond
              "kitchen": ("visual_cloze",), "redrawn": ("visual_cloze", "visual_coherence"),  # the paper has
              "matched-redrawn": ("visual_coherence",)}


def check_kind(task: str, distractors: str) -> None:
    """Refuse a kind of AF dataset the task has none of (before any work): --distractors matched and author are
    visual coherence's, kitchen visual cloze's, redrawn visual cloze's and coherence's."""
    if distractors in KIND_TASKS and task not in KIND_TASKS[distractors]:
        names = " and ".join(t.replace("_", " ") for t in KIND_TASKS[distractors])
        raise ValueError(f"--distractors {distractors} names {names}'s AF datasets; {task} has none (use "
                         "--distractors ball, the default)")


def _example(task: str, distractors: str) -> str:
    """The generate command that makes AF datasets of a kind (for an error message)."""
    if distractors in ("matched", "author", "kitchen"):
        return f"`mrqa generate --task {task} --knobs 0-0-0-{distractors}-af`"
    if distractors == "redrawn":
        return (f"`mrqa redraw --task {task} --knobs 0-1-1-af` (after `mrqa generate --task {task} --knobs "
                "0-1-1-af`)")
    if distractors == "matched-redrawn":
        return ("`mrqa redraw --task visual_coherence --knobs 0-0-0-matched-af` (after `mrqa generate --task "
                "visual_coherence --knobs 0-0-0-matched-af`)")
    return f"`mrqa generate --task {task} --knobs 0-1-1-af` (or `mrqa generate --all`)"


def _vectors(con, paths: Paths, ids: list[str], items: list[str], space: str = "image") -> dict[str, np.ndarray]:
    """Vectors of `items` in the datasets' feature space (their encoder; `space` image, or title for textual
    cloze), as the store holds them."""
    from features.vectors.store import FeatureStore
    enc = con.execute("SELECT DISTINCT encoder_id FROM datasets WHERE list_contains(?, dataset_id)", [ids]).fetchall()
    store = FeatureStore(paths.lance)
    got, mat = (store.text_vectors(enc[0][0], "title", ids=items) if space == "title"
                else store.image_vectors(enc[0][0], ids=items))
    return dict(zip(got, np.asarray(mat, dtype=np.float32)))


TREE_SEED = 70_001       # the tree adversary's folds and trees: apart from af-check's (its seeds) and the report's
TREE_MEMBERS = 3         # the drop's tree verdict: the mean log-odds of 3 fold splits (one split's misses are luck)
LINEAR_SEED = 50_021     # the linear adversary's folds and model: apart from the report's probe (the datasets' seed)
WORDS_SEED = 90_011      # the words adversary's folds, model and trees: apart from the report's and the command's
WORDS_TREE_MEMBERS = 1   # the words trees' verdict: the mean log-odds of this many fold splits
PIXEL_SEED = 90_001      # the pixel adversary's folds and models: apart from the gate's (`mrqa pixel-probe`, seed 0)
LOOK_SEED = 70_001       # the look adversary's folds, model and trees: apart from the report's and the command's
ORDER_SEED = 90_023      # the order adversary's folds and model: apart from the report's and the command's (seed)


def _resolved(con, paths: Paths, ids: list[str], task: str) -> tuple:
    """(the datasets' VectorLookup, dataset_id -> its questions resolved to rows of it): what the linear probe
    and the distance rule both read, resolved once when the drop takes both lists."""
    from features.diagnostics.bias import VectorLookup, resolve_dataset
    enc = con.execute("SELECT DISTINCT encoder_id FROM datasets WHERE list_contains(?, dataset_id)", [ids]).fetchall()
    lookup = VectorLookup(paths.lance, enc[0][0], "title" if task == "textual_cloze" else "image")
    return lookup, {d: resolve_dataset(con, d, lookup, task) for d in ids}


def _linear_oof(con, paths: Paths, ids: list[str], task: str, seed: int, resolved: tuple | None = None
                ) -> dict[str, dict[str, tuple[float, bool]]]:
    """The linear learned question-only probe's verdict on every question (the report's model and
    features: logistic regression on the frozen vectors, 5 folds by recipe), cross-fitted on each dataset
    with folds and a seed of its own (`LINEAR_SEED` + seed), so the report's figure is read on a split
    this drop never used. `resolved`: `_resolved`'s result, when the caller has it."""
    lookup, res = resolved or _resolved(con, paths, ids, task)
    return _probe_verdicts(res, lookup.mat, LINEAR_SEED + seed)


RULES = {"visual_cloze": "centre", "textual_cloze": "centre", "visual_coherence": "closest pair"}


def _rules_oof(con, paths: Paths, ids: list[str], task: str, resolved: tuple | None = None
               ) -> dict[str, dict[str, tuple[float, bool]]]:
    """The verdicts of the task's distance rule (the report's `centre_rule` for cloze, `pair_rule` for
    coherence) on every question, in the shape of `linear_verdicts`: (confidence, solved). A rule fits
    nothing, so every verdict is out of fold; its confidence is its margin (cloze: the second-lowest
    spread of the choices minus the lowest; coherence: the closest pair's cosine minus the next pair's),
    scaled into [0.5, 1] by the dataset's largest, so the drop takes its surest picks first and every
    solved question passes any tau up to 0.5. `resolved`: `_resolved`'s result, when the caller has it."""
    from features.diagnostics.bias import centre_margins, pair_margins
    t0 = time.perf_counter()
    lookup, resolved_qs = resolved or _resolved(con, paths, ids, task)
    margins = pair_margins if task == "visual_coherence" else centre_margins
    out: dict[str, dict[str, tuple[float, bool]]] = {}
    for d in ids:
        res = resolved_qs[d]
        if len(res.choice_rows) == 0:
            continue
        pick, margin = margins(lookup.mat[np.array(res.choice_rows)])
        conf = 0.5 + 0.5 * margin / max(float(margin.max()), 1e-12)
        solved = pick == np.asarray(res.answers)
        out[d] = {q: (round(float(c), 6), bool(r)) for q, c, r in zip(res.qids, conf, solved)}
    log.info("af-pool: the %s rule read the questions in %.1f s", RULES[task], time.perf_counter() - t0)
    return out


def _probe_verdicts(resolved: dict, mat: np.ndarray, seed: int) -> dict[str, dict[str, tuple[float, bool]]]:
    """The linear learned question-only probe's verdicts (`linear_verdicts`) on each dataset's questions
    resolved to rows of `mat` (dataset_id -> bias.ResolvedQuestions), cross-fitted on each dataset with
    folds and model seeded `seed`; a dataset too small to cross-fit has no verdict."""
    from features.diagnostics.bias import learned_probe
    scores, answers = {}, {}
    for d, res in resolved.items():
        qo = learned_probe(res, mat, 5, seed)
        if qo is None or qo.accuracy is None:       # too few questions or recipes to cross-fit: no verdict
            continue
        scores[d] = dict(zip(res.qids, qo.scores))
        answers[d] = dict(zip(res.qids, res.answers.tolist()))
    return linear_verdicts(scores, answers)


def _scores(con, paths: Paths, ids: list[str], recipe_of: dict, folds: int, seed: int, size: str,
            alts: dict | None = None, vectors: dict | None = None, adversaries: int = 1,
            workers: int | None = None, fold_by: str = "recipe", offload: dict | None = None) -> dict:
    """Out-of-fold logits of the datasets as the warehouse holds them now (and of their alternates,
    whose vectors are in `vectors`): the mean of `adversaries` models, each its own seed and fold split
    (`_runs`: in parallel processes when there are several; `offload`: trained on another machine). With
    more cores than models and enough questions, each model's folds are jobs of their own, as af-check's
    (`check_workers`): one model on 2 cores takes about half the time of two."""
    seeds = [member_seed(seed, k) for k in range(adversaries)]
    workers = check_workers(workers, len(seeds), len(recipe_of))
    if offload:
        kw = {"folds": folds, "size": size, "fold_by": fold_by}
        return mean_scores(_offloaded(con, paths, ids, recipe_of, seeds, kw, alts, vectors, offload))
    return mean_scores(_runs(con, paths, ids, recipe_of, folds, seeds, size, alts, vectors, workers, fold_by))


class JobsWritten(Exception):
    """`mrqa af-pool --jobs-out`: the pass's jobs are written; the flow stops before it writes anything."""

    def __init__(self, path: Path, n: int):
        super().__init__(str(path))
        self.path, self.n = path, n


def _offload(task: str, rounds: int, fresh_drop: bool, jobs_out: str | None, scores_from: str | None) -> dict | None:
    """The checks of `--jobs-out` / `--scores-from`: one of them, a task with GM3C models, one pass."""
    if not (jobs_out or scores_from):
        return None
    if jobs_out and scores_from:
        raise ValueError("--jobs-out writes the pass's jobs and --scores-from reads their scores: give one of them")
    if task == "textual_cloze":
        raise ValueError("textual cloze's GM3C models train in minutes on a CPU and are not moved to another "
                         "machine: run without --jobs-out / --scores-from")
    if rounds + bool(fresh_drop) > 1:
        raise ValueError("--jobs-out / --scores-from move one GM3C pass to another machine: run with --rounds 1 "
                         "(without --fresh-drop) or --rounds 0; a further pass needs the swaps of the one before")
    if scores_from and not Path(scores_from).is_file():
        raise ValueError(f"no scores file at {scores_from}: train the jobs with `python -m training.af_jobs DIR`")
    return {"jobs_out": jobs_out, "scores_from": scores_from}


def _offloaded(con, paths: Paths, ids: list[str], recipe_of: dict, seeds: list[int], kw: dict,
               alts: dict | None, vectors: dict | None, offload: dict) -> list[dict]:
    """The pass's runs trained elsewhere: write their jobs (then stop: `JobsWritten`), or read their scores,
    checked against the jobs' fingerprint of the warehouse now (training/af_jobs.py)."""
    from training.af_jobs import fingerprint, read_scores, write_jobs
    hashes = con.execute("SELECT dataset_id, content_sha256 FROM datasets WHERE list_contains(?, dataset_id)",
                         [ids]).fetchall()
    fp = fingerprint([list(h) for h in hashes], seeds, kw, alts)
    if offload["scores_from"]:
        runs = read_scores(Path(offload["scores_from"]), fp, seeds)
        log.info("af-pool: the models of seeds %s from %s", seeds, offload["scores_from"])
        return runs
    out = write_jobs(Path(offload["jobs_out"]), lambda d: export_parquet(con, ids, d, with_vectors=True,
                                                                        lance_uri=paths.lance,
                                                                        vectors_of="questions"),
                     ids, recipe_of, seeds, kw, alts, vectors, fp)
    raise JobsWritten(out, len(seeds))


def _runs(con, paths: Paths, ids: list[str], recipe_of: dict, folds: int, seeds: list[int], size: str,
          alts: dict | None = None, vectors: dict | None = None, workers: int | None = None,
          fold_by: str = "recipe") -> list[dict]:
    """`out_of_fold_scores` of the datasets as the warehouse holds them now, one run per seed, from one
    export. Several runs go to `workers` processes (default: one per CPU core, at most one per run):
    each trains on one thread, so on 2 cores 2 runs take about the wall time of one. Given more workers
    than runs (a GPU host's cores, or one check seed on 2 cores), each fold of each run is a job of its
    own and the runs then read their folds' logits back (af-check does so by default for a check of
    FOLD_JOBS_MIN_QUESTIONS questions or more, `check_workers`; below it a process's start and its export
    reading cost more than small models' folds). The fold jobs are shared out before they start
    (training/procs.py `spawn_shares`), so a fold's logits never depend on timing. A run in this process
    runs on one thread, as a spawned one does (`in_turn`: on 2 threads an AMD EPYC machine rounds
    otherwise, and a model near a tie early-stops elsewhere), so a run's result depends neither on where it
    ran nor on how its folds were shared out (tested with tiny models; at larger sizes to the last float32
    bits)."""
    import os

    from training.af_jobs import fold_numbers
    with tempfile.TemporaryDirectory(prefix="mrqa-af-pool-") as tmp:
        export_parquet(con, ids, Path(tmp), with_vectors=True, lance_uri=paths.lance, vectors_of="questions")
        jobs = [(Path(tmp), ids, recipe_of, {"folds": folds, "seed": s, "size": size, "lance_uri": paths.lance,
                                             "alternates": alts, "alt_vectors": vectors, "fold_by": fold_by})
                for s in seeds]
        cores = workers if workers is not None else (os.cpu_count() or 1)
        n = min(len(jobs), cores)
        if workers is not None and workers > len(jobs):
            jobs = [(e, i, r, {**kw, "checkpoint": Path(tmp) / "folds" / f"run{k}"})
                    for k, (e, i, r, kw) in enumerate(jobs)]
            units = [(e, i, r, {**kw, "only_folds": [f]}) for e, i, r, kw in jobs for f in fold_numbers(kw)]
            n = min(cores, len(units))
            log.info("af-pool: %d runs as %d fold jobs in %d processes", len(jobs), len(units), n)
            spawn_shares(_run, units, n)
            return in_turn(_run, jobs)                              # every fold is kept: read, not trained
        if n <= 1:
            return in_turn(_run, jobs)
        log.info("af-pool: %d runs in %d processes", len(jobs), n)
        return spawn_map(_run, jobs, n)


def _check_questions(con, task: str, seed: int, distractors: str, datasets: tuple[str, ...] = ()
                     ) -> tuple[list[dict], list[str], dict, dict]:
    """The task's AF datasets with questions (af-check's and its bench's), or the named `datasets` (any of
    one task, adversarial or not): their rows, ids, and each question's recipe and split ((dataset_id, qid)
    -> ...); ValueError saying what to generate when there are none."""
    rows = [r for r in (named_datasets(con, datasets) if datasets else af_datasets(con, task, seed, distractors))
            if r["n_questions"]]
    if not rows:
        raise ValueError(f"the datasets {', '.join(datasets)} hold no questions: nothing to check" if datasets else
                         f"no AF datasets of {task} (seed {seed}, {distractors} distractors) with questions: "
                         f"run {_example(task, distractors)} first")
    ids = [r["dataset_id"] for r in rows]
    qrows = con.execute("SELECT dataset_id, qid, recipe_id, split FROM questions "
                        "WHERE list_contains(?, dataset_id)", [ids]).fetchall()
    return rows, ids, {(d, q): r for d, q, r, _ in qrows}, {(d, q): sp for d, q, _, sp in qrows}


def named_datasets(con, datasets: tuple[str, ...]) -> list[dict]:
    """Rows (dataset_id, setting, n_questions, task) of the named datasets, in id order; ValueError naming
    the unknown ones, or the tasks when they are of more than one (a check pools one task's questions)."""
    rows = con.execute("SELECT dataset_id, setting, n_questions, task FROM datasets WHERE list_contains(?, dataset_id) "
                       "ORDER BY dataset_id", [sorted(set(datasets))]).fetchall()
    unknown = sorted(set(datasets) - {r[0] for r in rows})
    if unknown:
        raise ValueError(f"no dataset {', '.join(unknown)} in the warehouse (`mrqa datasets` lists them)")
    tasks = sorted({r[3] for r in rows})
    if len(tasks) > 1:
        raise ValueError(f"the datasets to check are of {len(tasks)} tasks ({', '.join(tasks)}): check one task "
                         "at a time, its models are pooled over its datasets")
    return [{"dataset_id": d, "setting": st, "n_questions": n, "task": t} for d, st, n, t in rows]


def _read_warehouse(paths: Paths):
    """A read-only connection to the warehouse; ValueError saying what to run when there is none."""
    if not paths.warehouse.exists():
        raise ValueError(f"no warehouse at {paths.warehouse}: run `mrqa demo`, or `mrqa generate --all`, first")
    return connect(paths, read_only=True)


def bench_af_folds(task: str = "visual_cloze", seeds: tuple[int, ...] = (0,), size: str = "small",
                   workers: int | None = None, folds: int = FOLDS, fold_by: str = "split", seed: int = 0,
                   distractors: str = "ball"):
    """`mrqa bench af-folds`: the check's GM3C models of the task's AF datasets (af-check's seeds) trained
    in turn (`--workers 1`: in this process, one run after the other) against each fold a job of its own
    (`workers` processes, default one per CPU core); yields report lines: each wall time, the ratio, and
    whether the logits are the same."""
    import os

    from training.af_jobs import fold_numbers
    check_fold_by(fold_by, "--fold-by")
    n = workers or os.cpu_count() or 1
    if n < 2:
        raise ValueError("the fold jobs need at least 2 workers: give --workers 2 or more")
    paths = Paths.from_env().ensure()
    con = _read_warehouse(paths)
    try:
        _rows, ids, recipe_of, _splits = _check_questions(con, task, seed, distractors)
        check_seeds = [CHECK_SEED + s for s in seeds]
        units = len(check_seeds) * len(fold_numbers({"folds": folds, "fold_by": fold_by}))
        yield (f"{task}: {len(ids)} AF datasets, {len(recipe_of):,} questions; {len(check_seeds)} run(s) of "
               f"{size} GM3C question-only models, {units} fold jobs at most (--fold-by {fold_by})")
        t0 = time.perf_counter()
        one = _runs(con, paths, ids, recipe_of, folds, check_seeds, size, workers=1, fold_by=fold_by)
        t1 = time.perf_counter()
        yield f"{'in turn (--workers 1):':28s}{t1 - t0:7.1f} s"
        w = max(n, len(check_seeds) + 1)                        # above the runs: fold jobs
        side = _runs(con, paths, ids, recipe_of, folds, check_seeds, size, workers=w, fold_by=fold_by)
        t2 = time.perf_counter()
    finally:
        con.close()
    pairs = [(a[d][q]["choices"], b[d][q]["choices"]) for a, b in zip(one, side) for d in a for q in a[d]]
    gap = max(float(np.abs(x - y).max()) for x, y in pairs)
    agree = float(np.mean([x.argmax() == y.argmax() for x, y in pairs]))
    yield (f"{f'fold jobs (--workers {w}):':28s}{t2 - t1:7.1f} s   {(t1 - t0) / max(t2 - t1, 1e-9):.2f}x; "
           + ("the same logits" if gap == 0 else
              f"logits up to {gap:.1e} apart (MKL rounds a fold trained in another process's memory state in the "
              f"last bits; MKL_CBWR=AUTO,STRICT makes them equal), the same choice on {100 * agree:.2f}% of "
              "the questions"))


def _run(job: tuple) -> dict:
    """One `out_of_fold_scores` run (a process pool's unit of work)."""
    export, ids, recipe_of, kw = job
    return out_of_fold_scores(export, ids, recipe_of, **kw)


CHECK_SEED = 104_729     # the check's models: seeds apart from every adversary's (seed + 1000 x round + 7919 x k)
# af-check: from this many questions its folds are jobs of their own by default. On 2 cores the demo's check
# of 2,488 questions took 37.7 s as fold jobs against 44.6 s in turn; 1,058 questions: 22.5 s against 18.3 s
FOLD_JOBS_MIN_QUESTIONS = 2_000


def check_workers(workers: int | None, n_seeds: int, n_questions: int, cores: int | None = None) -> int | None:
    """af-check's processes (and af-pool's, `_scores`): `workers` when given; otherwise, with more CPU cores
    (default: this machine's) than check seeds (or models) and at least FOLD_JOBS_MIN_QUESTIONS questions,
    one per core, so that each fold is a job of its own (`_runs`; the demo's check of one seed on 2 cores:
    see `mrqa bench af-folds`); else None (a process per seed, at most one per core)."""
    import os
    cores = cores or os.cpu_count() or 1
    if workers is not None or cores <= n_seeds or n_questions < FOLD_JOBS_MIN_QUESTIONS:
        return workers
    return cores


@flow(name="af-check", log_prints=True)
def af_check_flow(task: str = "visual_cloze", seeds: tuple[int, ...] = (0, 1, 2), folds: int = FOLDS,
                  seed: int = 0, size: str = "small", knobs_only: bool = True, distractors: str = "ball",
                  workers: int | None = None, record: bool = False, fold_by: str = "split",
                  jobs_out: str | None = None, scores_from: str | None = None,
                  datasets: tuple[str, ...] = ()) -> dict:
    """GM3C question-only accuracy on every question of the task's AF datasets (seed `seed`), cross-fitted:
    for each check seed, a pooled model per fold of recipes (a split of its own, never the adversary's)
    scores the questions of the recipes it did not train on. Per dataset: the accuracy of each seed, their
    mean over all questions and its 95% interval (Wilson with n questions, widened by the recipe
    bootstrap). The test split of one export holds only 90-200 questions of a setting, so its accuracy
    moves by +-5 points between draws; this reads every question. `knobs_only`: the 8 knob settings
    (the balanced variants are pooled in training all the same). `record`: also write each dataset's
    figure to `af_checks`, keyed by its content hash (the dataset card and `mrqa export --reading-only`
    read it while the dataset is unchanged); otherwise it writes nothing. `fold_by` (default "split"):
    the val and the test split are each held out whole, so their questions are scored by models that
    never saw their images (with folds of recipes over every split, a held-out answer has been a
    distractor in training, which lowers the figure); the train split is in folds of recipes. Each
    dataset's figure also comes split by split (`by_split`). `jobs_out` / `scores_from`: the check's
    models trained on another machine, as for `af_pool_flow` (training/af_jobs.py). `datasets`: check
    these instead (any datasets of one task, adversarial or not, e.g. a RecipeQA-style preset, whose
    report figures alone cannot clear it for `mrqa export --reading-only`; every one is reported, the
    balanced variants too); `task` is then theirs."""
    paths = Paths.from_env()             # read-only: no folder is made on a home without a warehouse
    if not seeds:
        raise ValueError("--seeds needs at least one seed")
    check_fold_by(fold_by, "--fold-by")
    if not datasets:
        check_kind(task, distractors)
    con = _read_warehouse(paths)
    try:
        if datasets:
            task, knobs_only = named_datasets(con, datasets)[0]["task"], False
        offload = _offload(task, 0, False, jobs_out, scores_from)
        rows, ids, recipe_of, split_of = _check_questions(con, task, seed, distractors, datasets)
        check_seeds = [CHECK_SEED + s for s in seeds]
        workers = check_workers(workers, len(check_seeds), len(recipe_of))
        trained = (_offloaded(con, paths, ids, recipe_of, check_seeds, {"folds": folds, "size": size,
                                                                         "fold_by": fold_by}, None, None, offload)
                   if offload else _runs(con, paths, ids, recipe_of, folds, check_seeds, size, workers=workers,
                                         fold_by=fold_by))
        runs = dict(zip(seeds, (verdicts(r) for r in trained)))
        trees = _tree_checks(con, paths, ids, task, check_seeds, fold_by, seeds)
    except JobsWritten as w:        # --jobs-out: the check's models wait for a GPU host; nothing measured yet
        log.info("af-check: the jobs of %d model run(s) written to %s", w.n, w.path)
        return {"task": task, "jobs_written": str(w.path), "runs": w.n, "datasets": []}
    finally:
        con.close()
    out = []
    for r in rows:
        d = r["dataset_id"]
        if knobs_only and "balanced" in r["setting"]:
            continue
        qids = sorted(runs[seeds[0]][d])
        recipes, splits = [recipe_of[(d, q)] for q in qids], [split_of[(d, q)] for q in qids]
        out.append({"dataset_id": d, "setting": r["setting"], "n": len(qids),
                    **_check_figure({s: runs[s][d] for s in seeds}, qids, recipes, splits, seed),
                    # the tree probe (features/diagnostics/tree_probe.py) on the same folds and seeds: a
                    # nonlinear model of the choice-set cues, which neither GM3C nor the linear probe is
                    "tree": _check_figure({s: trees[s].get(d, {}) for s in seeds}, qids, recipes, splits, seed)})
        log.info("af-check %s: GM3C question-only %.3f [%.3f, %.3f], tree probe %.3f over %d questions (seeds %s)",
                 d, out[-1]["accuracy"], *out[-1]["ci"], out[-1]["tree"]["accuracy"], len(qids), out[-1]["by_seed"])
    if record and out:
        _record_checks(paths, task, out, list(seeds), folds, size, fold_by)
    return {"task": task, "folds": folds, "seeds": list(seeds), "size": size, "distractors": distractors,
            "fold_by": fold_by, "datasets": out, **({"recorded": len(out)} if record else {})}


def _check_figure(runs: dict[int, dict[str, tuple[float, bool]]], qids: list[str], recipes: list[str],
                  splits: list[str], seed: int) -> dict:
    """One model's check figure from its verdicts per check seed (qid -> (p, solved)): the mean over the
    seeds with its 95% interval, each seed's accuracy, and split by split. A question without a verdict
    (too few questions to fit on) counts as not solved."""
    from features.diagnostics.question_only import accuracy_interval
    hit = np.array([[bool(v[q][1]) if q in v else False for q in qids] for v in runs.values()], dtype=np.float64)
    mean = hit.mean(0)
    ci = accuracy_interval(mean, recipes, seed=seed)
    return {"accuracy": round(float(mean.mean()), 4), "ci": [round(x, 4) for x in ci],
            "by_seed": {int(s): round(float(h.mean()), 4) for s, h in zip(runs, hit)},
            "by_split": _by_split(mean, splits, recipes, seed)}


def _by_split(mean: np.ndarray, splits: list[str], recipes: list[str], seed: int) -> dict[str, dict]:
    """The check's figure on each split's questions, with its interval: a test split draws its distractors
    from its own few recipes, so its questions need not read like the others."""
    from features.diagnostics.question_only import accuracy_interval
    out = {}
    sp = np.array(splits)
    for name in sorted(set(splits)):
        ix = np.flatnonzero(sp == name)
        ci = accuracy_interval(mean[ix], [recipes[i] for i in ix], seed=seed)
        out[name] = {"n": int(ix.size), "accuracy": round(float(mean[ix].mean()), 4),
                     "ci": [round(x, 4) for x in ci]}
    return out


def _record_checks(paths: Paths, task: str, out: list[dict], seeds: list[int], folds: int, size: str,
                   fold_by: str) -> None:
    """af_checks rows for the checked datasets, each with the content hash it was measured on."""
    import json

    from etl.warehouse import transaction, utcnow
    con = connect(paths)
    try:
        sha = dict(con.execute("SELECT dataset_id, content_sha256 FROM datasets WHERE list_contains(?, dataset_id)",
                               [[r["dataset_id"] for r in out]]).fetchall())
        with transaction(con):
            con.executemany("INSERT OR REPLACE INTO af_checks (dataset_id, content_sha256, task, n, accuracy, "
                            "ci_low, ci_high, by_seed, seeds, folds, size, computed_at, fold_by, by_split, "
                            "tree_accuracy, tree_ci_low, tree_ci_high, tree_by_split) "
                            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            [[r["dataset_id"], sha[r["dataset_id"]], task, r["n"], r["accuracy"], r["ci"][0],
                              r["ci"][1], json.dumps(r["by_seed"], sort_keys=True), seeds, folds, size, utcnow(),
                              fold_by, json.dumps(r["by_split"], sort_keys=True), r["tree"]["accuracy"],
                              r["tree"]["ci"][0], r["tree"]["ci"][1], json.dumps(r["tree"]["by_split"], sort_keys=True)]
                             for r in out])
    finally:
        con.close()
    log.info("af-check: recorded %d datasets in af_checks", len(out))


def _tree_checks(con, paths: Paths, ids: list[str], task: str, tree_seeds: list[int], fold_by: str,
                 seeds: tuple[int, ...]) -> dict[int, dict[str, dict[str, tuple[float, bool]]]]:
    """af-check's tree figure: per check seed, the tree probe's verdicts (trees seeded `tree_seeds`, the
    questions resolved once)."""
    from features.diagnostics.tree_probe import pooled_tree_runs
    runs, answers = pooled_tree_runs(con, paths.lance, ids, task, tree_seeds, fold_by)
    return {s: linear_verdicts(r, answers) for s, r in zip(seeds, runs)}


def _tree_oof(con, paths: Paths, ids: list[str], task: str, tree_seed: int, fold_by: str, members: int = 1
              ) -> dict[str, dict[str, tuple[float, bool]]]:
    """The tree probe's verdict on every question (features/diagnostics/tree_probe.py): trees fitted on
    the task's AF datasets together, as the pooled GM3C model is, each question scored out of fold
    (`fold_by` as the adversary's: with `split` the val and the test split each a fold), its folds and
    trees seeded `tree_seed` (the drop: `TREE_SEED` + the datasets' seed; af-check: its check seeds).
    `members` > 1: the mean log-odds of that many fold splits (seeds `member_seed(tree_seed, k)`)."""
    from features.diagnostics.tree_probe import pooled_tree_runs
    t0 = time.perf_counter()
    runs, answers = pooled_tree_runs(con, paths.lance, ids, task, [member_seed(tree_seed, k) for k in range(members)],
                                     fold_by)
    scores = {d: {q: np.round(np.mean([r[d][q] for r in runs], axis=0), 6) for q in qs}
              for d, qs in runs[0].items()}
    log.info("af-pool: the tree probe (%d fold split%s) scored %d questions in %.1f s", members,
             "s" if members > 1 else "", sum(len(qs) for qs in scores.values()), time.perf_counter() - t0)
    return linear_verdicts(scores, answers)


def _words_oof(con, ids: list[str], seed: int, fold_by: str, members: int = 1) -> tuple[dict, dict]:
    """The words probe's verdicts on every question (features/diagnostics/words_probe.py): the linear model
    cross-fitted on each dataset, and the tree probe pooled over the datasets (`fold_by`), both in the space
    of the titles' own words and seeded `seed`: (linear verdicts, tree verdicts), two lists of the drop. The
    linear model here is order-blind (the report's knows the blank's place, `placed_features`: a check the
    drop does not aim at; aimed at it too, the demo's reading benchmark had 4 datasets instead of 5)."""
    from features.diagnostics.bias import resolve_dataset
    from features.diagnostics.tree_probe import pooled_tree_runs
    from features.diagnostics.words_probe import words_space
    t0 = time.perf_counter()
    space = words_space(con)
    resolved = {d: resolve_dataset(con, d, space, "textual_cloze") for d in ids}
    lin = _probe_verdicts(resolved, space.mat, seed)
    runs, answers = pooled_tree_runs(con, "", ids, "textual_cloze", [member_seed(seed, k) for k in range(members)],
                                     fold_by, resolved={d: (r, space.mat) for d, r in resolved.items()})
    trees = runs[0] if members == 1 else {d: {q: np.round(np.mean([r[d][q] for r in runs], axis=0), 6) for q in qs}
                                          for d, qs in runs[0].items()}
    log.info("af-pool: the words probe (linear and %d tree fold split%s) scored the questions in %.1f s", members,
             "s" if members > 1 else "", time.perf_counter() - t0)
    return lin, linear_verdicts(trees, answers)


def _order_oof(con, ids: list[str], seed: int) -> dict:
    """The order probe's verdicts on every question (features/diagnostics/order_probe.py): the linear model on
    the corpus's title-order counts, cross-fitted on each dataset and seeded `seed`, one more list of the drop."""
    from features.diagnostics.order_probe import order_verdicts
    t0 = time.perf_counter()
    out = order_verdicts(con, ids, seed)
    log.info("af-pool: the order probe scored the questions in %.1f s", time.perf_counter() - t0)
    return out


def _look_oof(con, paths: Paths, ids: list[str], task: str, seed: int, fold_by: str) -> tuple[dict, dict]:
    """The look probe's verdicts on every question (features/diagnostics/look_probe.py): the linear model
    cross-fitted on each dataset, and the trees pooled over the datasets (`fold_by`), both on the photos' own
    pixel statistics (every readable photo's, from the cache when its file is unchanged) and seeded `seed`:
    (linear verdicts, tree verdicts), two lists of the drop. A question showing an unreadable photo has no
    verdict (it is not on these lists)."""
    from features.diagnostics.bias import resolve_dataset
    from features.diagnostics.look_probe import look_space
    from features.diagnostics.tree_probe import pooled_tree_runs
    t0 = time.perf_counter()
    space = look_space(con, paths.home, progress=False)
    resolved = {d: resolve_dataset(con, d, space, task) for d in ids}
    lin = _probe_verdicts(resolved, space.mat, seed)
    runs, answers = pooled_tree_runs(con, "", ids, task, [seed], fold_by,
                                     resolved={d: (r, space.mat) for d, r in resolved.items()})
    log.info("af-pool: the look probe (linear and trees) scored the questions in %.1f s", time.perf_counter() - t0)
    return lin, linear_verdicts(runs[0], answers)


def _pixel_oof(con, paths: Paths, ids: list[str], seed: int, side: int) -> dict:
    """The pixel probe's verdicts on every question (`_pixel_scores`: per dataset a small CNN trained on its
    photos at `side` x `side`, each question scored by the model of a fold that never saw its recipe, the val and
    test splits held out whole), seeded `seed`; one list of the drop. A question showing a photo that cannot be
    read has no verdict (it is not on this list)."""
    return verdicts(_pixel_scores(con, paths, ids, seed, side))


def _solved_share(v: dict[str, tuple[float, bool]]) -> float:
    """The share of a dataset's questions an adversary solves, from its `verdicts`."""
    return round(sum(r for _, r in v.values()) / max(len(v), 1), 4)


def _pixel_scores(con, paths: Paths, ids: list[str], seed: int, side: int,
                  items: dict[tuple[str, str], list[str]] | None = None) -> dict[str, dict[str, dict]]:
    """The pixel probe's out-of-fold scores of the questions as they are now (features/diagnostics/pixel_probe.py),
    seeded `seed`: dataset_id -> qid -> {"choices" (4,), "answer"}, as `_scores` gives them. With `items`
    (coherence: (dataset_id, qid) -> the recorded alternate foreign photos' image ids, in the alternates' order)
    also "alts" (A, 4): each alternate scored in the answer's place. A question showing a photo that cannot be
    read is left out; an alternate that cannot be read has NaN logits (`guided_scores` reads the GM3C ones alone
    for it)."""
    from features.diagnostics import pixel_probe as pp
    t0 = time.perf_counter()
    index = pp.photo_index(con)
    loaded, unreadable = pp.load_questions(con, paths.home, ids, side, index=index)
    out: dict[str, dict[str, dict]] = {}
    for _, pq, _ in loaded:
        d, alt = pq.dataset_id, None
        if items is not None:
            pq, alt = pp.with_alternates(pq, {q: items.get((d, q), []) for q in pq.qids}, index, paths.home, side,
                                         unreadable)
        lg, jobs, results = pp.out_of_fold_logits(pq, seed, alt=alt)
        al = pp.alternate_logits(len(pq.qids), alt.shape[1], jobs, results) if alt is not None else None
        out[d] = {q: {"choices": lg[n], "answer": int(pq.answers[n]),
                      **({"alts": al[n, :len(items.get((d, q), []))]} if al is not None else {})}
                  for n, q in enumerate(pq.qids) if not np.isnan(lg[n]).any()}
    if unreadable:
        log.warning("af-pool: the pixel probe could not read %d photos; the questions showing them have no pixel "
                    "verdict%s", len(unreadable), ", their alternates are left to the GM3C ensemble" if items else "")
    log.info("af-pool: the pixel probe (%d x %d) scored the questions%s in %.1f s", side, side,
             " and their alternates" if items is not None else "", time.perf_counter() - t0)
    return out
