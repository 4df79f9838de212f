"""What adversarial filtering did to each dataset: kept share, question-only probe, step-text oracle, slot rule.

    mrqa af-report [--format json]                       # the same as:
    .venv/bin/python -m features.datasets.af_report --home /tmp/e2home [--json]

Per AF dataset of the warehouse and its knob-only twin (same setting without AF): questions, the share AF
kept (of the knob questions, and of those it could pose: less the questions whose ball holds only text
twins of the answer step, two right answers, skip `af_text_twin`), the learned question-only probe
(5-fold by recipe; recorded by the generator, before = the knob selection), and the step-text oracle: the
choice closest to the recipe's own step text in the encoder's joint image/text space (cloze: the answer
step's title; coherence: the choice farthest from every shown step's title). The probe should fall to
chance while the oracle stays high: the question is then answered by reading the recipe, not by the look
of the photos. The oracle is told the answer step; the **slot rule** (visual cloze) is not: it reads the
recipe as a reader must, placing the shown photos among the step texts and scoring each choice against
the steps the placeholder's place allows (`slot_rule_accuracy`), with no parameter fitted.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import replace

import numpy as np


def _unit_rows(mat) -> np.ndarray:
    mat = np.asarray(mat, dtype=np.float64)
    return mat / np.maximum(np.linalg.norm(mat, axis=1, keepdims=True), 1e-12)


def _vectors(lance_uri: str, encoder_id: str) -> tuple[dict, dict]:
    from features.vectors.store import FeatureStore
    store = FeatureStore(lance_uri)
    out = []
    for ids, mat in (store.image_vectors(encoder_id), store.text_vectors(encoder_id, "title")):
        if len(ids) == 0:
            raise LookupError(f"no vectors of encoder {encoder_id} in {lance_uri}: run `mrqa embed` (or check --home)")
        out.append(dict(zip(ids, _unit_rows(mat))))
    return out[0], out[1]


def oracle_accuracy(rows: list[tuple], img: dict, title: dict) -> float | None:
    """rows: (task, recipe_id, choice_list, answer, question_step_ids, answer_step). Questions whose
    titles are missing are left out. Cloze: the choice nearest the answer step's title; coherence: the
    choice least like every shown step's title; ordering: the order whose photos, position by position,
    are most like the shown steps' titles in recipe order."""
    hits = n = 0
    for task, rid, choices, answer, steps, answer_step in rows:
        if task == "visual_ordering":
            ts = [title.get(f"{rid}_{s}_title") for s in steps]
            if any(t is None for t in ts):
                continue
            orders = [json.loads(c) for c in choices]
            pick = int(np.argmax([sum(float(img[x] @ t) for x, t in zip(o, ts)) for o in orders]))
            hits += pick == answer
            n += 1
            continue
        c = np.array([img[x] for x in choices])
        if task == "visual_cloze":
            t = title.get(f"{rid}_{answer_step}_title")
            if t is None:
                continue
            pick = int(np.argmax(c @ t))
        else:
            ts = [title[f"{rid}_{s}_title"] for s in steps if f"{rid}_{s}_title" in title]
            if not ts:
                continue
            pick = int(np.argmin((c @ np.array(ts).T).max(1)))
        hits += pick == answer
        n += 1
    return round(hits / n, 4) if n else None


SLOT_TEMPERATURE = 0.05   # a shown photo's place: softmax over its cosines to the step texts (the readers' too:
SLOT_WEIGHT = 0.05        # training/model.py ALIGN_TEMPERATURE, SLOT_WEIGHT / 10) and the slot's log-prior weight


