"""Apply the pooled adversary's verdict to the warehouse (training/af_pooled.py computes it).

`af_datasets(con, task, seed)` lists a task's AF datasets with their plain setting's question count;
`apply_drops(con, plan, ...)` deletes the named questions of each dataset in one transaction per
dataset, recomputes its question and recipe counts, content hash and distance-probe accuracy, records
the step in `datasets.params.af_pooled` (tau, folds, seed, the floor, what the adversary read before and after)
and the dropped count as the generation skip `af_pooled_predictable`, and removes the dataset's now
stale `bias_metrics` row (`mrqa report` recomputes it). A dataset filtered once is refused a second
time: regenerate it (`mrqa generate`) to filter again.

Swaps come first (`alternates`, `apply_swaps`): each cloze (visual and textual) and coherence AF question records in
its provenance the knob-valid candidates that were not picked (`af_alternates`,
features/datasets/adversarial.py). The pooled adversary scores them in place, and a question it
solves too easily gets a distractor (coherence: a foreign image) it finds plausible from that list
(training/af_pooled.swaps_for, coherence_swap_for). The swapped-out image joins the alternates;
`distractors` (coherence: the foreign image's fields), `choice_items`, `af_pools` and `n_closer`
follow the new choice; its `af_scores` entry (coherence: all four) becomes null, since that ensemble
never scored it; `af_pooled_swaps` records each swap with the round and the adversary's logits. The
knob-3 flags are kept, so every knob holds; the drop runs after the last round. Visual ordering
records no alternates: its candidates are the wrong orders AF considered (`af_candidates`), and those
not shown are its alternates (`order_alternates`); a swap rewrites the choice, its permutation and
summed distance (`choice_perms`, `choice_summed_distance`), and the distance probe (the smallest
summed distance) is recomputed.
"""
from __future__ import annotations

import json

import duckdb
import numpy as np

from etl.warehouse import load_query, transaction
from features.datasets.generate import PERMS

SKIP_REASON = "af_pooled_predictable"
ROUND_DIGITS = 6                 # as the generator rounds its recorded distances


def _dumps(x) -> str:
    return json.dumps(x, sort_keys=True, separators=(",", ":"))


def alternates(con: duckdb.DuckDBPyConnection, dataset_ids: list[str]) -> dict[tuple[str, str], dict]:
    """(dataset_id, qid) -> {"alts": its recorded alternates, "closer": per choice column, is it a
    distractor closer to the question than the answer (the answer's: False), "need": the closer
    distractors knob 3 asks for, "exact": whether exactly (knob-3 balanced mode) or at least,
    "choices": the choice image ids (textual cloze: the titles' item ids), "probe_hit": coherence, whether
    the distance probe spots the foreign image now; textual cloze also "texts": the choices' titles}.
    Questions without recorded alternates are left out."""
    rows = con.execute("""SELECT dataset_id, qid, answer, choice_list, json_extract(provenance, '$.af_alternates'),
                                 json_extract(provenance, '$.choice_items'),
                                 json_extract(provenance, '$.distractors'),
                                 json_extract(provenance, '$.n_closer_required'),
                                 json_extract_string(provenance, '$.k3_mode'),
                                 json_extract(provenance, '$.distance_probe_hit'),
                                 CASE WHEN json_exists(provenance, '$.af_candidates') THEN provenance END
                          FROM questions WHERE list_contains(?, dataset_id) ORDER BY dataset_id, qid""",
                       [dataset_ids]).fetchall()
    out = {}
    for d, q, answer, choices, alts, items, dis, need, mode, hit, order_prov in rows:
        if order_prov is not None:                      # ordering: the candidate wrong orders not shown
            alts = order_alternates(json.loads(order_prov), list(choices))
            if alts:
                out[(d, q)] = {"alts": alts, "closer": [False] * 4, "need": 0, "exact": False,
                               "choices": list(choices), "probe_hit": False}
            continue
        alts = json.loads(alts) if alts else []
        if not alts:
            continue
        closer = [bool(x["closer"]) for x in json.loads(dis)] if dis else [False] * 3
        closer.insert(answer, False)
        titles = any("text" in x for x in alts)
        out[(d, q)] = {"alts": alts, "closer": closer, "need": int(json.loads(need or "0")),
                       "exact": mode == "balanced", "choices": json.loads(items) if titles else list(choices),
                       "probe_hit": bool(json.loads(hit or "false")),
                       **({"texts": list(choices)} if titles else {})}
    return out


def _encode_order(like: str, ids: list[str]) -> str:
    """An ordering choice (its image ids in order) written as the question's other choices are (`like`):
    `questions.ordering` joins quote-free ids by hand and JSON-encodes the rest."""
    plain = '["' + '", "'.join(json.loads(like)) + '"]'
    return '["' + '", "'.join(ids) + '"]' if like == plain else json.dumps(ids)


