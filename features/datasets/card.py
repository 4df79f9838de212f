"""The dataset card (README.md) of a Parquet export: Hugging Face `configs:` front matter, one config per
dataset (named by task x setting) with its train/validation/test files, then the columns, the knob legend,
the provenance schema per task, the encoders, the counts and the bias figures of every config."""
from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow as pa

QUESTION_COLUMNS = (
    ('dataset_id', 'string',
     'The dataset (`mrqa datasets`): `<task code>-<setting>-s<seed>-<encoder hash>[-p<params hash>]`.'),
    ('qid', 'string',
     'Question id within the dataset: `<recipe_id>-q<n>`; (dataset_id, qid) is unique.'),
    ('recipe_id', 'string',
     'The recipe the question is about (recipes.parquet, steps.parquet).'),
    ('task', 'string (dictionary)',
     'visual_cloze | visual_coherence | visual_ordering | textual_cloze; also the `task=` folder.'),
    ('knobs', 'string (dictionary)',
     "The setting's name (knob legend below), e.g. `0-1-1`, `0-0-1-balanced`, `0-1-1-af`, `recipeqa`; "
     'also the `knobs=` folder. Where the export holds several datasets of one task and setting, the one '
     "with the setting's own parameters and the lowest seed keeps the name and each other one adds the rest "
     'of its id: `0-1-1-s1-1a2b3c4d`, `0-1-1-s0-1a2b3c4d-p5e6f7a` (other parameters).'),
    ('split', 'string (dictionary)',
     "train | val | test (the recipe's split); also the `split=` folder. The card's configs call val "
     '`validation`.'),
    ('k1', 'int8, nullable',
     "Knob 1 (overlap between a recipe's questions): 0 | 1; null for a preset."),
    ('k2', 'int8, nullable',
     'Knob 2 (distractor distance from the answer): 0 | 1; null for a preset.'),
    ('k3', 'int8, nullable',
     'Knob 3 (distractor distance from the question): 0 | 1; null for a preset.'),
    ('k3_mode', 'string',
     "off (k3 = 0 or a preset) | coin (the paper's per-question coin flip) | all | balanced."),
    ('adversarial', 'bool',
     'True for an adversarially filtered dataset (setting name ends in `-af`).'),
    ('preset', 'string, nullable',
     "recipeqa for the RecipeQA-style reference, recipeqa-original for RecipeQA's own questions; null "
     'for knob settings.'),
    ('seed', 'int64',
     'Seed of every random decision of the generation.'),
    ('encoder_id', 'string',
     'The feature space the distances were measured in (Encoders below).'),
    ('question', 'list<string>',
     'What the question shows: image ids with one `@placeholder` (visual cloze), 4 image ids, one of them '
     'foreign (visual coherence), step titles with `@placeholder` (textual cloze) or the ordering instruction.'),
    ('choice_list', 'list<string>',
     'The 4 choices: image ids, step titles or, for visual ordering, each ordering as JSON text (as in'
     ' the warehouse).'),
    ('choice_orderings', 'list<list<string>>, nullable',
     'Visual ordering: the 4 choices as lists of 4 image ids; null for the other tasks.'),
    ('answer', 'int32',
     '0-based index of the correct choice.'),
    ('question_step_ids', 'list<int32>',
     'step_idx of the recipe steps the question shows, in recipe order.'),
    ('provenance', 'string (JSON)',
     'How the question was made; its keys per task are listed under Provenance.'),
)

