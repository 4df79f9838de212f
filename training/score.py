"""Score any model's predictions on a benchmark split the way the reading benchmark judges its own models
(`mrqa score`).

A researcher trains a model elsewhere on an export and brings back one choice per question. Accuracy alone
does not say the model reads the recipe: the benchmark's own test is a lead over question-only models and a
**context ablation**, the same model given another recipe's steps. This module

- loads a split's questions from the warehouse (read-only) or from a Parquet export (`mrqa export`);
- writes the split's ablation plan: for each question, the recipe whose steps replace its own
  (`context_plan`: the rule of `training.ablation.foreign_context_rows`, which the reading check and
  `mrqa evaluate`'s context ablation use, so the figures are comparable);
- reads predictions as JSON ({qid: index}, or a list / {task: list} in qid order, as `mrqa evaluate
  --predictions` writes), JSON Lines ({"qid", "prediction"}) or CSV (qid,prediction); a question without
  a prediction counts as wrong and is counted; an unknown qid, a duplicate or an index outside the
  choices is refused with what to do;
- reports accuracy with its 95% interval (Wilson and a bootstrap over recipes, the wider ends), the
  ablation's cost with a paired bootstrap interval over recipes, the lead over the strongest
  question-only figure known for the split (the predictions of `--question-only`, the reading check's
  learned question-only model, the report's probe on the test split, the GM3C question-only check), and a
  verdict with the reading benchmark's bounds (card.READING_LEAD, card.READING_ABLATION)."""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np

from etl.config import sql_glob
from features.datasets.export import QID_SEPARATOR
from features.datasets.knobs import setting_of
from training.ablation import other_recipes

PREDICTION_KEYS = ("prediction", "answer", "pred")        # the field of a JSON Lines record, in this order
PREDICTION_SUFFIXES = (".json", ".jsonl", ".csv")          # a folder of predictions: <dataset_id><suffix>
N_BOOT = 2000


class ScoreError(ValueError):
    """A one-line reason the predictions or the split cannot be scored, with what to do."""


@dataclass
class SplitQuestions:
    """The questions of one split of a dataset, in qid order."""
    dataset_id: str
    task: str
    setting: str
    split: str
    qids: list[str]
    recipe_ids: list[str]
    answers: np.ndarray          # (n,) 0-based
    n_choices: np.ndarray        # (n,)

    @property
    def n(self) -> int:
        return len(self.qids)


# ----------------------------------------------------------------------------- the questions

def _source(export: Path | None, con: duckdb.DuckDBPyConnection | None) -> str:
    """The table expression of the questions: the export's Parquet files, or the warehouse's table."""
    if export is not None:
        qdir = Path(export) / "questions"
        if not qdir.is_dir():
            raise ScoreError(f"{export} is not a Parquet export (no questions/ folder); give the folder "
                             "`mrqa export` wrote")
        return f"read_parquet({sql_glob(qdir, '**/*.parquet')}, hive_partitioning = false)"
    if con is None:
        raise ScoreError("no warehouse and no --export: give the export the predictions were made on")
    return "(SELECT q.*, d.setting AS knobs FROM questions q JOIN datasets d USING (dataset_id))"


def _fetch(sql: str, params: list, export: Path | None, con: duckdb.DuckDBPyConnection | None) -> list[tuple]:
    """`sql` with {src} the questions' source, on the warehouse connection or a fresh one for the export."""
    sql = sql.replace("{src}", _source(export, con))        # not format(): a path may hold braces
    if export is None:
        return con.execute(sql, params).fetchall()
    with duckdb.connect() as src:
        try:
            return src.execute(sql, params).fetchall()
        except duckdb.Error as e:
            raise ScoreError(f"{export}: its questions cannot be read ({str(e).splitlines()[0]}); write it again "
                             "with `mrqa export`") from None


def load_split(dataset_id: str, split: str, export: Path | None = None,
               con: duckdb.DuckDBPyConnection | None = None) -> SplitQuestions:
    """The split's questions from a Parquet export (`export`) or from the warehouse connection `con`."""
    rows = _fetch("SELECT qid, recipe_id, answer, len(choice_list), task, knobs FROM {src} "
                  "WHERE dataset_id = ? AND split = ? ORDER BY qid", [dataset_id, split], export, con)
    if not rows:
        where = "the warehouse" if export is None else f"export {export}"
        raise ScoreError(f"{where} holds no {split} questions of dataset {dataset_id!r}; `mrqa datasets` lists "
                         "the datasets, --split picks train, val or test")
    # an export names a setting's twins apart (`0-1-1-s1-<enc8>`): the setting itself, as the warehouse says
    return SplitQuestions(dataset_id, rows[0][4], setting_of(str(rows[0][5])), split, [r[0] for r in rows],
                          [r[1] for r in rows], np.array([r[2] for r in rows], np.int64),
                          np.array([r[3] for r in rows], np.int64))


