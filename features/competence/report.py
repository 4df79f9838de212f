"""The competence table: per family, questions, unanswerable share, the three bias baselines and
the reader with its own and another recipe's text (EM / F1 in %)."""
from __future__ import annotations

from features.competence.evaluate import METHODS, PRIOR_FLAG_EM

HEAD = ("family", "questions", "N/A share", "answer prior", "question-only", "context-only", "reader",
        "reader, other recipe")


def rows(results: dict) -> list[list[str]]:
    out = []
    for fam, m in results.items():
        cells = [fam + (" (flagged)" if m.get("prior_flag") else ""), f"{m['questions']:,}",
                 f"{100 * m['unanswerable_share']:.0f}%"]
        cells += [f"{m[k]['em']:.1f} / {m[k]['f1']:.1f}" for k in METHODS]
        out.append(cells)
    return out


def format_table(results: dict, source: str, split: str) -> str:
    n = {fam: m["reader"]["n"] for fam, m in results.items()}
    lines = [f"competence families (roles: {source}; EM / F1 % on the {split} split, "
             f"{sum(n.values()):,} questions; flagged: a baseline reaches {PRIOR_FLAG_EM:.0f}% EM)",
             "| " + " | ".join(HEAD) + " |", "| " + " | ".join("---" for _ in HEAD) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows(results)]
    return "\n".join(lines)
