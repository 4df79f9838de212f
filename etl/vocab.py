"""Vocabulary quality and repair accuracy.

- `vocab_figures(counter)`: word types/tokens and the share of types and of occurrences in the
  dictionary (wordfreq English 'large'; word = token with a letter, lower-cased), top OOV types.
- `store_vocab_stats` / `read_vocab_stats`: the `vocab_stats` table.
- `vocab_report(con)`: recompute before/after figures from the warehouse's cleaned steps.
- `evaluate_on_ground_truth(path)`: on a sample kitchen ground_truth.jsonl (etl/sample/generate.py), precision
  and recall of fused-word and number/unit repairs, removal rate of every planted noise kind, and
  over-splitting of the rare real words.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from etl.repair import Repairer
from etl.warehouse import utcnow

DICTIONARY = "wordfreq-en-large"
REPAIR_KINDS = ("fused_word", "number_unit")
# Our own labels: every OOV token of the real RecipeQA records of the test fixtures, checked
# by hand -- none is a fusion (temperatures with a letter 'o' for the degree sign, a project name,
# made-up words), so none may be split. Over-splitting is measured on them.
LABELLED_REAL_OOV_KEEP = ("375o", "335o", "Dartssnake", "bacony", "spatchula", "Startch")


def is_word(tok: str) -> bool:
    return any(ch.isalpha() for ch in tok)


def vocab_figures(counts: Counter, top: int = 30, repairer: Repairer | None = None) -> dict:
    rep = repairer or Repairer()
    words: Counter = Counter()
    for t, n in counts.items():
        if is_word(t):
            words[t.lower()] += n
    in_types = sum(1 for w in words if rep.in_dictionary(w))
    in_tokens = sum(n for w, n in words.items() if rep.in_dictionary(w))
    total = sum(words.values())
    oov = [(w, n) for w, n in words.most_common() if not rep.in_dictionary(w)][:top]
    # n_oov_types, not only the share: a repair that merges in-dictionary variants ("word-" into
    # "word") shrinks the type count and can lower the share while removing no OOV type
    return {"n_word_types": len(words), "n_word_tokens": total, "n_oov_types": len(words) - in_types,
            "types_in_dict_share": round(in_types / len(words), 4) if words else None,
            "tokens_in_dict_share": round(in_tokens / total, 4) if total else None,
            "top_oov": oov}


def store_vocab_stats(con, scope: str, before: dict, after: dict) -> None:
    now = utcnow()
    for phase, f in (("before_repair", before), ("after_repair", after)):
        con.execute("INSERT OR REPLACE INTO vocab_stats VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [scope, phase, DICTIONARY, f["n_word_types"], f["n_word_tokens"],
                     f["types_in_dict_share"], f["tokens_in_dict_share"],
                     json.dumps(f["top_oov"]), now])


def read_vocab_stats(con, scope: str) -> dict[str, dict]:
    rows = con.execute("SELECT phase, n_word_types, n_word_tokens, types_in_dict_share, "
                       "tokens_in_dict_share, top_oov FROM vocab_stats WHERE scope = ?", [scope]).fetchall()
    return {r[0]: {"n_word_types": r[1], "n_word_tokens": r[2], "types_in_dict_share": r[3],
                   "tokens_in_dict_share": r[4], "top_oov": json.loads(r[5])} for r in rows}


def vocab_report(con, paths=None, top: int = 30) -> dict:
    """Recompute the vocabulary figures of ok recipes from their raw text: cleaned (etl.clean_rules)
    before repair, then after each repair rule in turn (cumulative, in etl.repair.RULES order), and after
    all of them; the remaining OOV types grouped by pattern; U+FFFD replacement characters left in the
    cleaned text (a sign of text broken before it reached us). Stored as scope 'report'."""
    if top < 0:
        raise ValueError(f"--top must be 0 or more, got {top}")
    from etl.clean_rules import clean_text, clean_title
    from etl.config import Paths
    from etl.repair import RULES, rule_counts
    from etl.tokenize import load_punkt, tokenize_text, untrained_punkt
    paths = paths or Paths.from_env()
    punkt = load_punkt(paths.models) or untrained_punkt()
    rep = Repairer()
    before, after = Counter(), Counter()
    replacement_chars = 0
    for title_raw, body_raw in con.execute(
            "SELECT s.title_raw, s.body_raw FROM steps s JOIN recipes r USING (recipe_id) "
            "WHERE r.status = 'ok'").fetchall():
        for text in (clean_title(title_raw or ""), clean_text(body_raw or "")):
            replacement_chars += (text or "").count("\ufffd")
            for sent in tokenize_text(text or "", punkt):
                before.update(sent)
                after.update(rep.repair_tokens(sent))
    vb, va = vocab_figures(before, top, rep), vocab_figures(after, top, rep)
    store_vocab_stats(con, "report", vb, va)
    by_rule = rule_counts(rep, before)
    cumulative = []
    for k, rule in enumerate(RULES):
        partial = Repairer(rules=frozenset(RULES[:k + 1]))
        repaired = Counter()
        for tok, n in before.items():
            for part in partial.repair_token(tok):
                repaired[part] += n
        f = vocab_figures(repaired, 0, rep)
        cumulative.append({"rule": rule, **by_rule[rule],
                           "types_in_dict_share": f["types_in_dict_share"],
                           "tokens_in_dict_share": f["tokens_in_dict_share"]})
    from etl.spelling import Speller, spelling_report
    domain_terms = frozenset(t.lower() for t, n in after.items() if n >= 3)   # the corpus' own words
    return {"dictionary": DICTIONARY, "before_repair": vb, "after_repair": va, "by_rule": cumulative,
            "oov_by_pattern": oov_by_pattern(after, rep, top), "replacement_chars": replacement_chars,
            "repairs": repair_summary(before, rep, top),
            "spelling": spelling_report(after, Speller(rep, domain_terms), top)}


OOV_PATTERNS = ("slash", "colon", "digits_glued", "period_inside", "hyphen", "non_ascii", "rare_or_misspelt")


def oov_pattern(word: str) -> str:
    """The shape of an out-of-vocabulary word type (what kind of tokenization failure it may be)."""
    if "/" in word or "\\" in word:
        return "slash"
    if ":" in word:
        return "colon"
    if any(c.isdigit() for c in word):
        return "digits_glued"
    if "." in word.strip("."):
        return "period_inside"
    if "-" in word:
        return "hyphen"
    if not word.isascii():
        return "non_ascii"
    return "rare_or_misspelt"


def oov_by_pattern(counts: Counter, rep: Repairer, top: int = 10) -> dict[str, dict]:
    """Remaining OOV word types grouped by `oov_pattern`: types, occurrences, most frequent examples."""
    groups: dict[str, Counter] = {k: Counter() for k in OOV_PATTERNS}
    for t, n in counts.items():
        if is_word(t) and not rep.in_dictionary(t.lower()):
            groups[oov_pattern(t.lower())][t.lower()] += n
    return {k: {"types": len(c), "tokens": sum(c.values()),
                "top": [[w, n] for w, n in sorted(c.items(), key=lambda x: (-x[1], x[0]))[:top]]}
            for k, c in groups.items()}


def repair_summary(before: Counter, rep: Repairer, top: int = 30) -> dict:
    """Which OOV word types repair split (types, most frequent examples), and over-splitting on the
    hand-labelled real OOV tokens (LABELLED_REAL_OOV_KEEP) present in the corpus."""
    split = {t: rep.repair_token(t) for t in before if is_word(t) and not rep.in_dictionary(t)}
    split = {t: p for t, p in split.items() if len(p) > 1}
    labelled = [t for t in LABELLED_REAL_OOV_KEEP if t in before]
    wrong = [t for t in labelled if t in split]
    return {"types_split": len(split),
            "top_split": [[t, " ".join(split[t]), before[t]]
                          for t in sorted(split, key=lambda t: (-before[t], t))[:top]],
            "labelled_keep_seen": len(labelled), "labelled_keep_split": len(wrong),
            "over_splitting_rate": round(len(wrong) / len(labelled), 4) if labelled else None,
            "labelled_keep_split_examples": wrong}


# ----------------------------------------------------------------------------- ground truth

def _ws(s: str) -> str:
    return " ".join(s.split())


def _same_repair(r: str, f: str, R: str, F: str) -> bool:
    """Does our repair of token R into F perform the planted repair r -> f? R may hold more than r
    ('1/2cups' for '2cups') or less when the word tokenizer split a clitic off ('youdo' for 'youdon')."""
    if r in R and R.replace(r, f, 1) == F:
        return True
    return len(R) < len(r) and r.startswith(R) and f.startswith(F) and r[len(R):] == f[len(F):]


def _match(planted: list[tuple[str, str]], ours: list[tuple[str, str]]) -> int:
    """Planted (raw, fixed) instances matched by our token repairs (raw token, repaired text)."""
    left = list(ours)
    hit = 0
    for r, f in planted:
        for k, (R, F) in enumerate(left):
            if _same_repair(r, f, R, F):
                hit += 1
                del left[k]
                break
    return hit


STEP_TEXT_KEYS = ("title_raw", "body_raw", "title_clean", "body_clean")


def _record_problem(rec) -> str | None:
    """What keeps `rec` from being a sample kitchen ground-truth record as scoring reads it (None: nothing)."""
    if not isinstance(rec, dict):
        return f"a JSON {type(rec).__name__}, not an object"
    if not isinstance(rec.get("expected"), (dict, type(None))):
        return "'expected' is not an object"
    steps = rec.get("steps")
    if not isinstance(steps, list):
        return "no 'steps' list"
    for st in steps:
        if not isinstance(st, dict):
            return "a step is not an object"
        missing = [k for k in STEP_TEXT_KEYS if not isinstance(st.get(k), str)]
        if missing:
            return f"step {st.get('step_idx', '?')} has no text {', '.join(missing)}"
        noise = st.get("noise")
        if not isinstance(noise, list) or not all(
                isinstance(n, dict) and isinstance(n.get("kind"), str) and isinstance(n.get("raw"), str)
                and (n["kind"] not in REPAIR_KINDS or isinstance(n.get("fixed"), str)) for n in noise):
            return f"step {st.get('step_idx', '?')} has no 'noise' list of {{kind, raw[, fixed]}} objects"
    return None


def read_ground_truth(path: Path) -> list[dict]:
    """The records of a sample kitchen ground_truth.jsonl (one JSON object a line; blank lines skipped).
    Raises ValueError naming the file (and line) for text that is not UTF-8, a line that is not JSON,
    a record of another shape, or a file without records."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start}); "
                         "not a sample kitchen ground_truth.jsonl") from None
    recs = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{n}: not JSON ({e.msg}); not a sample kitchen ground_truth.jsonl") from None
        problem = _record_problem(rec)
        if problem:
            raise ValueError(f"{path}:{n}: not a sample kitchen ground-truth record ({problem})")
        recs.append(rec)
    if not recs:
        raise ValueError(f"{path}: no records; not a sample kitchen ground_truth.jsonl")
    return recs