def list_datasets(split: str, export: Path | None = None, con: duckdb.DuckDBPyConnection | None = None) -> list[str]:
    """The datasets with questions in `split`, from the export or the warehouse, sorted."""
    return [r[0] for r in _fetch("SELECT DISTINCT dataset_id FROM {src} WHERE split = ? ORDER BY 1", [split],
                                 export, con)]


def prediction_files(folder: Path) -> dict[str, Path]:
    """dataset_id -> its predictions in `folder` (<dataset_id>.json, .jsonl or .csv); two files of one
    dataset are refused."""
    out: dict[str, Path] = {}
    for f in sorted(Path(folder).iterdir()):
        if f.is_file() and f.suffix in PREDICTION_SUFFIXES:
            if f.stem in out:
                raise ScoreError(f"{folder}: {out[f.stem].name} and {f.name} both hold predictions of {f.stem}; "
                                 "keep one")
            out[f.stem] = f
    return out


def context_plan(qs: SplitQuestions) -> list[str]:
    """For each question, the recipe whose steps replace its own in the context ablation: the rule of
    `training.ablation.foreign_context_rows` (questions sorted by recipe; each takes the recipe as many places
    further round as the largest recipe has questions), the one the reading check uses."""
    return other_recipes(qs.recipe_ids)


PLAN_COLUMNS = ["qid", "recipe_id", "context_recipe_id"]


def _is_plan(path: Path) -> bool:
    """Whether an existing file is a plan `write_plan` wrote (its columns), so writing it again is safe."""
    try:
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq
            return pq.read_schema(path).names == PLAN_COLUMNS
        with path.open(newline="", encoding="utf-8") as f:
            return next(csv.reader(f), None) == PLAN_COLUMNS
    except Exception:  # noqa: BLE001 - unreadable or not a table: not a plan, so it is kept
        return False


def write_plan(qs: SplitQuestions, out: Path) -> int:
    """Write the ablation plan (qid, recipe_id, context_recipe_id) as CSV, or Parquet for a .parquet name;
    returns how many questions keep their own recipe (only when one recipe holds over half of them)."""
    other = context_plan(qs)
    if out.is_file() and not _is_plan(out):          # never over a file of the user's, e.g. their predictions
        raise ScoreError(f"{out} exists and is not a context-ablation plan: give --plan a new file name")
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq
        pq.write_table(pa.table(dict(zip(PLAN_COLUMNS, (qs.qids, qs.recipe_ids, other)))), out)
    else:
        with out.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(PLAN_COLUMNS)
            w.writerows(zip(qs.qids, qs.recipe_ids, other))
    return sum(a == b for a, b in zip(qs.recipe_ids, other))


# ----------------------------------------------------------------------------- the predictions

