"""What adversarial filtering did to each dataset: kept share, question-only probe, step-text oracle.

    .venv/bin/python -m features.datasets.af_report --home /tmp/e2home

Per AF dataset of the warehouse and its knob-only twin (same setting without AF): questions, the share
AF kept, the learned question-only probe (5-fold by recipe; recorded by the generator, before = the
knob selection), and the step-text oracle: the choice closest to the recipe's own step text in the
encoder's joint image/text space (cloze: the answer step's title; coherence: the choice farthest from
every shown step's title). The probe should fall to chance while the oracle stays high: the question is
then answered by reading the recipe, not by the look of the photos.
"""
from __future__ import annotations

import argparse
import json

import numpy as np


def _vectors(lance_uri: str, encoder_id: str) -> tuple[dict, dict]:
    from features.vectors.store import FeatureStore
    store = FeatureStore(lance_uri)
    out = []
    for ids, mat in (store.image_vectors(encoder_id), store.text_vectors(encoder_id, "title")):
        mat = np.asarray(mat, dtype=np.float64)
        mat = mat / np.maximum(np.linalg.norm(mat, axis=1, keepdims=True), 1e-12)
        out.append(dict(zip(ids, mat)))
    return out[0], out[1]


def oracle_accuracy(rows: list[tuple], img: dict, title: dict) -> float | None:
    """rows: (task, recipe_id, choice_list, answer, question_step_ids, answer_step). Questions whose
    titles are missing are left out."""
    hits = n = 0
    for task, rid, choices, answer, steps, answer_step in rows:
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


def af_report(con, lance_uri: str) -> list[dict]:
    from features.datasets.knobs import KnobParams, dataset_id
    datasets = con.execute("""SELECT dataset_id, task, seed, encoder_id, params, n_questions FROM datasets
                              WHERE json_extract_string(params, '$.af_rounds') IS NOT NULL
                              ORDER BY task, dataset_id""").fetchall()
    vectors, out = {}, []
    fields = set(KnobParams.__dataclass_fields__)
    for did, task, seed, enc, params, n in datasets:
        params = json.loads(params)
        base_params = KnobParams(**{k: v for k, v in params.items() if k in fields and k != "af_rounds"})
        base = dataset_id(task, base_params, seed, enc)
        base_n = con.execute("SELECT n_questions FROM datasets WHERE dataset_id = ?", [base]).fetchall()
        adv = params["adversarial"]
        row = {"dataset_id": did, "task": task, "knobs": base_params.knobs_label + "-af",
               "k3_mode": base_params.k3_mode, "knob_questions": adv["n_knob_questions"], "af_questions": n,
               "kept_share": adv["kept_share"], "probe_before": adv.get("probe_before"),
               "probe_after": adv.get("probe_after"), "base_registered": bool(base_n)}
        if task != "textual_cloze":
            if enc not in vectors:
                vectors[enc] = _vectors(lance_uri, enc)
            img, title = vectors[enc]
            for key, d in (("oracle_before", base), ("oracle_after", did)):
                q = con.execute("""SELECT task, recipe_id, choice_list, answer, question_step_ids,
                                   CAST(json_extract(provenance, '$.answer_step') AS INTEGER)
                                   FROM questions WHERE dataset_id = ?""", [d]).fetchall()
                row[key] = oracle_accuracy(q, img, title) if q else None
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> None:
    from etl.config import Paths
    from etl.warehouse import connect
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", default=None, help="MRQA home (default: $MRQA_HOME or ./data)")
    ap.add_argument("--json", action="store_true", help="print JSON rows instead of the table")
    a = ap.parse_args(argv)
    paths = Paths.from_env(a.home)
    con = connect(paths, read_only=True)
    rows = af_report(con, paths.lance)
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{'task':17s} {'knobs':20s} {'knob Q':>7s} {'AF Q':>6s} {'kept':>6s} {'probe before':>13s} "
          f"{'after':>6s} {'oracle before':>14s} {'after':>6s}")
    for r in rows:
        knobs = r["knobs"] if r["k3_mode"] in ("off", "coin") else f"{r['knobs']}({r['k3_mode']})"
        f = lambda x: "-" if x is None else f"{100 * x:.1f}%"
        print(f"{r['task']:17s} {knobs:20s} {r['knob_questions']:7d} {r['af_questions']:6d} {f(r['kept_share']):>6s} "
              f"{f(r['probe_before']):>13s} {f(r['probe_after']):>6s} {f(r.get('oracle_before')):>14s} "
              f"{f(r.get('oracle_after')):>6s}")


if __name__ == "__main__":
    main()
