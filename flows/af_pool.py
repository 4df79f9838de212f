"""Prefect flow `af-pool`: the pooled adversary over a task's AF datasets (visual cloze, coherence).

For `rounds` rounds: export the task's AF datasets with vectors (a temporary folder) -> out-of-fold
GM3C question-only logits over all of them at once, for the choices and for each question's recorded
knob-valid alternates (training/af_pooled.py) -> in each dataset, the questions it solves beyond
`solved_share` (a quarter; most confident first) are aimed at the answer ranks short of their share:
cloze, alternates it scores above the answer replace distractors it scores below (swaps_for);
coherence, the alternate foreign image that puts the answer's rank nearest the target
(coherence_swap_for) -> write back (features/datasets/af_pooled.apply_swaps). Then drop the questions
it solves with probability >= tau, never below `min_kept` x the plain setting (and, with `keep_solved`,
never below that share of the kept questions solved): as judged by the last
round's model with the swapped choices' logits put in, or (`fresh_drop`, or no rounds) by a model
trained anew on the questions as they now are. Run after `mrqa generate` of the AF settings and
before `mrqa report`.
"""
from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import numpy as np
from prefect import flow

from etl.config import Paths
from etl.warehouse import connect
from features.datasets.af_pooled import af_datasets, alternates, apply_drops, apply_swaps
from features.datasets.export import export_parquet
from training.af_pooled import (
    FOLDS,
    ROUNDS,
    SOLVED_SHARE,
    TAU,
    check_args,
    drop_plan,
    out_of_fold_scores,
    swap_plan,
    swapped_scores,
    verdicts,
)

log = logging.getLogger(__name__)


@flow(name="af-pool", log_prints=True)
def af_pool_flow(task: str = "visual_cloze", tau: float = TAU, min_kept: float = 0.0, folds: int = FOLDS,
                 seed: int = 0, size: str = "small", rounds: int = ROUNDS,
                 solved_share: float = SOLVED_SHARE, fresh_drop: bool = False, keep_solved: float = 0.0) -> dict:
    """Swap (`rounds` rounds) and filter the AF datasets of `task` (seed `seed`) with the pooled
    out-of-fold adversary. The drop reads the last round's model, its logits of the swapped choices
    put in (`fresh_drop`: a model trained anew on the swapped questions; one more pass)."""
    paths = Paths.from_env().ensure()
    check_args(tau, min_kept, rounds, solved_share, keep_solved)
    con = connect(paths)
    try:
        rows = af_datasets(con, task, seed)
        if not rows:
            raise ValueError(f"no AF datasets of {task} (seed {seed}) in the warehouse: run "
                             f"`mrqa generate --task {task} --knobs 0-1-1-af` (or --all) first")
        done = [r["dataset_id"] for r in rows if r["params"].get("af_pooled")]
        if done:
            raise ValueError(f"already filtered by the pooled adversary: {', '.join(done)}; regenerate them "
                             "(`mrqa generate`) to filter again")
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
            items = {k: [x["item"] for x in a["alts"]] for k, a in alts.items()}
            vectors = _vectors(con, paths, ids, sorted({i for k, a in alts.items()
                                                        for i in items[k] + (a["choices"] if task == "visual_cloze"
                                                                             else [])}))
            scores = _scores(con, paths, ids, recipe_of, folds, seed + 1000 * rnd, size, items, vectors)
            plan = swap_plan(scores, alts, solved_share, vectors if task == "visual_cloze" else None)
            done_n = apply_swaps(con, plan, scores, rnd)
            acc = verdicts(scores)
            scores = swapped_scores(scores, plan)      # that model's logits of the questions as they now are
            for d in ids:
                swap_log[d].append({"round": rnd, "swapped": done_n.get(d, 0),
                                    "oof_question_only_acc": round(sum(r for _, r in acc[d].values())
                                                                   / max(len(acc[d]), 1), 4)})
                log.info("af-pool round %d %s: out-of-fold question-only %.3f, swapped %d questions", rnd, d,
                         swap_log[d][-1]["oof_question_only_acc"], done_n.get(d, 0))
        fresh = bool(fresh_drop or not scores)            # no round ran: the drop's own pass
        if fresh:
            scores = _scores(con, paths, ids, recipe_of, folds, seed, size)
        oof = verdicts(scores)
        plan = drop_plan(oof, {r["dataset_id"]: r["n_plain"] or 0 for r in rows}, tau, min_kept, keep_solved)
        info = {"tau": tau, "folds": folds, "seed": seed, "size": size, "min_kept": min_kept,
                "rounds": rounds, "solved_share": solved_share, "keep_solved": keep_solved, "fresh_drop": fresh,
                "adversary": "GM3C question_only, pooled over the task's AF datasets, out of fold by recipe"}
        res = apply_drops(con, plan, oof, info, {d: {"swap_rounds": swap_log[d]} for d in ids if swap_log[d]})
    finally:
        con.close()
    for r in res:
        log.info("af-pool %s: dropped %d, kept %d (out-of-fold question-only %.3f -> %.3f)", r["dataset_id"],
                 r["dropped"], r["kept"], r["oof_question_only_acc"] or 0, r["oof_question_only_acc_kept"] or 0)
    return {"task": task, "datasets": res, **info}


def _vectors(con, paths: Paths, ids: list[str], items: list[str]) -> dict[str, np.ndarray]:
    """Image vectors of `items` in the datasets' feature space (their encoder), as the store holds them."""
    from features.vectors.store import FeatureStore
    enc = con.execute("SELECT DISTINCT encoder_id FROM datasets WHERE list_contains(?, dataset_id)", [ids]).fetchall()
    got, mat = FeatureStore(paths.lance).image_vectors(enc[0][0], ids=items)
    return dict(zip(got, np.asarray(mat, dtype=np.float32)))


def _scores(con, paths: Paths, ids: list[str], recipe_of: dict, folds: int, seed: int, size: str,
            alts: dict | None = None, vectors: dict | None = None) -> dict:
    """Out-of-fold logits of the datasets as the warehouse holds them now (and of their alternates,
    whose vectors are in `vectors`)."""
    with tempfile.TemporaryDirectory(prefix="mrqa-af-pool-") as tmp:
        export_parquet(con, ids, Path(tmp), with_vectors=True, lance_uri=paths.lance)
        return out_of_fold_scores(Path(tmp), ids, recipe_of, folds=folds, seed=seed, size=size,
                                  lance_uri=paths.lance, alternates=alts, alt_vectors=vectors)