def order_alternates(p: dict, choices: list[str]) -> list[dict]:
    """Visual ordering: the wrong orders AF considered (`af_candidates`, permutation numbers, in the knob's
    draw order) that the question does not show now, each as {"perm", "seq": its image ids in order,
    "item": the choice string it would be, "closer": False}. Knob 2 of ordering is a sampling weight over
    the 23 wrong orders, so every candidate is knob-valid; knob 3 does not apply."""
    items = p["question_items"]
    shown = {PERMS.index(tuple(c)) for c in p["choice_perms"]}
    out = []
    for n in p["af_candidates"]:
        if n in shown:
            continue
        seq = [items[i] for i in PERMS[n]]
        out.append({"perm": int(n), "seq": seq, "item": _encode_order(choices[0], seq), "closer": False})
    return out


def summed_distance(seq: list[str], vectors: dict[str, np.ndarray]) -> float:
    """An order's summed cosine distance of consecutive images, as `questions.ordering` computes it."""
    v = np.stack([np.asarray(vectors[i], dtype=np.float32) for i in seq]).astype(np.float64)
    return float(sum(1.0 - v[t] @ v[t + 1] for t in range(len(seq) - 1)))


# what a coherence question's provenance says of its foreign image, and the alternate's field for each
FOREIGN_FIELDS = {"anchor_item": "anchor_item", "distance": "distance", "dist_q": "dist_q",
                  "distance_probe_hit": "distance_probe_hit", "foreign_rank": "foreign_rank",
                  "foreign_item": "item", "foreign_recipe_id": "recipe_id"}
# a redrawn question's foreign photo also names its source photo and, matched, its profile's distance to the
# reference's (features/datasets/redraw_coherence.py)


def _swap_foreign(p: dict, question: list[str], choices: list[str], answer: int, alt_ix: int, rnd: int,
                  before: list, after: list) -> None:
    """Coherence: make alternate `alt_ix` the foreign image (the answer) of one question (in place)."""
    alts = p["af_alternates"]
    new = alts[alt_ix]
    fields = {**FOREIGN_FIELDS, **{f: a for f, a in (("foreign_source", "source"), ("match_l1", "match_l1"),
                                                     ("items_share", "items_share"),
                                                     ("items_shown_min", "items_shown_min")) if f in p}}
    alts[alt_ix] = {**{a: p[f] for f, a in fields.items()}, "pool": p["af_pools"][answer]}
    old = p["foreign_item"]
    for f, a in fields.items():
        p[f] = new[a]
    p["af_pools"][answer] = new["pool"]
    p["af_scores"] = [None] * len(p["af_scores"])
    question[answer] = choices[answer] = new["item"]
    p.setdefault("af_pooled_swaps", []).append({"round": rnd, "choice": answer, "out": old, "in": new["item"],
                                                "logits_before": before, "logits_after": after})


def _swap(p: dict, choices: list[str], answer: int, col: int, alt_ix: int, rnd: int, logits: tuple) -> None:
    """Swap choice `col` of one question for its alternate `alt_ix`, provenance included (in place).
    Textual cloze: the choice becomes the alternate's title (`text`), its item id goes to `choice_items`,
    and the title swapped out joins the alternates with its text."""
    alts = p["af_alternates"]
    new = alts[alt_ix]
    slot = col - (col > answer)                         # the distractor's index among the three
    old = p["distractors"][slot]
    alts[alt_ix] = {**old, "pool": p["af_pools"][col]}
    if "text" in new:                                   # textual cloze: the choice is the title
        alts[alt_ix]["text"] = choices[col]
    p["distractors"][slot] = {k: new[k] for k in old}
    p["af_pools"][col] = new["pool"]
    p["af_scores"][col] = None
    p["choice_items"][col] = new["item"]
    choices[col] = new.get("text", new["item"])
    p["n_closer"] = sum(bool(d["closer"]) for d in p["distractors"])
    p.setdefault("af_pooled_swaps", []).append({"round": rnd, "choice": col, "out": old["item"], "in": new["item"],
                                                "logit_in": logits[0], "logit_out": logits[1],
                                                "logit_answer": logits[2]})


def _swap_order(p: dict, choices: list[str], col: int, alts: list[dict], alt_ix: int, rnd: int, logits: tuple,
                vectors: dict[str, np.ndarray]) -> None:
    """Visual ordering: wrong order `col` becomes alternate `alt_ix` of `alts` (`order_alternates` of the
    question before this round's swaps), with its permutation and summed distance (in place)."""
    new = alts[alt_ix]
    old = PERMS.index(tuple(p["choice_perms"][col]))
    choices[col] = new["item"]
    p["choice_perms"][col] = list(PERMS[new["perm"]])
    p["choice_summed_distance"][col] = round(summed_distance(new["seq"], vectors), ROUND_DIGITS)
    p["af_scores"][col] = None
    p.setdefault("af_pooled_swaps", []).append({"round": rnd, "choice": col, "out": old, "in": new["perm"],
                                                "logit_in": logits[0], "logit_out": logits[1],
                                                "logit_answer": logits[2]})