# every provenance key the generator writes, with its meaning (tests check that none is undocumented)
PROVENANCE_KEYS = {
    "task": "The question's task.",
    "seed": "The generation seed.",
    "encoder_id": "The feature space of every distance below.",
    "knobs": "The knob values [k1, k2, k3] (nulls for a preset; older datasets: [k1, k2]).",
    "preset": "The preset name, or null.",
    "k3_mode": "off | coin | all | balanced.",
    "rule": "How the distractors were chosen: ball (knob 2), random_far (RecipeQA-style preset), matched "
            "(coherence beyond the paper: matched to reference_item), author (the same among the recipes of the "
            "question's author), kitchen (visual cloze beyond the paper: "
            "photos of the question's own recipe), uniform or weighted_by_summed_distance "
            "(ordering).",
    "reference_item": "Coherence, --distractors matched or author: the held-out photo of the question's recipe "
                      "whose cosines to the shown photos the foreign image's match.",
    "answer_step": "step_idx of the answer step (cloze: the blank; coherence/ordering: the drawn step).",
    "extra_removed_step": "Knob 1 = 1: the other step removed from the recipe's pool after this question; else null.",
    "question_items": "The items the question shows (image ids or `<recipe>_<step>_title`).",
    "answer_item": "Cloze: the correct choice's item.",
    "choice_items": "Cloze: the items of the 4 choices, in choice order.",
    "placeholder_index": "Cloze: position of `@placeholder` in the question.",
    "d_answer_q": "Cloze: cosine distance of the answer to the question (mean of the shown items).",
    "distractors": "Cloze: per distractor {item, recipe_id, distance (to the answer), dist_q (to the question), "
                   "closer (dist_q below the answer's)}.",
    "n_closer": "Cloze: distractors closer to the question than the answer.",
    "n_closer_required": "Cloze: how many closer distractors knob 3 required for this question.",
    "n_closer_candidates": "Cloze: in-ball candidates closer to the question than the answer (null when knob 3 is 0).",
    "k3_heads": "Knob 3 applied to this question (coin: the seeded coin flip; all/balanced: always).",
    "m_d": "Knob 2: mean distance of the answer's k nearest neighbours.",
    "s_d": "Knob 2: standard deviation of those distances.",
    "ball": "Knob 2: the distance interval [lo, hi] distractors were taken from.",
    "ball_sd": "Knob 2: the interval's bounds in units of s_d around m_d (null lower bound = distance 0).",
    "k": "Neighbours used for m_d, s_d and as candidates.",
    "n_ball_candidates": "Candidates inside the ball.",
    "n_kitchen_candidates": "Visual cloze, --distractors kitchen: the photos of the question's recipe that could be "
                            "its distractors (no step it shows or could fill the blank with, told from the answer "
                            "by its step's text, no text twin of it).",
    "d_k": "RecipeQA-style preset: distance of the k-th neighbour; random distractors lie beyond it.",
    "anchor_item": "Coherence: the coherent image the foreign image was found next to.",
    "foreign_item": "Coherence: the foreign (incoherent) image, the answer.",
    "foreign_recipe_id": "Coherence: the foreign image's recipe.",
    "foreign_rank": "Coherence: coherent images that look more out of place than the foreign one (leave-one-out).",
    "distance": "Coherence: distance of the foreign image to its anchor.",
    "dist_q": "Coherence: distance of the foreign image to the mean of the coherent images.",
    "min_pair": "Coherence: smallest distance between two coherent images (knob 3 asks dist_q below it).",
    "n_eligible": "Coherence: in-ball candidates that meet knob 3.",
    "k3_rule": "Coherence: the knob-3 rule applied: none | min_pair | rank (balanced).",
    "anchor_distances": "Coherence, RecipeQA-style preset: distances of the foreign image to the coherent images.",
    "target_rank": "Balanced: the rank the answer was given (0..3 closer distractors); null otherwise.",
    "drawn_rank": "Balanced: the rank first drawn for the question.",
    "feasible_ranks": "Balanced: the ranks the question's candidates could realise.",
    "rank_redrawn": "Balanced: target_rank differs from drawn_rank (its quota was full).",
    "choice_perms": "Ordering: each choice as a permutation of the 4 shown steps.",
    "choice_summed_distance": "Ordering: summed distance between consecutive images of each choice.",
    "weight_power": "Ordering: wrong orderings drawn with weight S ** power.",
    "adversarial": "Adversarial filtering: {rounds, pools, n_folds, ensemble, probe}.",
    "af_round": "Adversarial filtering: the last round that changed the choices (0 = the knob selection kept).",
    "af_pools": "Adversarial filtering: per distractor the pool it came from (ball | author | recipe | question).",
    "af_scores": "Adversarial filtering: per distractor the held-out ensemble's score (null: swapped in later).",
    "af_alternates": "Adversarial filtering: knob-valid candidates not picked, with their distances and pool.",
    "af_pooled_swaps": "The pooled adversary (mrqa af-pool): its swaps, each with round, images out/in, logits.",
    "distance_probe_hit": "Coherence AF: whether the distance probe picks the foreign image.",
    "source": "RecipeQA's own questions: where the record came from (recipeqa).",
    "file": "RecipeQA's own questions: the imported file.",
    "index": "RecipeQA's own questions: the record's index in that file.",
    "question_text": "RecipeQA's own questions: the record's question_text.",
    "context_modality": "RecipeQA's own questions: the record's context_modality.",
    "question_modality": "RecipeQA's own questions: the record's question_modality.",
}



def config_name(task: str, setting: str) -> str:
    """The dataset-card config of a task x setting: `visual_cloze-0-1-1`, `textual_cloze-0-0-1-balanced-af`.
    `setting` is datasets.setting (features/datasets/knobs.py setting_name), the knobs= partition value."""
    return f"{task}-{setting}"


KNOB_LEGEND = "\n".join((
    '| name part | meaning |',
    '| --- | --- |',
    "| `k1` (first digit) | knob 1, overlap between a recipe's questions: 0 = the answer step leaves the "
    'pool after a question, at most steps/2 questions per recipe; 1 = also one other shown step, steps/3 |',
    '| `k2` (second digit) | knob 2, distractor distance from the answer: 0 = closer than usual (harder),'
    ' 1 = a typical distance (ordering: 0 = uniform wrong orderings, 1 = weighted by jumps) |',
    '| `k3` (third digit) | knob 3, distractor distance from the question: 0 = free, 1 = distractors '
    'closer to the question than the answer (coin flip per question) |',
    "| `-all` / `-balanced` | knob-3 mode: every question, or the answer's distance rank uniform over "
    '0..3 |',
    "| `-matched` | visual coherence, knobs 2 and 3 = 0: the foreign image's cosines to the shown images "
    "match a held-out photo of the recipe's own (beyond the paper) |",
    "| `-author` | the same, the foreign image from another recipe of the question's author: their kitchen, "
    "so the photos' own pixels tell it less (beyond the paper) |",
    "| `-kitchen` | visual cloze, knobs 2 and 3 = 0: the distractors are photos of the question's own recipe, "
    "from steps it neither shows nor could fill the blank with (beyond the paper) |",
    '| `-af` | adversarially filtered: distractors a learned question-only ensemble cannot reject |',
    '| `recipeqa` | the RecipeQA-style reference preset (steps reused, random far distractors) |',
    "| `recipeqa-original` | RecipeQA's own questions, imported |",
)) + "\n"