def slot_rule_accuracy(rows: list[tuple], img: dict, body: dict) -> float | None:
    """rows: (recipe_id, question, choice_list, answer) of visual cloze questions; body: recipe_id -> the
    unit step-body vectors in step order. The rule is not told the answer step. Each shown photo's place
    is a softmax over its cosines to the recipe's step texts; the placeholder's step lies after every
    earlier photo's and before every later one's, on none a shown photo takes (the product of those
    probabilities, normalised: the slot). The pick is the choice with the highest cosine to a step,
    centred on its mean over the recipe's steps, plus SLOT_WEIGHT x the slot's log-probability of that
    step. Questions whose recipe has no body vectors, or a photo without a vector, are left out."""
    hits = n = 0
    for rid, question, choices, answer in rows:
        steps = body.get(rid)
        if steps is None or any(x not in img for x in choices) \
                or any(x not in img for x in question if x != "@placeholder"):
            continue
        slot = question.index("@placeholder")
        w, shown = np.ones(len(steps)), np.zeros(len(steps))
        for k, x in enumerate(question):
            if k == slot:
                continue
            p = np.exp((steps @ img[x] - 1.0) / SLOT_TEMPERATURE)
            p /= p.sum()
            cdf = np.cumsum(p)
            w *= np.clip(cdf - p, 0, 1) if k < slot else np.clip(1 - cdf, 0, 1)   # before / after it
            shown += p
        w *= np.clip(1 - shown, 0, 1)
        logw = np.log(w / max(w.sum(), 1e-300) + 1e-6)
        sims = np.array([img[x] for x in choices]) @ steps.T
        centred = sims - sims.mean(1, keepdims=True)
        hits += int(np.argmax((centred + SLOT_WEIGHT * logw).max(1))) == answer
        n += 1
    return round(hits / n, 4) if n else None


def _bodies(lance_uri: str, encoder_id: str) -> dict:
    """recipe_id -> (steps, d) unit step-body vectors in step order."""
    from features.vectors.store import FeatureStore
    ids, mat = FeatureStore(lance_uri).text_vectors(encoder_id, "body")
    by: dict[str, list] = {}
    for i, v in zip(ids, _unit_rows(mat)):
        rid, idx, _ = i.rsplit("_", 2)
        by.setdefault(rid, []).append((int(idx), v))
    return {rid: np.array([v for _, v in sorted(vs, key=lambda t: t[0])]) for rid, vs in by.items()}


def af_report(con, lance_uri: str) -> list[dict]:
    from features.datasets.knobs import KnobParams, dataset_id, setting_name
    datasets = con.execute("""SELECT dataset_id, task, seed, encoder_id, params, n_questions FROM datasets
                              WHERE json_extract_string(params, '$.af_rounds') IS NOT NULL
                              ORDER BY task, dataset_id""").fetchall()
    vectors, bodies, out = {}, {}, []
    fields = set(KnobParams.__dataclass_fields__)
    for did, task, seed, enc, params, n in datasets:
        params = json.loads(params)
        base_params = KnobParams(**{k: v for k, v in params.items() if k in fields and k != "af_rounds"})
        kind = base_params.distractors
        redrawn = kind in ("redrawn", "matched-redrawn")
        if redrawn:                          # drawn again from an AF dataset: its plain setting is the source's
            base_params = replace(base_params, distractors="matched" if kind == "matched-redrawn" else "ball")
        base = dataset_id(task, base_params, seed, enc)
        base_n = con.execute("SELECT n_questions FROM datasets WHERE dataset_id = ?", [base]).fetchall()
        adv = params["adversarial"]
        name = setting_name(base_params.knob1, base_params.knob2, base_params.knob3, base_params.k3_mode,
                            adversarial=True, distractors=kind if redrawn else "ball")
        row = {"dataset_id": did, "task": task, "knobs": name,
               "k3_mode": base_params.k3_mode, "knob_questions": adv["n_knob_questions"], "af_questions": n,
               "kept_share": adv["kept_share"], "probe_before": adv.get("probe_before"),
               "probe_after": adv.get("probe_after"), "adversary_final": adv.get("solved_share_final"),
               "base_registered": bool(base_n)}
        # the knob questions AF could pose at all: a knob question whose distractor is a text twin of
        # the answer step (two right answers) and whose ball holds no non-twin candidate is dropped
        # (`af_text_twin`); AF's kept share of the rest is what its own filtering cost
        twins = con.execute("""SELECT coalesce(sum(n_skipped), 0) FROM generation_skips
                               WHERE dataset_id = ? AND reason = 'af_text_twin'""", [did]).fetchall()[0][0]
        posable = adv["n_knob_questions"] - int(twins)
        row.update({"twin_dropped": int(twins), "kept_of_posable": round(n / posable, 4) if posable > 0 else None})
        # the dataset as it is now: the report's learned probe (its row is removed when the dataset
        # changes, and kept only while it covers this many questions) and the pooled step's figure
        now = con.execute("SELECT qo_acc FROM bias_metrics WHERE dataset_id = ? AND n_questions = ?",
                          [did, n]).fetchall()
        pooled = params.get("af_pooled") or {}
        row.update({"probe_now": now[0][0] if now and now[0][0] is not None else None,
                    "pooled_dropped": pooled.get("dropped"),
                    "pooled_adversary_kept": pooled.get("oof_question_only_acc_kept")})
        if task != "textual_cloze":
            if enc not in vectors:
                vectors[enc] = _vectors(lance_uri, enc)
            img, title = vectors[enc]
            if task == "visual_cloze" and enc not in bodies:   # {} when the store has no body vectors
                bodies[enc] = _bodies(lance_uri, enc)
            slot = {}
            for when, d in (("before", base), ("after", did)):
                q = con.execute("""SELECT task, recipe_id, choice_list, answer, question_step_ids,
                                   CAST(json_extract(provenance, '$.answer_step') AS INTEGER), question
                                   FROM questions WHERE dataset_id = ?""", [d]).fetchall()
                row[f"oracle_{when}"] = oracle_accuracy([r[:6] for r in q], img, title) if q else None
                if task == "visual_cloze":                     # the slot rule, on the same questions
                    slot[f"slot_{when}"] = (slot_rule_accuracy([(r[1], r[6], r[2], r[3]) for r in q], img,
                                                               bodies[enc]) if q and bodies[enc] else None)
            row.update(slot)
        out.append(row)
    return out