def apply_swaps(con: duckdb.DuckDBPyConnection, swaps: dict[str, dict[str, list[tuple[int, int]]]],
                scores: dict[str, dict[str, dict]], rnd: int,
                vectors: dict[str, np.ndarray] | None = None) -> dict[str, int]:
    """Carry out each question's (choice column, alternate index) swaps of round `rnd`; returns the
    number of questions changed per dataset. The content hash and distance probe are rewritten.
    Visual ordering needs the question images' `vectors` (a swapped-in order's summed distance)."""
    out = {}
    for did, qs in sorted(swaps.items()):
        todo = {q: sw for q, sw in qs.items() if sw}
        if not todo:
            out[did] = 0
            continue
        rows = con.execute("SELECT qid, question, choice_list, answer, provenance FROM questions WHERE dataset_id = ? "
                           "AND list_contains(?, qid) ORDER BY qid", [did, sorted(todo)]).fetchall()
        new = []
        for qid, question, choices, answer, prov in rows:
            p, question, choices, s = json.loads(prov), list(question), list(choices), scores[did][qid]
            orders = order_alternates(p, choices) if "af_candidates" in p else None
            for col, j in todo[qid]:
                if orders is not None:
                    if vectors is None:
                        raise ValueError("swapping visual ordering choices needs the question images' vectors")
                    _swap_order(p, choices, col, orders, j, rnd,
                                (float(s["alts"][j]), float(s["choices"][col]), float(s["choices"][answer])), vectors)
                elif s["alts"].ndim == 2:
                    _swap_foreign(p, question, choices, answer, j, rnd, s["choices"].tolist(), s["alts"][j].tolist())
                else:
                    _swap(p, choices, answer, col, j, rnd,
                          (float(s["alts"][j]), float(s["choices"][col]), float(s["choices"][answer])))
            new.append((qid, question, choices, _dumps(p)))
        with transaction(con):
            con.execute("CREATE OR REPLACE TEMP TABLE af_swapped (qid VARCHAR, question VARCHAR[], "
                        "choice_list VARCHAR[], provenance JSON)")
            con.executemany("INSERT INTO af_swapped VALUES (?, ?, ?, ?)", new)
            con.execute("UPDATE questions SET question = s.question, choice_list = s.choice_list, "
                        "provenance = s.provenance FROM af_swapped s "
                        "WHERE questions.dataset_id = ? AND questions.qid = s.qid", [did])
            con.execute("DROP TABLE af_swapped")
            rewrite_dataset(con, did)
        out[did] = len(new)
    return out


def rewrite_dataset(con: duckdb.DuckDBPyConnection, did: str, step=None) -> int:
    """The dataset's counts, content hash and distance-probe accuracy from its questions now (the probe
    only where every question records what it needs), `step(params)` applied to its params, its stale
    `bias_metrics` row removed; returns its question count. Inside the caller's transaction."""
    n, n_rec = con.execute("SELECT count(*), count(DISTINCT recipe_id) FROM questions WHERE dataset_id = ?",
                           [did]).fetchall()[0]
    sha = con.execute(load_query("questions_content_hash"), {"dataset_id": did}).fetchall()[0][0]
    params = json.loads(con.execute("SELECT params FROM datasets WHERE dataset_id = ?", [did]).fetchall()[0][0])
    hits = covered = 0
    for answer, prov in con.execute("SELECT answer, provenance FROM questions WHERE dataset_id = ?", [did]).fetchall():
        p = json.loads(prov)
        if "distance_probe_hit" in p:                   # coherence: recorded per foreign image
            hits += bool(p["distance_probe_hit"])
        elif "choice_summed_distance" in p:             # ordering: the smallest summed distance
            hits += int(np.argmin(p["choice_summed_distance"])) == answer
        elif "distractors" in p and "d_answer_q" in p:
            dq = [d["dist_q"] for d in p["distractors"]]
            dq.insert(answer, p["d_answer_q"])
            hits += int(np.argmin(dq)) == answer
        else:
            continue
        covered += 1
    if n and covered == n and "distance_probe_accuracy" in params:
        params["distance_probe_accuracy"] = round(hits / n, 4)
    if step is not None:
        step(params)
    con.execute("UPDATE datasets SET n_questions = ?, n_recipes = ?, content_sha256 = ?, params = ? "
                "WHERE dataset_id = ?", [n, n_rec, sha, json.dumps(params, sort_keys=True), did])
    con.execute("DELETE FROM bias_metrics WHERE dataset_id = ?", [did])
    return n