CARD_SPLITS = ("train", "val", "test")
SPLIT_NAMES = {"train": "train", "val": "validation", "test": "test"}   # warehouse split -> HF split
JSON_TYPE_NAMES = {"UBIGINT": "integer", "BIGINT": "integer", "DOUBLE": "number", "VARCHAR": "string",
                   "BOOLEAN": "boolean", "ARRAY": "array", "OBJECT": "object", "NULL": "null"}


def _yaml_str(s: str) -> str:
    return json.dumps(s)        # a JSON string is a valid YAML double-quoted scalar


def _configs(parts: list[dict], files: list[str]) -> list[tuple[str, list[tuple[str, str]]]]:
    by_cfg: dict[str, dict[str, str]] = {}
    for p in parts:
        by_cfg.setdefault(config_name(p["task"], p["knobs"]), {})[p["split"]] = p["path"]
    out = [(name, [(SPLIT_NAMES[s], splits[s]) for s in CARD_SPLITS if s in splits])
           for name, splits in sorted(by_cfg.items())]
    for f in files:     # the side tables, one `train` split each
        out.append((f.removesuffix(".parquet"), [("train", f)]))
    return out


# a config answered this often without reading its recipe is not a reading benchmark: any context-free
# figure of the card above it puts the config in the card's "Read before use" list
READING_BOUND = 0.35
KEPT_BOUND = 0.4             # an AF config that kept less of its knob questions is listed too
READING_LEAD = 0.20          # reading check: the reader leads the learned question-only model by at least this
READING_ABLATION = 0.15      # reading check: another recipe's steps cost the reader at least this
CONTEXT_FREE = (("qo_acc", "question-only probe"), ("hasty_student_acc", "Hasty Student"),
                ("probe_acc", "distance probe"), ("centre_rule_acc", "centre of the choices"),
                ("pair_rule_acc", "closest pair"), ("tree_acc", "tree probe (report)"),
                ("gm3c_qo_acc", "GM3C question-only (af-check)"),
                ("tree_qo_acc", "tree probe (af-check)"), ("look_acc", "look probe (pixels)"),
                ("words_acc", "words probe (titles)"), ("words_tree_acc", "words trees (titles)"),
                ("order_acc", "order probe (titles' order)"), ("pixel_acc", "pixel probe (a CNN on the photos)"))
PROVENANCE_SAMPLE = 64       # questions per dataset read for the provenance schema (JSON parsing is slow)


def _json_type(structure) -> str:
    """A readable type from DuckDB's json_structure: integer, number, string, boolean, null, array of ...,
    object {keys}."""
    if isinstance(structure, list):
        return "array of " + (_json_type(structure[0]) if structure else "null")
    if isinstance(structure, dict):
        return "object {" + ", ".join(structure) + "}"
    return JSON_TYPE_NAMES.get(str(structure).upper(), str(structure).lower())


def _provenance_schema(con: duckdb.DuckDBPyConnection, questions: pa.Table) -> dict[str, list[tuple]]:
    """task -> [(key, JSON types seen, datasets of the task with the key, datasets of the task)], from the
    merged JSON structure (json_group_structure) of the first PROVENANCE_SAMPLE questions (by split, qid)
    of every dataset."""
    con.register("card_questions", questions.select(["dataset_id", "task", "split", "qid", "provenance"]))
    try:
        rows = con.execute(f"""
            WITH q AS (SELECT dataset_id, CAST(task AS VARCHAR) AS task, CAST(provenance AS JSON) AS p
                       FROM card_questions
                       QUALIFY row_number() OVER (PARTITION BY dataset_id ORDER BY CAST(split AS VARCHAR), qid)
                               <= {PROVENANCE_SAMPLE})
            SELECT task, dataset_id, json_group_structure(p) FROM q GROUP BY ALL ORDER BY ALL""").fetchall()
    finally:
        con.unregister("card_questions")
    types: dict[str, dict[str, set]] = {}
    having: dict[str, dict[str, int]] = {}
    n_sets: dict[str, int] = {}
    for task, _did, structure in rows:
        n_sets[task] = n_sets.get(task, 0) + 1
        for key, sub in json.loads(structure).items():
            types.setdefault(task, {}).setdefault(key, set()).add(_json_type(sub))
            having.setdefault(task, {})[key] = having.get(task, {}).get(key, 0) + 1
    return {task: [(k, sorted(types[task][k]), having[task][k], n_sets[task]) for k in sorted(types[task])]
            for task in sorted(types)}