def bench_fit(con, lance_uri: str, dataset_id: str) -> dict:
    """Time the adversary's model fit (numpy L-BFGS) against scipy's L-BFGS-B on the same loss, on the
    question-only features of one visual cloze dataset (train split -> test split accuracy)."""
    import time

    from scipy.optimize import minimize

    from features.datasets.adversarial import QuestionOnlyModel, pair_features
    rows = con.execute("""SELECT split, choice_list, answer, provenance FROM questions WHERE dataset_id = ?
                          AND task = 'visual_cloze' ORDER BY qid""", [dataset_id]).fetchall()
    if not rows:
        raise ValueError(f"no visual cloze questions in dataset {dataset_id!r}")
    enc = con.execute("SELECT encoder_id FROM datasets WHERE dataset_id = ?", [dataset_id]).fetchall()[0][0]
    img, _ = _vectors(lance_uri, enc)
    ctx, ch = [], []
    for _, choices, _, prov in rows:
        p = json.loads(prov)
        c = np.mean([img[i] for j, i in enumerate(p["question_items"]) if j != p["placeholder_index"]], axis=0)
        ctx.append(np.repeat((c / np.linalg.norm(c))[None, :], 4, axis=0))
        ch.append([img[i] for i in choices])
    X = pair_features(np.array(ctx), np.array(ch))
    y = np.array([r[2] for r in rows])
    train = np.array([r[0] == "train" for r in rows])
    test = np.array([r[0] == "test" for r in rows])
    out = {"dataset_id": dataset_id, "n_train": int(train.sum()), "n_test": int(test.sum())}
    t0 = time.process_time()
    m = QuestionOnlyModel(1.0).fit(X[train], y[train])
    out["numpy_lbfgs_cpu_s"] = round(time.process_time() - t0, 3)
    out["numpy_lbfgs_test_acc"] = round(float((m.scores(X[test]).argmax(1) == y[test]).mean()), 4)
    ref = QuestionOnlyModel(1.0)                       # same loss and standardisation, scipy's optimiser
    t0 = time.process_time()
    n, c, f = X[train].shape
    flat = X[train].reshape(-1, f).astype(np.float64)
    ref.mu, ref.sd = flat.mean(0), flat.std(0) + 1e-6
    Z = (flat - ref.mu) / ref.sd
    pick = np.arange(n) * c + y[train]

    def loss_grad(w):
        s = (Z @ w).reshape(n, c)
        s = s - s.max(1, keepdims=True)
        e = np.exp(s)
        tot = e.sum(1, keepdims=True)
        grad = ((e / tot).reshape(1, -1) @ Z)[0] - Z[pick].sum(0) + w / ref.C
        return -(s.reshape(-1)[pick] - np.log(tot[:, 0])).sum() + (w @ w) / (2 * ref.C), grad

    ref.w = minimize(loss_grad, np.zeros(f), jac=True, method="L-BFGS-B").x
    out["scipy_lbfgsb_cpu_s"] = round(time.process_time() - t0, 3)
    out["scipy_lbfgsb_test_acc"] = round(float((ref.scores(X[test]).argmax(1) == y[test]).mean()), 4)
    out["ratio"] = round(out["scipy_lbfgsb_cpu_s"] / max(out["numpy_lbfgs_cpu_s"], 1e-9), 1)
    return out