def af_datasets(con: duckdb.DuckDBPyConnection, task: str, seed: int = 0, distractors: str = "ball") -> list[dict]:
    """The AF datasets of `task` and `seed` whose distractors were drawn by `distractors` (ball: the knob
    settings; matched: coherence beyond the paper, features/datasets/matched.py; the two are separate
    benchmarks, never pooled together): dataset_id, setting, params, n_questions, and n_plain (the
    question count of the same setting without AF, same seed and encoder: the paper setting's where a
    parameter variant of it (a `-p<hash>` id) was generated too, and for a matched setting
    (`0-0-0-matched-af`, `0-0-0-author-af`) and a redrawn one (`0-1-1-redrawn-af`) the paper setting's (`0-0-0`,
    `0-1-1`); None
    when not generated) and plain_id (that
    plain dataset's id, or None)."""
    rows = con.execute("""
        SELECT a.dataset_id, a.setting, a.params, a.n_questions, p.n_questions, p.dataset_id
        FROM datasets a LEFT JOIN LATERAL (
            SELECT p.n_questions, p.dataset_id FROM datasets p WHERE p.task = a.task
              AND NOT coalesce(p.adversarial, false)
              AND p.setting = regexp_replace(a.setting, '(-matched-redrawn|-matched|-author|-redrawn)?-af$', '')
              AND p.seed = a.seed
              AND p.encoder_id IS NOT DISTINCT FROM a.encoder_id
            ORDER BY regexp_matches(p.dataset_id, '-p[0-9a-f]{6}$'), p.dataset_id LIMIT 1) p ON true
        WHERE a.task = ? AND a.seed = ? AND coalesce(a.adversarial, false)
          AND coalesce(json_extract_string(a.params, '$.distractors'), 'ball') = ?
        ORDER BY a.dataset_id""", [task, seed, distractors]).fetchall()
    return [{"dataset_id": d, "setting": s, "params": json.loads(p) if p else {}, "n_questions": n, "n_plain": np_,
             "plain_id": pid} for d, s, p, n, np_, pid in rows]


def split_counts(con: duckdb.DuckDBPyConnection, rows: list[dict]) -> tuple[dict, dict]:
    """For `af_datasets` rows: dataset_id -> qid -> split of each AF question, and dataset_id -> split ->
    the plain setting's questions there (empty where no plain dataset was generated)."""
    ids = [r["dataset_id"] for r in rows]
    split_of: dict[str, dict[str, str]] = {d: {} for d in ids}
    for d, q, s in con.execute("SELECT dataset_id, qid, split FROM questions WHERE list_contains(?, dataset_id)",
                               [ids]).fetchall():
        split_of[d][q] = s
    pids = sorted({r["plain_id"] for r in rows if r["plain_id"]})
    counts = con.execute("SELECT dataset_id, split, count(*) FROM questions WHERE list_contains(?, dataset_id) "
                         "GROUP BY ALL", [pids]).fetchall()
    n_plain = {r["dataset_id"]: {s: n for pid, s, n in counts if pid == r["plain_id"]} for r in rows}
    return split_of, n_plain


def apply_drops(con: duckdb.DuckDBPyConnection, plan: dict[str, list[str]],
                oof: dict[str, dict[str, tuple[float, bool]]], info: dict,
                extra: dict[str, dict] | None = None) -> list[dict]:
    """Delete each dataset's planned questions and record the step (`info`, and the dataset's own
    `extra[dataset_id]`, e.g. its swap rounds); returns one summary per dataset."""
    out = []
    for did, drop in sorted(plan.items()):
        qs, gone = oof[did], set(drop)
        kept = [q for q in qs if q not in gone]
        before = sum(r for _, r in qs.values()) / len(qs) if qs else None
        after = sum(qs[q][1] for q in kept) / len(kept) if kept else None
        step = {**info, **(extra or {}).get(did, {}), "dropped": len(drop), "scored": len(qs),
                "oof_question_only_acc": None if before is None else round(before, 4),
                "oof_question_only_acc_kept": None if after is None else round(after, 4)}

        def record(params: dict, step=step, n_drop=len(drop)) -> None:
            params["af_pooled"] = step
            params.setdefault("skips", {})[SKIP_REASON] = n_drop

        with transaction(con):
            con.execute("DELETE FROM questions WHERE dataset_id = ? AND list_contains(?, qid)", [did, drop])
            n = rewrite_dataset(con, did, record)
            con.execute("INSERT OR REPLACE INTO generation_skips VALUES (?, ?, ?)", [did, SKIP_REASON, len(drop)])
        out.append({"dataset_id": did, "dropped": len(drop), "kept": n, **{k: step[k] for k in (
            "oof_question_only_acc", "oof_question_only_acc_kept")}})
    return out