def _as_index(value, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ScoreError(f"{where}: the prediction must be a choice index (0-based integer), got {value!r}")
    try:
        f = float(value)
    except ValueError:
        raise ScoreError(f"{where}: the prediction must be a choice index (0-based integer), got {value!r}") from None
    if not f.is_integer():
        raise ScoreError(f"{where}: the prediction must be a choice index (0-based integer), got {value!r}")
    return int(f)


def _pairs(path: Path) -> tuple[list[tuple[str, object]] | None, list | None]:
    """(qid, value) pairs, or a positional list, as the file holds them."""
    try:
        text = path.read_text(encoding="utf-8-sig")           # a byte-order mark (spreadsheets) is no qid
    except (OSError, UnicodeDecodeError) as e:
        raise ScoreError(f"cannot read predictions {path}: {e}") from None
    if path.suffix == ".csv":
        rows = list(csv.DictReader(text.splitlines()))
        if not rows or "qid" not in rows[0] or not any(k in rows[0] for k in PREDICTION_KEYS):
            raise ScoreError(f"{path}: a CSV of predictions needs a header with qid and prediction")
        key = next(k for k in PREDICTION_KEYS if k in rows[0])
        return [(r["qid"], r[key]) for r in rows], None
    if path.suffix == ".jsonl":
        pairs = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ScoreError(f"{path} line {n}: not JSON ({e.msg}); one object per line, e.g. "
                                 '{"qid": "...", "prediction": 2}') from None
            key = next((k for k in PREDICTION_KEYS if isinstance(rec, dict) and k in rec), None)
            if key is None or "qid" not in rec:
                raise ScoreError(f'{path} line {n}: needs "qid" and "prediction"')
            pairs.append((str(rec["qid"]), rec[key]))
        return pairs, None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ScoreError(f"{path}: not JSON ({e.msg} at line {e.lineno}); give {{qid: index}}, a list in qid "
                         "order, JSON Lines (.jsonl) or CSV (.csv)") from None
    if isinstance(doc, list):
        return None, doc
    if isinstance(doc, dict) and len(doc) == 1 and isinstance(next(iter(doc.values())), list):
        return None, next(iter(doc.values()))          # {task: [index, ...]}: `mrqa evaluate --predictions`
    if isinstance(doc, dict):
        return [(str(k), v) for k, v in doc.items()], None
    raise ScoreError(f"{path}: give {{qid: index}}, a list in qid order, JSON Lines or CSV")


def read_predictions(path: Path, qs: SplitQuestions) -> np.ndarray:
    """(n,) the predicted choice of each question of `qs` (-1: none given)."""
    path = Path(path)
    if not path.is_file():
        raise ScoreError(f"no predictions file {path}")
    pairs, listed = _pairs(path)
    if listed is not None:
        if len(listed) != qs.n:
            raise ScoreError(f"{path}: {len(listed)} predictions in qid order for the {qs.n} {qs.split} questions of "
                             f"{qs.dataset_id}; give {{qid: index}} to score part of a split")
        pairs = list(zip(qs.qids, listed))
    pos = {q: i for i, q in enumerate(qs.qids)}
    pred = np.full(qs.n, -1, np.int64)
    unknown, seen = [], set()
    prefix = f"{qs.dataset_id}{QID_SEPARATOR}"          # the RecipeQA JSON export's qids: <dataset_id>.<qid>
    for qid, value in pairs:
        if qid not in pos and qid.startswith(prefix):
            qid = qid[len(prefix):]
        if qid not in pos:
            unknown.append(qid)
            continue
        if qid in seen:
            raise ScoreError(f"{path}: qid {qid!r} is predicted twice")
        seen.add(qid)
        i = pos[qid]
        k = _as_index(value, f"{path}, qid {qid!r}")
        if not 0 <= k < qs.n_choices[i]:
            raise ScoreError(f"{path}, qid {qid!r}: choice {k} does not exist (choices 0..{qs.n_choices[i] - 1})")
        pred[i] = k
    if unknown:
        raise ScoreError(f"{path}: {len(unknown)} qid(s) are not {qs.split} questions of {qs.dataset_id} (e.g. "
                         f"{unknown[0]!r}); score the dataset and --split the predictions were made on")
    if not seen:
        raise ScoreError(f"{path} holds no predictions")
    return pred


# ----------------------------------------------------------------------------- the figures

def _groups(recipe_ids: list[str]) -> np.ndarray:
    return np.unique(np.asarray(recipe_ids, dtype=object), return_inverse=True)[1]


def difference_interval(diff: np.ndarray, groups: np.ndarray, level: float = 0.95, n_boot: int = N_BOOT,
                        seed: int = 0) -> tuple[float, float] | None:
    """Percentile bootstrap interval of a mean paired difference per question (e.g. right with its own
    recipe minus right with another's), resampling whole recipes (their questions are not independent)."""
    if len(diff) == 0:
        return None
    hits = np.bincount(groups, weights=np.asarray(diff, np.float64))
    size = np.bincount(groups).astype(np.float64)
    draw = np.random.default_rng(seed).integers(0, len(size), size=(n_boot, len(size)))
    d = hits[draw].sum(1) / size[draw].sum(1)
    lo, hi = np.quantile(d, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def _accuracy(pred: np.ndarray, qs: SplitQuestions) -> dict:
    from features.diagnostics.question_only import accuracy_interval
    right = (pred == qs.answers).astype(np.float64)
    ci = accuracy_interval(right, qs.recipe_ids, n_boot=N_BOOT, seed=0)
    return {"accuracy": round(float(right.mean()), 4), "ci": [round(ci[0], 4), round(ci[1], 4)],
            "answered": int((pred >= 0).sum()), "missing": int((pred < 0).sum())}


def recorded_figures(con: duckdb.DuckDBPyConnection | None, qs: SplitQuestions) -> dict:
    """What the warehouse recorded of the dataset, where it still holds the same questions and answers as
    `qs`: the report's context-free figures, the GM3C question-only check and the reading check."""
    if con is None:
        return {"note": "no warehouse: no recorded figures"}
    mine = con.execute("SELECT qid, answer FROM questions WHERE dataset_id = ? AND split = ? ORDER BY qid",
                       [qs.dataset_id, qs.split]).fetchall()
    if [r[0] for r in mine] != qs.qids or [r[1] for r in mine] != qs.answers.tolist():
        return {"note": "the warehouse's dataset is not the one scored (other questions or answers): "
                        "no recorded figures"}
    from features.datasets.card import _bias, reading_checks
    b = _bias(con, [qs.dataset_id]).get(qs.dataset_id, {})
    out = {name: b.get(key) for key, name in (
        ("hasty_student_acc", "hasty_student"), ("probe_acc", "distance_probe"),
        ("qo_test_acc", "question_only_probe_test"), ("gm3c_qo_acc", "gm3c_question_only_check"))}
    rc = reading_checks(con, [qs.dataset_id]).get(qs.dataset_id)
    out["reading_check"] = ({k: (round(v, 4) if isinstance(v, float) else v) for k, v in rc.items()}
                            if rc else None)
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in out.items()}


def score(qs: SplitQuestions, pred: np.ndarray, ablated: np.ndarray | None = None,
          question_only: np.ndarray | None = None, recorded: dict | None = None) -> dict:
    """The figures of `mrqa score` (module docstring) for predictions `pred` of the questions `qs`, the same
    model's predictions with another recipe's steps (`ablated`, `context_plan`) and a question-only model's."""
    from features.datasets.card import READING_ABLATION, READING_LEAD
    recorded = recorded or {}
    groups = _groups(qs.recipe_ids)
    right = (pred == qs.answers).astype(np.float64)
    out = {"dataset_id": qs.dataset_id, "task": qs.task, "setting": qs.setting, "split": qs.split,
           "n_questions": qs.n, "chance": round(float(np.mean(1.0 / qs.n_choices)), 4),
           "model": _accuracy(pred, qs), "context_ablation": None, "question_only": None, "recorded": recorded}
    if ablated is not None:
        diff = right - (ablated == qs.answers)
        ci = difference_interval(diff, groups)
        out["context_ablation"] = {**_accuracy(ablated, qs), "cost": round(float(diff.mean()), 4),
                                   "cost_ci": [round(ci[0], 4), round(ci[1], 4)]}
    refs = []
    if question_only is not None:
        lead = right - (question_only == qs.answers)              # paired, question by question
        ci = difference_interval(lead, groups)
        out["question_only"] = {**_accuracy(question_only, qs), "lead": round(float(lead.mean()), 4),
                                "lead_ci": [round(ci[0], 4), round(ci[1], 4)]}
        refs.append((out["question_only"]["accuracy"], "your question-only predictions"))
    rc = recorded.get("reading_check") or {}
    for value, name in ((rc.get("question_only"), "the reading check's question-only model"),
                        (recorded.get("question_only_probe_test"), "the report's question-only probe (test)"),
                        (recorded.get("gm3c_question_only_check"), "the GM3C question-only check")):
        if value is not None:
            refs.append((float(value), name))
    why, ok = [], True
    verdict = {"lead_bound": READING_LEAD, "ablation_bound": READING_ABLATION}
    if refs:
        ref, name = max(refs)
        lead = out["model"]["accuracy"] - ref
        verdict.update(question_only=round(ref, 4), question_only_from=name, lead=round(lead, 4))
        if lead < READING_LEAD - 1e-9:
            ok = False
            why.append(f"leads {name} by {100 * lead:.1f} points (< {100 * READING_LEAD:.0f})")
    else:
        ok = None
        why.append("no question-only figure: give --question-only, or score a dataset the warehouse checked")
    if out["context_ablation"] is not None:
        cost = out["context_ablation"]["cost"]
        if cost < READING_ABLATION - 1e-9:
            ok = False
            why.append(f"another recipe's steps cost it {100 * cost:.1f} points (< {100 * READING_ABLATION:.0f})")
    elif ok is not False:
        ok = None
        why.append("no context ablation: give --context-ablation (its predictions with the steps of the recipes "
                   "`mrqa score --plan` names)")
    verdict.update(reads_the_recipe=ok, why=why)
    out["verdict"] = verdict
    return out


def summarise(results: list[dict]) -> dict:
    """Over several datasets' `score` results: how many read the recipe, how many not, how many not judged."""
    said = [r["verdict"]["reads_the_recipe"] for r in results]
    return {"datasets": len(results), "reads_the_recipe": said.count(True), "not_shown": said.count(False),
            "not_judged": said.count(None)}


def format_summary(results: list[dict]) -> str:
    """The closing table of `mrqa score` over several datasets."""
    def pct(x):
        return "–" if x is None else f"{100 * x:.1f}%"
    lines = ["| dataset | questions | accuracy | another recipe's steps | cost | lead over question-only | verdict |",
             "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in results:
        ab, v = r["context_ablation"] or {}, r["verdict"]
        said = {True: "reads the recipe", False: "not shown", None: "not judged"}[v["reads_the_recipe"]]
        lead = "–" if v.get("lead") is None else f"{100 * v['lead']:+.1f}"
        cost = "–" if ab.get("cost") is None else f"{100 * ab['cost']:.1f}"
        lines.append(f"| {r['dataset_id']} | {r['n_questions']:,d} | {pct(r['model']['accuracy'])} | "
                     f"{pct(ab.get('accuracy'))} | {cost} | {lead} | {said} |")
    s = summarise(results)
    lines.append(f"reads the recipe on {s['reads_the_recipe']} of {s['datasets']} datasets ({s['not_shown']} not "
                 f"shown, {s['not_judged']} not judged)")
    return "\n".join(lines)


def format_score(res: dict) -> str:
    """The table `mrqa score` prints."""
    def pct(a: dict) -> str:
        lo, hi = a["ci"]
        miss = f", {a['missing']} without a prediction" if a["missing"] else ""
        return f"{100 * a['accuracy']:5.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]{miss}"
    lines = [f"{res['dataset_id']} ({res['task']} {res['setting']}), {res['split']} split: {res['n_questions']} "
             f"questions, chance {100 * res['chance']:.1f}%",
             f"  your model                          {pct(res['model'])}"]
    ab = res["context_ablation"]
    if ab:
        lo, hi = ab["cost_ci"]
        lines.append(f"  with another recipe's steps         {pct(ab)}  cost {100 * ab['cost']:.1f} points "
                     f"[{100 * lo:.1f}, {100 * hi:.1f}]")
    if res["question_only"]:
        q = res["question_only"]
        lines.append(f"  your question-only predictions      {pct(q)}  your model leads it by {100 * q['lead']:.1f} "
                     f"points [{100 * q['lead_ci'][0]:.1f}, {100 * q['lead_ci'][1]:.1f}]")
    rec = res["recorded"]
    if rec.get("note"):
        lines.append(f"  recorded: {rec['note']}")
    else:
        names = (("question_only_probe_test", "question-only probe, test"), ("gm3c_question_only_check",
                 "GM3C question-only check"), ("hasty_student", "Hasty Student"), ("distance_probe", "distance probe"))
        shown = [f"{label} {100 * rec[k]:.1f}%" for k, label in names if rec.get(k) is not None]
        rc = rec.get("reading_check")
        if rc:
            shown.append(f"reading check: reader {100 * rc['reader']:.1f}%, question-only "
                         f"{100 * rc['question_only']:.1f}%, reader with another recipe's steps "
                         f"{100 * rc['reader_other_recipe']:.1f}%")
        lines.append("  recorded: " + ("; ".join(shown) if shown else "nothing yet (`mrqa report`, `mrqa af-check "
                                                                      "--record`, `mrqa reading-check --record`)"))
    v = res["verdict"]
    said = {True: "reads the recipe", False: "not shown to read the recipe", None: "not judged"}[v["reads_the_recipe"]]
    bounds = (f"(bounds: {100 * v['lead_bound']:.0f} points above question-only, {100 * v['ablation_bound']:.0f} "
              "lost with another recipe's steps)")
    why = v["why"]
    if v["reads_the_recipe"]:
        why = [f"leads {v['question_only_from']} ({100 * v['question_only']:.1f}%) by {100 * v['lead']:.1f} points",
               f"another recipe's steps cost it {100 * res['context_ablation']['cost']:.1f}"]
    lines.append(f"  verdict: {said} {bounds}" + ("" if not why else ": " + "; ".join(why)))
    return "\n".join(lines)