def _bias(con: duckdb.DuckDBPyConnection, ids: list[str]) -> dict[str, dict]:
    have = {r[0] for r in con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = 'bias_metrics'")
            .fetchall()}
    if not have:
        return {}
    cols = [c for c in ("hasty_student_acc", "probe_acc", "centre_rule_acc", "pair_rule_acc", "qo_acc", "qo_ci_low",
                        "qo_ci_high", "qo_test_acc", "qo_test_ci_low", "qo_test_ci_high", "qo_n_test", "n_scored",
                        "chance", "tree_acc", "look_acc", "words_acc", "words_tree_acc", "order_acc")
            if c in have]
    cur = con.execute(f"SELECT dataset_id, {', '.join(cols)} FROM bias_metrics WHERE list_contains(?, dataset_id)",
                      [ids])
    out = {r[0]: dict(zip(cols, r[1:])) for r in cur.fetchall()}
    if con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'af_checks'").fetchall()[0][0]:
        # `mrqa af-check --record`, where it still measures the dataset as it is (the same content hash)
        # a warehouse opened read-only before migration 106 has no tree column: no tree figure then
        tree_col = "c.tree_accuracy" if con.execute(
            "SELECT count(*) FROM duckdb_columns() WHERE table_name = 'af_checks' AND column_name = 'tree_accuracy'"
        ).fetchall()[0][0] else "NULL"
        for did, acc, tree in con.execute(f"""SELECT c.dataset_id, c.accuracy, {tree_col} FROM af_checks c
                                                JOIN datasets d ON d.dataset_id = c.dataset_id
                                                               AND d.content_sha256 = c.content_sha256
                                              WHERE list_contains(?, c.dataset_id)""", [ids]).fetchall():
            out.setdefault(did, {})["gm3c_qo_acc"] = acc
            if tree is not None:
                out[did]["tree_qo_acc"] = tree
    for did, acc in pixel_checks(con, ids).items():
        out.setdefault(did, {})["pixel_acc"] = acc
    return out


def pixel_checks(con: duckdb.DuckDBPyConnection, ids: list[str]) -> dict[str, float]:
    """The pixel probe recorded for each dataset of `ids` (`mrqa pixel-probe --record`) where it still measures
    the dataset as it is (the same content hash) under the current folds (rows before migration 119, with 2
    folds of the train split whose models trained on too few questions, are not read); {} in a warehouse
    without the table or the column (opened read-only before migration 118 or 119)."""
    if not con.execute("SELECT count(*) FROM duckdb_columns() WHERE table_name = 'pixel_checks' "
                       "AND column_name = 'train_folds'").fetchall()[0][0]:
        return {}
    return dict(con.execute("""SELECT c.dataset_id, c.accuracy FROM pixel_checks c
                                 JOIN datasets d ON d.dataset_id = c.dataset_id AND d.content_sha256 = c.content_sha256
                                WHERE list_contains(?, c.dataset_id) AND c.train_folds IS NOT NULL""",
                            [sorted(ids)]).fetchall())


def _kept_shares(con: duckdb.DuckDBPyConnection, ids: list[str]) -> dict[str, float]:
    """dataset_id -> the share of its knob questions an AF dataset kept (questions now / knob questions)."""
    rows = con.execute("""SELECT dataset_id, n_questions,
                                 CAST(json_extract(params, '$.adversarial.n_knob_questions') AS BIGINT)
                          FROM datasets WHERE list_contains(?, dataset_id)
                            AND json_extract(params, '$.adversarial.n_knob_questions') IS NOT NULL""",
                       [sorted(ids)]).fetchall()
    return {did: n / k for did, n, k in rows if k}


def _kept(con: duckdb.DuckDBPyConnection, dsets: dict[str, dict]) -> list[tuple[str, float]]:
    """(config, the share of its knob questions the AF dataset kept) per AF dataset."""
    return [(dsets[did]["config"], k) for did, k in sorted(_kept_shares(con, list(dsets)).items())]


def gm3c_filtered(con: duckdb.DuckDBPyConnection, ids: list[str]) -> dict[str, float | None]:
    """The datasets of `ids` whose pooled adversarial step (`mrqa af-pool`) dropped what GM3C question-only
    models, trained out of fold, solve (a learned question-only model has had its say on them), each with
    what those models still read of the questions it kept (None if not recorded)."""
    rows = con.execute("SELECT dataset_id, CAST(json_extract(params, '$.af_pooled.oof_question_only_acc_kept') "
                       "AS DOUBLE) FROM datasets WHERE list_contains(?, dataset_id) "
                       "AND starts_with(json_extract_string(params, '$.af_pooled.adversary'), 'GM3C')",
                       [sorted(ids)]).fetchall()
    return dict(rows)