def evaluate_on_ground_truth(path: Path, punkt=None, repairer: Repairer | None = None,
                             max_examples: int = 10) -> dict:
    """Run clean -> tokenize -> repair on every step's raw text of a ground_truth.jsonl and score it;
    ValueError (file and line) for a file that is not one (`read_ground_truth`)."""
    from etl.clean_rules import clean_text, clean_title
    from etl.tokenize import tokenize_text, train_punkt
    rep = repairer or Repairer()
    recs = read_ground_truth(path)
    # the pipeline stores tokens only for recipes it keeps: score the ones expected to be kept
    recs = [r for r in recs if (r.get("expected") or {}).get("stage") is None]
    if punkt is None:
        punkt = train_punkt(clean_text(s["body_raw"]) for r in recs for s in r["steps"])
    stats = {k: Counter() for k in REPAIR_KINDS}
    removed: dict[str, Counter] = {}
    fp_examples, fn_examples = [], []
    n_ours = 0
    token_exact = steps = 0
    rare_words = set()
    try:
        from etl.sample.vocab import RARE_WORDS
        rare_words = {w for r in RARE_WORDS for w in r.split()}
    except ImportError:
        pass
    rare_seen = rare_split = 0
    fp_by_kind: Counter = Counter()
    for r in recs:
        for s in r["steps"]:
            steps += 1
            title = clean_title(s["title_raw"])
            body = clean_text(s["body_raw"])
            # noise kinds removed?
            for n in s["noise"]:
                kind = n["kind"]
                if kind in REPAIR_KINDS:
                    continue
                text = title if n.get("field") == "title" else body
                raw = n["raw"]
                if kind == "step_number":
                    ok = _ws(title) == _ws(s["title_clean"])
                elif kind == "unicode":
                    ok = raw.strip() == "" and raw != "\u200b" or raw not in text
                else:
                    ok = raw.strip() not in text
                removed.setdefault(kind, Counter())["ok" if ok else "left"] += 1
            # token repairs
            ours, toks = [], []
            for text in (title, body):
                for sent in tokenize_text(text, punkt):
                    for t in sent:
                        parts = rep.repair_token(t)
                        toks.extend(parts)
                        if len(parts) > 1:
                            ours.append((t, " ".join(parts)))
                        if t in rare_words:
                            rare_seen += 1
                            rare_split += len(parts) > 1
            gold_toks = [t for text in (s["title_clean"], s["body_clean"])
                         for sent in tokenize_text(text, punkt) for t in sent]
            token_exact += toks == gold_toks
            n_ours += len(ours)
            remaining = list(ours)
            for kind in REPAIR_KINDS:
                planted = [(n["raw"], n["fixed"]) for n in s["noise"] if n["kind"] == kind]
                hit = _match(planted, remaining)
                stats[kind]["planted"] += len(planted)
                stats[kind]["hit"] += hit
                if hit < len(planted) and len(fn_examples) < max_examples:
                    fn_examples.append({"planted": planted, "ours": ours})
            all_planted = [(n["raw"], n["fixed"]) for n in s["noise"] if n["kind"] in REPAIR_KINDS]
            for R, F in ours:
                if not any(_same_repair(r, f, R, F) for r, f in all_planted):
                    # a wrong split is attributed to a kind by its shape (a digit = number_unit)
                    fp_by_kind["number_unit" if any(c.isdigit() for c in R) else "fused_word"] += 1
                    if len(fp_examples) < max_examples:
                        fp_examples.append([R, F])
    out = {"recipes": len(recs), "steps": steps, "repairs_made": n_ours}
    fp = sum(fp_by_kind.values())
    total_hit = sum(stats[k]["hit"] for k in REPAIR_KINDS)
    for k in REPAIR_KINDS:
        p = stats[k]["planted"]
        out[k] = {"planted": p, "repaired": stats[k]["hit"],
                  "recall": round(stats[k]["hit"] / p, 4) if p else None}
    out["precision"] = round(total_hit / (total_hit + fp), 4) if total_hit + fp else None
    for k in REPAIR_KINDS:
        tp = stats[k]["hit"]
        fpk = fp_by_kind[k]
        out[k]["precision"] = round(tp / (tp + fpk), 4) if tp + fpk else None
    out["noise_removed"] = {k: round(c["ok"] / (c["ok"] + c["left"]), 4) for k, c in sorted(removed.items())}
    out["steps_tokens_equal_gold"] = round(token_exact / steps, 4) if steps else None
    out["rare_words"] = {"seen": rare_seen, "split": rare_split}
    out["false_positive_examples"] = fp_examples
    out["missed_examples"] = fn_examples[:max_examples]
    return out
