"""The competence table: per family, questions, unanswerable share, the three bias baselines and
the reader with its own and another recipe's text (EM / F1 in %)."""
from __future__ import annotations

from features.competence.evaluate import METHODS, PRIOR_FLAG_EM
from features.competence.generate import FAMILIES as FAMILY_ORDER

HEAD = ("family", "questions", "N/A share", "answer prior", "question-only", "context-only", "reader",
        "reader, other recipe")


def rows(results: dict) -> list[list[str]]:
    out = []
    for fam, m in results.items():
        cells = [fam + (" (flagged)" if m.get("prior_flag") else ""), f"{m['questions']:,}",
                 f"{100 * m['unanswerable_share']:.0f}%"]
        cells += ["– (no train split)" if k in ("answer_prior", "question_only") and m.get("n_train") == 0
                  else f"{m[k]['em']:.1f} / {m[k]['f1']:.1f}" for k in METHODS]
        out.append(cells)
    return out


def format_table(results: dict, source: str, split: str) -> str:
    n = {fam: m["reader"]["n"] for fam, m in results.items()}
    lines = [f"competence families (roles: {source}; EM / F1 % on the {split} split, "
             f"{sum(n.values()):,} questions; flagged: a baseline gets more than {PRIOR_FLAG_EM:.0f}% EM)",
             "| " + " | ".join(HEAD) + " |", "| " + " | ".join("---" for _ in HEAD) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows(results)]
    return "\n".join(lines)


def stored_results(con, split: str = "test") -> dict:
    """The results table of the stored competence datasets (the seed scored last), from
    competence_metrics: family -> {method: {n, em, f1}, questions, unanswerable_share, prior_flag};
    {} when there are none."""
    from features.competence.evaluate import BASELINES
    have = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    if "competence_metrics" not in have:
        return {}
    seed = con.execute("SELECT d.seed FROM competence_metrics m JOIN competence_datasets d USING (dataset_id) "
                       "WHERE m.split = ? ORDER BY m.computed_at DESC LIMIT 1", [split]).fetchall()
    if not seed:
        return {}
    rows = con.execute("""
        SELECT d.family, d.n_questions, (SELECT avg(CASE WHEN q.answerable THEN 0 ELSE 1 END)
                                         FROM competence_questions q WHERE q.dataset_id = d.dataset_id),
               m.method, m.n, m.em, m.f1
        FROM competence_datasets d JOIN competence_metrics m USING (dataset_id)
        WHERE d.seed = ? AND m.split = ? ORDER BY d.family, m.method""", [seed[0][0], split]).fetchall()
    out: dict = {}
    for fam, nq, na, method, n, em, f1 in rows:
        e = out.setdefault(fam, {"questions": nq, "unanswerable_share": na or 0.0})
        e[method] = {"n": n, "em": em, "f1": f1}
    for e in out.values():
        e["prior_flag"] = max(e.get(m, {}).get("em", 0.0) for m in BASELINES) > PRIOR_FLAG_EM
    return {fam: out[fam] for fam in sorted(out, key=lambda f: FAMILY_ORDER.index(f) if f in FAMILY_ORDER else 99)
            if all(m in out[fam] for m in METHODS)}


def html_rows(results: dict) -> list[dict]:
    return [dict(zip(HEAD, r)) for r in rows(results)]