def reading_checks(con: duckdb.DuckDBPyConnection, ids: list[str]) -> dict[str, dict]:
    """The reading check recorded for each dataset of `ids` (`mrqa reading-check --record`) where it still
    measures the dataset as it is (the same content hash): {dataset_id: {n_test, reader, question_only,
    reader_other_recipe, folds}} (folds: "test", the test split scored, or "split", every split held out in
    turn); {} in a warehouse without the table (opened read-only before migration 109)."""
    if not con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'reading_checks'").fetchall()[0][0]:
        return {}
    has_folds = con.execute("SELECT count(*) FROM duckdb_columns() WHERE table_name = 'reading_checks' "
                            "AND column_name = 'folds'").fetchall()[0][0]
    rows = con.execute(f"""SELECT c.dataset_id, c.n_test, c.reader_acc, c.question_only_acc, c.reader_other_recipe_acc,
                                 {"coalesce(c.folds, 'test')" if has_folds else "'test'"}
                            FROM reading_checks c JOIN datasets d ON d.dataset_id = c.dataset_id
                                                                 AND d.content_sha256 = c.content_sha256
                           WHERE list_contains(?, c.dataset_id)""", [sorted(ids)]).fetchall()
    return {r[0]: dict(zip(("n_test", "reader", "question_only", "reader_other_recipe", "folds"), r[1:]))
            for r in rows}


def reading_gate(con: duckdb.DuckDBPyConnection, ids: list[str]) -> tuple[list[str], dict[str, str]]:
    """The datasets of `ids` that pass the card's "Read before use" rules, per dataset (`mrqa export
    --reading-only`): every context-free figure of `mrqa report` (CONTEXT_FREE) at or below READING_BOUND,
    an AF dataset keeping at least KEPT_BOUND of its knob questions, and a learned GM3C question-only model
    heard: its figure recorded by `mrqa af-check --record` at or below the bound; for a visual dataset also the
    pixel probe (a CNN trained on the photos, `mrqa pixel-probe --record`, pixel_checks). What `mrqa af-pool`'s own
    adversaries read of the questions they kept (`gm3c_filtered`) does not count: they chose those
    questions (on the demo's textual cloze 1-1-0-af they read 30.4% of what they kept, an independent
    check 37.1%). The report's probes alone do not clear a
    dataset: the textual cloze RecipeQA-style preset of the demo passes every one of them (its linear probe
    reads 33.6-34.7%) while GM3C question-only reads 61.9% of it. And a dataset no model can answer
    without its recipe is not yet one a model answers by reading it: the reading check (`reading_checks`,
    `mrqa reading-check --record`) must show a reader at least READING_LEAD above the learned question-only
    model on its test split, and another recipe's steps costing that reader
    at least READING_ABLATION. Returns (the passing ids in their order, {left-out id: why}); a dataset
    `mrqa report` has not measured is left out."""
    bias, kept, filtered = _bias(con, sorted(ids)), _kept_shares(con, ids), gm3c_filtered(con, ids)
    checked = reading_checks(con, ids)
    visual = {d for (d,) in con.execute("SELECT dataset_id FROM datasets WHERE list_contains(?, dataset_id) "
                                        "AND task LIKE 'visual_%'", [sorted(ids)]).fetchall()}
    ok, why = [], {}
    for did in ids:
        b = bias.get(did, {})
        if "qo_acc" not in b:
            why[did] = "no bias figures: run `mrqa report` first"
            continue
        if b.get("qo_acc") is None:
            why[did] = "the question-only probe could not be measured (too few questions or recipes)"
            continue
        over = [(b[k], name) for k, name in CONTEXT_FREE if b.get(k) is not None and b[k] > READING_BOUND]
        if over:
            acc, name = max(over)
            why[did] = f"{name} {_pct(acc)} > {_pct(READING_BOUND)}"
        elif did in kept and kept[did] < KEPT_BOUND:
            why[did] = f"kept {_pct(kept[did])} of its knob questions < {_pct(KEPT_BOUND)}"
        elif b.get("gm3c_qo_acc") is None:
            own = (f" (its af-pool adversary's own figure, {_pct(filtered[did])}, was read on the questions it chose "
                   "to keep)" if filtered.get(did) is not None else "")
            why[did] = (f"{UNCHECKED_GM3C}: run `mrqa af-check --dataset {did} --record`{own}")
        elif did in visual and b.get("pixel_acc") is None:
            why[did] = f"{UNCHECKED_PIXEL}: run `mrqa pixel-probe --dataset {did} --record`"
        elif did not in checked:
            why[did] = (f"{NOT_READ_CHECKED}: run `mrqa reading-check --dataset {did} --record` (a reader against a "
                        "learned question-only model, and with another recipe's steps)")
        else:
            why_not = _reading_failed(checked[did])
            if why_not:
                why[did] = why_not
            else:
                ok.append(did)
    return ok, why


NOT_READ_CHECKED = "no reading check"
UNCHECKED_PIXEL = "no pixel probe figure (a CNN on the photos)"
UNCHECKED_GM3C = "no learned GM3C question-only figure from an independent check"


def _reading_failed(c: dict) -> str | None:
    """Why a recorded reading check does not show reading (None: it does). Its question-only figure is the
    lead's reference only: the bound on question-only is judged on every question (the report's probes,
    af-check), not on a test split of 70-200 questions, whose 95% interval spans
    about 14 points."""
    n = (f"{c['n_test']} questions, every split held out in turn" if c.get("folds") == "split"
         else f"{c['n_test']} test questions")
    lead, cost = c["reader"] - c["question_only"], c["reader"] - c["reader_other_recipe"]
    if lead < READING_LEAD - 1e-9:
        return (f"the reader leads question-only by {100 * lead:.1f} points < {100 * READING_LEAD:.0f} "
                f"(reading check, {n})")
    if cost < READING_ABLATION - 1e-9:
        return (f"another recipe's steps cost the reader {100 * cost:.1f} points < {100 * READING_ABLATION:.0f} "
                f"(reading check, {n})")
    return None