def format_table(rows: list[dict]) -> str:
    """The printed report: a legend, then one line per AF dataset (what `mrqa af-report` shows)."""
    f = lambda x: "-" if x is None else f"{100 * x:.1f}%"
    out = ["probe: the learned question-only probe on the knob questions (before), on AF's own selection "
           "(after), and on the dataset as it is now, after `mrqa af-pool` where it ran (now: `mrqa report`'s "
           "figure; '-' until the report runs);",
           "af-pool: the questions the pooled adversary dropped, and its own out-of-fold GM3C question-only "
           "figure on the kept ones ('-': not filtered by it; `mrqa af-check` is the check);",
           "kept: AF's own selection, of the knob questions (before `mrqa af-pool`, which may drop more); "
           "of posable: the dataset's questions now, of the knob questions left once those whose only "
           "candidates are text twins of the answer (two right answers) are gone;",
           "adversary: the share of AF questions whose answer the final held-out ensemble picks, "
           "before the drop rule;", "oracle: the choice nearest the recipe's own step text (the question "
           "answered by reading, told the answer step);", "slot rule (visual cloze): the choice nearest a step text "
           "the placeholder's place among the shown photos allows (read without being told the answer step)",
           f"{'task':17s} {'knobs':20s} {'knob Q':>7s} {'AF Q':>6s} {'kept':>6s} {'of posable':>10s} "
           f"{'probe before':>13s} {'after':>6s} {'now':>6s} {'adversary':>10s} {'af-pool dropped':>16s} "
           f"{'GM3C':>6s} {'oracle before':>14s} {'after':>6s} {'slot rule before':>17s} {'after':>6s}"]
    for r in rows:
        dropped = "-" if r.get("pooled_dropped") is None else f"{r['pooled_dropped']:,d}"
        out.append(f"{r['task']:17s} {r['knobs']:20s} {r['knob_questions']:7d} {r['af_questions']:6d} "
                   f"{f(r['kept_share']):>6s} {f(r.get('kept_of_posable')):>10s} "
                   f"{f(r['probe_before']):>13s} {f(r['probe_after']):>6s} {f(r.get('probe_now')):>6s} "
                   f"{f(r['adversary_final']):>10s} {dropped:>16s} {f(r.get('pooled_adversary_kept')):>6s} "
                   f"{f(r.get('oracle_before')):>14s} {f(r.get('oracle_after')):>6s} "
                   f"{f(r.get('slot_before')):>17s} {f(r.get('slot_after')):>6s}")
    if not rows:
        out.append("no adversarially filtered datasets; run `mrqa generate --all` or `mrqa generate --task T "
                   "--knobs 0-1-1-af`")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    from etl.config import Paths
    from etl.warehouse import connect
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", default=None, help="MRQA home (default: $MRQA_HOME or ./data)")
    ap.add_argument("--json", action="store_true", help="print JSON rows instead of the table")
    ap.add_argument("--bench-fit", metavar="DATASET_ID", help="time the adversary's model fit on this visual "
                    "cloze dataset against scipy's L-BFGS-B instead")
    a = ap.parse_args(argv)
    paths = Paths.from_env(a.home)
    con = connect(paths, read_only=True)
    if a.bench_fit:
        from threadpoolctl import threadpool_limits
        with threadpool_limits(1, user_api="blas"):
            print(json.dumps(bench_fit(con, paths.lance, a.bench_fit), indent=1))
        return
    rows = af_report(con, paths.lance)
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    print(format_table(rows))

if __name__ == "__main__":
    main()