def _checked_on(rc: dict) -> str:
    """The questions a reading check scored, for the card's table: `72 test` or `1,295 all` (every split held
    out in turn); – without a check."""
    if not rc:
        return "–"
    return f"{rc['n_test']:,d} {'all' if rc.get('folds') == 'split' else 'test'}"


def _cell(text: str) -> str:
    """Text for a Markdown table cell (a literal | would end the cell)."""
    return text.replace("|", "\\|")


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def _ci(b: dict, acc: str, lo: str, hi: str) -> str:
    if b.get(acc) is None:
        return "–"
    if b.get(lo) is None or b.get(hi) is None:
        return _pct(b[acc])
    return f"{_pct(b[acc])} [{100 * b[lo]:.1f}, {100 * b[hi]:.1f}]"


def reading_caveats(bias_of: list[tuple[str, dict]], kept_of: list[tuple[str, float]] = ()) -> list[str]:
    """The card's "Read before use" section: the configs that some context-free figure answers more often
    than READING_BOUND, each with its highest such figure, and the AF configs that kept less than
    KEPT_BOUND of their knob questions. `bias_of`: (config, bias figures) per dataset; `kept_of`: (config,
    kept share) per AF dataset; a config of several datasets shows its worst. [] when none is listed."""
    worst: dict[str, tuple[float, str]] = {}
    for config, b in bias_of:
        for k, name in CONTEXT_FREE:
            if b.get(k) is not None and b[k] > READING_BOUND:
                worst[config] = max(worst.get(config, (0.0, "")), (b[k], name))
    over = [f"| {config} | {name} | {_pct(acc)} |" for config, (acc, name) in sorted(worst.items())]
    least: dict[str, float] = {}
    for config, k in kept_of:
        if k is not None and k < KEPT_BOUND:
            least[config] = min(least.get(config, 1.0), k)
    few = [f"| {config} | {_pct(k)} |" for config, k in sorted(least.items())]
    out = []
    if over:
        out += ["## Read before use", "",
                f"These configs are answered more than {100 * READING_BOUND:.0f}% of the time without reading "
                "the recipe (chance is 25%): by a rule that sees the choices' distances only, or by a learned "
                "question-only model (the linear probe, or GM3C where `mrqa af-check --record` measured it). "
                "A paper setting or the RecipeQA-style preset listed here reproduces that setting's bias; an "
                "`-af` config listed here kept a cue its filtering did not remove. Neither shows that a model "
                "reads. A figure at or below the bound is no proof either: where GM3C question-only was not "
                "measured, `mrqa af-check` is the stronger check.", "",
                "| config | highest context-free figure | accuracy |", "| --- | --- | ---: |", *over, ""]
    if few:
        out += ["## Small adversarial configs" if over else "## Read before use", "",
                f"Adversarial filtering kept less than {100 * KEPT_BOUND:.0f}% of these configs' knob questions "
                "(text twins of the answer, questions the step text cannot answer, questions a question-only "
                "model still solves, and in the balanced knob-3 mode the equal distance ranks: `mrqa "
                "af-report`, the dataset's `generation_skips`): what is left is a skewed sample of the setting.",
                "", "| config | kept of the knob questions |", "| --- | ---: |", *few, ""]
    return out


def render_card(con: duckdb.DuckDBPyConnection, questions: pa.Table, parts: list[dict],
                files: list[str], left_out: dict[str, str] | None = None,
                vectors_of: str | None = None) -> tuple[str, int]:
    """The README.md text and the number of question configs; `left_out` ({dataset_id: why}): the
    datasets `mrqa export --reading-only` left out, listed after the configs; `vectors_of` (export_parquet's):
    "questions" says the vector files hold only what the questions' models read."""
    configs = _configs(parts, files)
    n_q_configs = len(configs) - len(files)
    y = ["---", "pretty_name: Meta-RecipeQA", "task_categories:", "- multiple-choice",
         "- visual-question-answering", "language:", "- en", "configs:"]
    for name, data_files in configs:
        y += [f"- config_name: {_yaml_str(name)}", "  data_files:"]
        for split, path in data_files:
            y += [f"  - split: {split}", f"    path: {_yaml_str(path)}"]
    y.append("---")

    dsets: dict[str, dict] = {}
    for p in parts:
        for did, n in p["datasets"].items():
            d = dsets.setdefault(did, {"config": config_name(p["task"], p["knobs"]), "splits": {}})
            d["splits"][p["split"]] = d["splits"].get(p["split"], 0) + n
    meta = {r[0]: r[1:] for r in con.execute(
        "SELECT dataset_id, encoder_id, seed, n_recipes FROM datasets WHERE list_contains(?, dataset_id)",
        [sorted(dsets)]).fetchall()}
    bias = _bias(con, sorted(dsets))
    encs = sorted({m[0] for m in meta.values() if m[0]})
    enc_rows = con.execute("SELECT encoder_id, kind, model_name, coalesce(pretrained, ''), dim, train_split "
                           "FROM encoders WHERE list_contains(?, encoder_id) ORDER BY 1", [encs]).fetchall()
    first = configs[0][0] if n_q_configs else "visual_cloze-0-1-1"
    md = ["", "# Meta-RecipeQA", "",
          "De-biased multimodal question answering over cooking recipes (visual cloze, visual coherence, visual "
          "ordering, textual cloze), generated at several knob settings. One config per dataset, named by task and "
          "setting; each has the splits its questions fall in (train, validation = the `val` folder, test).", "",
          "## Loading", "", "```python",
          "import datasets",
          f'ds = datasets.load_dataset("path/to/this/folder", "{first}")   # DatasetDict: train / validation / test',
          "", "import polars as pl",
          'q = pl.read_parquet("questions/**/*.parquet", hive_partitioning=True)', "",
          "import duckdb",
          "duckdb.sql(\"SELECT task, knobs, split, count(*) FROM read_parquet('questions/**/*.parquet', "
          "hive_partitioning = false) GROUP BY ALL\")   # the columns in the files: DuckDB's hive reading "
          "would take a lone knobs=0-1-1 or 1-1-1 for a date", "",
          "import pandas as pd",
          'q = pd.read_parquet("questions")          # k1/k2/k3 come back as nullable Int8', "```", "",
          "The partition columns (`task`, `knobs`, `split`) are inside the files too, so a single file or a "
          "config loaded with `datasets` keeps them.", "",
          "## Configs", "",
          "Counts per split; bias figures from `mrqa report` (accuracy of answering without the context; "
          "chance is 25%): Hasty Student (a fixed context-free rule), the distance probe (a classifier on each "
          "choice's distances from the question), the centre of the choices (the choice nearest the other "
          "choices, the question unseen), the closest pair (visual coherence: of the two images most alike, the "
          "one less like the other two), the learned question-only probe (all scored questions, and "
          "the test split, with 95% intervals), and GM3C question-only and the tree probe (gradient-boosted "
          "trees on the choice-set cues) on every question, cross-fitted (`mrqa af-check --record`, AF "
          "datasets; the tree's figure is the report's where no check was recorded). The reading check "
          "(`mrqa reading-check --record`): a reader of the recipe, the learned question-only "
          "model it is measured against, and the reader given another recipe's steps, on the questions its "
          "column names: the test split's, or with `--folds split` every question, each split held out in turn "
          "(models trained on the other splits). – = not measured.", "",
          "| config | dataset_id | train | validation | test | recipes | Hasty Student | distance probe | "
          "centre of the choices | closest pair | question-only probe | question-only probe (test) | "
          "GM3C question-only | tree probe | reading check on | reader | question-only | reader, another recipe |",
          "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
          "---: | ---: | ---: |"]
    read = reading_checks(con, list(dsets))
    for did, d in sorted(dsets.items(), key=lambda kv: (kv[1]["config"], kv[0])):
        b, rc = bias.get(did, {}), read.get(did, {})
        n_rec = meta.get(did, (None, None, None))[2]
        md.append(f"| {d['config']} | {did} | " + " | ".join(f"{d['splits'].get(s, 0):,d}" for s in CARD_SPLITS)
                  + f" | {'' if n_rec is None else f'{n_rec:,d}'} | {_pct(b.get('hasty_student_acc'))} | "
                    f"{_pct(b.get('probe_acc'))} | {_pct(b.get('centre_rule_acc'))} | "
                    f"{_pct(b.get('pair_rule_acc'))} | {_ci(b, 'qo_acc', 'qo_ci_low', 'qo_ci_high')} | "
                    f"{_ci(b, 'qo_test_acc', 'qo_test_ci_low', 'qo_test_ci_high')} | {_pct(b.get('gm3c_qo_acc'))} | "
                    f"{_pct(b.get('tree_qo_acc', b.get('tree_acc')))} | {_checked_on(rc)} | {_pct(rc.get('reader'))} | "
                    f"{_pct(rc.get('question_only'))} | {_pct(rc.get('reader_other_recipe'))} |")
    total = sum(sum(d["splits"].values()) for d in dsets.values())
    md += ["", f"{total:,d} questions in {n_q_configs} configs from {len(dsets)} datasets.", ""]
    md += reading_caveats([(d["config"], bias.get(did, {})) for did, d in dsets.items()], _kept(con, dsets))
    if left_out:
        md += ["## Left out of this export", "",
               f"Exported with `mrqa export --reading-only`: {len(left_out)} datasets of the warehouse were left "
               f"out, each by the rules of \"Read before use\" (a context-free figure above "
               f"{100 * READING_BOUND:.0f}%, an adversarial dataset keeping less than {100 * KEPT_BOUND:.0f}% of its "
               "knob questions), by its reading check (a reader less than "
               f"{100 * READING_LEAD:.0f} points above the learned question-only model, or losing less than "
               f"{100 * READING_ABLATION:.0f} with another recipe's steps) or for want of the figures: a learned "
               "GM3C question-only model must have been heard on each exported dataset in a recorded `mrqa "
               "af-check` (what `mrqa af-pool`'s own adversaries read of the questions they kept does not count), "
               "and a reader in a recorded `mrqa reading-check`.",
               "", "| dataset_id | why |", "| --- | --- |",
               *[f"| {did} | {_cell(why)} |" for did, why in sorted(left_out.items())], ""]
    md += ["## Scoring a model", "",
           "Accuracy alone does not show that a model reads the recipe. Report it with the two checks this "
           f"benchmark applies to its own readers: the lead over question-only models (the figures above; at least "
           f"{100 * READING_LEAD:.0f} points) and the **context ablation**, the same model with each question given "
           f"another recipe's steps (it should lose at least {100 * READING_ABLATION:.0f} points). The other recipe, "
           "per split: sort the split's questions by `recipe_id` (ties in `qid` order); each question takes the "
           "recipe of the question g places further on, round the end, g being the most questions one recipe has "
           "in the split. `context_ablation.parquet` (config `context_ablation`) holds it for every question "
           "here, and `mrqa score --export . --dataset ID --plan plan.csv` writes it for one dataset; `mrqa score "
           "--export . --dataset ID --predictions p.json --context-ablation a.json` prints the accuracy with its "
           "95% interval, what the ablation cost and the verdict.", ""]
    md += [
           "## Knob settings", "",
           "A setting's name is `k1-k2-k3`, then `-all` or `-balanced` for a knob-3 mode other than the coin "
           "flip, then `-af` for adversarial filtering; or a preset name.", "", KNOB_LEGEND,
           "## Question columns", "", "| column | type | meaning |", "| --- | --- | --- |"]
    md += [f"| `{c}` | {_cell(t)} | {_cell(m)} |" for c, t, m in QUESTION_COLUMNS]
    md += ["", "Splits: the config names `val` `validation` (the folder and the `split` column keep `val`).", "",
           "## Provenance", "",
           "`provenance` is a JSON object; its keys depend on the task and the setting. Keys seen in this "
           f"export (read from the first {PROVENANCE_SAMPLE} questions of every dataset; datasets = how many of "
           "the task's datasets have the key):", ""]
    for task, keys in _provenance_schema(con, questions).items():
        md += [f"### {task}", "", "| key | JSON type | datasets | meaning |", "| --- | --- | ---: | --- |"]
        md += [f"| `{k}` | {' / '.join(t)} | {n} of {n_all} | {_cell(PROVENANCE_KEYS.get(k, '(undocumented)'))} |"
               for k, t, n, n_all in keys]
        md.append("")
    md += ["## Encoders", "", "| encoder_id | kind | model | weights | dim | trained on |",
           "| --- | --- | --- | --- | ---: | --- |"]
    md += [f"| {e} | {k} | {m} | {p} | {d} | {ts or ''} |" for e, k, m, p, d, ts in enc_rows]
    md += ["", "## Files", "",
           "| file | what |", "| --- | --- |",
           "| `questions/task=*/knobs=*/split=*/data_0.parquet` | the questions (columns above) |"]
    side = {"recipes.parquet": "recipe_id, source, url, title, category, channel, split of every ok recipe of "
                               "the exported splits (distractors come from all of them)",
            "steps.parquet": "the recipes' steps: cleaned and raw title/body, word tokens per sentence, image_ids",
            "context_ablation.parquet": "per question (dataset_id, split, qid, recipe_id), the recipe whose steps "
                                        "replace its own in the context ablation: context_recipe_id (\"Scoring a "
                                        "model\")",
            "image_vectors.parquet": "image vectors: item_id (= image_id, also kept as `image_id`), recipe_id, "
                                     "step_idx, split, encoder_id, vector",
            "text_vectors.parquet": "step-text vectors: item_id (`<recipe_id>_<step_idx>_<field>`), field (title, "
                                    "or body: the step texts the readers' `--text-features vectors` read), "
                                    "recipe_id, step_idx, split, encoder_id, vector",
            "images.parquet": "the images of those recipes: image_id, recipe_id, step_idx, split, image "
                              "(Hugging Face Image: struct of bytes + path)"}
    if vectors_of == "questions":
        for f in ("image_vectors.parquet", "text_vectors.parquet"):
            side[f] += (" -- only those the questions' models read (`--vectors-of questions`): the photos and "
                        "titles they show, and their own and their context-ablation recipes' steps, not every "
                        "one of the splits")
    md += [f"| `{f}` (config `{f.removesuffix('.parquet')}`) | {side.get(f, '')} |" for f in files]
    md += ["", f"Split names: {', '.join(f'{k} -> {v}' for k, v in SPLIT_NAMES.items())}.", ""]
    return "\n".join(y + md), n_q_configs


def write_card(con: duckdb.DuckDBPyConnection, out: Path, questions: pa.Table, parts: list[dict],
               files: list[str], left_out: dict[str, str] | None = None, vectors_of: str | None = None) -> dict:
    text, n = render_card(con, questions, parts, files, left_out, vectors_of)
    (Path(out) / "README.md").write_text(text, encoding="utf-8")
    return {"configs": n}
