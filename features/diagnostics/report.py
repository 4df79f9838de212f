"""The benchmark bias report: one static folder, index.html + PNG plots (matplotlib Agg).

A header says what was measured, when (the date), with which code (git commit) and encoder (short
name and full id), on what corpus (recipes, steps, images, questions) and links the Parquet export
and its dataset card. Per task: a table of datasets x (questions, recipes, Hasty Student and
distance-probe accuracy with 95% Wilson intervals, learned question-only probe accuracy with its 95%
interval, overlap), a table of the three accuracies per split (train/val/test) with Wilson intervals,
histograms of the answer's vs the distractors' distance from the question for the RecipeQA-style
preset and every knob setting (Meta-RecipeQA Fig. 2), a knob-effect plot (accuracy per knob value with
the other knobs fixed, Fig. 5), a plot of the three context-free adversaries side by side per setting
and one of them per split. Every plot's axes are labelled; the labels are also listed in the page
(`<figure data-axes=...>`). Settings are ranked by the learned probe, or the distance probe where
higher (see `ordering_by_probe`). The numbers go to DuckDB `bias_metrics` too.

    res = build_report(con, out_dir)        # -> {"index": ".../index.html", "tasks": {...}, ...}

The only time in the output is the header's date (`generated_at`), so the same warehouse, code and
date give the same HTML.
"""
from __future__ import annotations

import html
import itertools
import json
import logging
import os
import re
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import numpy as np
from matplotlib.figure import Figure

from features.datasets.knobs import TASKS, setting_kind
from features.diagnostics.background_cue import report_cues, write_background_cue
from features.diagnostics.bias import compute_bias_metrics, write_bias_metrics
from features.diagnostics.look_probe import VISUAL_TASKS, look_rows
from features.diagnostics.order_probe import order_rows
from features.diagnostics.tree_probe import tree_rows
from features.diagnostics.words_probe import words_rows

log = logging.getLogger(__name__)
QO_KEYS = ("qo_acc", "qo_ci_low", "qo_ci_high", "qo_n_test", "qo_test_acc", "qo_test_ci_low", "qo_test_ci_high")
PNG_META = {"Software": None}          # no matplotlib version in the file: byte-stable output
TABLE_COLUMNS = [("knobs", "setting"), ("dataset_id", "dataset"), ("encoder_id", "encoder"),
                 ("n_questions", "questions"),
                 ("n_recipes", "recipes"), ("hasty_student_acc", "Hasty Student"),
                 ("probe_acc", "distance probe"), ("centre_rule_acc", "centre of the choices"),
                 ("pair_rule_acc", "closest pair (coherence)"), ("qo_acc", "learned probe (95% CI)"),
                 ("qo_test_acc", "learned probe, test split (95% CI)"),
                 ("tree_acc", "tree probe, AF datasets (95% CI)"),
                 ("look_acc", "look probe, pixels (95% CI)"), ("words_acc", "words probe, titles (95% CI)"),
                 ("words_tree_acc", "words trees, titles (95% CI)"),
                 ("order_acc", "order probe, titles' order (95% CI)"),
                 ("recipe_coverage", "recipe coverage"),
                 ("question_overlap", "question overlap (Jaccard)"), ("answer_rank_share",
                                                                     "answer distance rank 0/1/2/3")]


SPLIT_COLUMNS = [("hasty_student", "Hasty Student"), ("probe", "distance probe"),
                 ("qo", "learned question-only probe")]
SPLIT_COLOURS = {"train": "tab:blue", "val": "tab:orange", "test": "tab:green", "all": "tab:gray"}


def short_encoder(encoder_id: str | None) -> str:
    """A table-sized name of an encoder id: `<model>@<weights sha6>` for ids made by
    features.embed.encoders.make_encoder_id (`<model>-<weights sha12>-<preprocess sha8>`), the model
    part cut to 24 characters; other ids up to 24 characters as they are, longer ones cut + a hash."""
    if encoder_id is None:
        return "–"
    m = re.fullmatch(r"(.+)-([0-9a-f]{12})-([0-9a-f]{8})", encoder_id)
    if m:
        name = m[1] if len(m[1]) <= 24 else m[1][:23] + "…"
        return f"{name}@{m[2][:6]}"
    if len(encoder_id) <= 24:
        return encoder_id
    import hashlib
    return encoder_id[:17] + "…" + hashlib.sha256(encoder_id.encode()).hexdigest()[:6]


def setting_sort_key(row: dict) -> tuple:
    """By encoder; presets first, then knob settings in (k1, k2, k3) order, then variants."""
    return (str(row.get("encoder_id")), 0 if row.get("preset") else 1, str(row["knobs"]), row["dataset_id"])


def is_paper_setting(row: dict) -> bool:
    """A binary knob setting with the paper's parameters: knob 3 off or the paper's coin flip, not
    adversarially filtered, the knob-2 ball (not `-matched` foreign images nor `-kitchen` distractors), and no
    `-p<hash>` suffix on the id (parameters overridden)."""
    return (not row.get("preset") and row.get("knob1") is not None and row.get("knob2") is not None
            and row.get("knob3") is not None and row.get("k3_mode") in ("off", "coin")
            and not row.get("adversarial")
            and setting_kind(row.get("setting") or row.get("knobs")) == "ball"
            and re.search(r"-p[0-9a-f]{6}$", row["dataset_id"]) is None)


def ordering_by_probe(rows: list[dict]) -> list[dict]:
    """Settings sorted by the best context-free adversary, most biased first: the learned
    question-only probe's cross-fitted accuracy (qo_acc), or the distance probe's, the centre rule's
    (centre_rule_acc) or, on visual coherence, the closest-pair rule's (pair_rule_acc) where that is
    higher; ties by the distance probe, then the id; settings with none of them last.

    The learned probe leads because it is the stronger adversary: it is given the distance probe's
    own features (each choice's distance, its gap to the nearest, its rank) and also the choice and
    question vectors themselves, so besides the fixed-distance cue it learns a metric of its own (a
    shared kitchen or author look) that no fixed distance shows -- a setting that only fools the
    distance probe is not de-biased. Its fit can still read lower than the distance probe, notably
    on adversarially filtered datasets, whose distractors were chosen against this very model
    family; there the distance probe's figure counts, and so does the parameter-free centre rule
    (on visual coherence, where the knobs make the foreign image the centre of the four, it reads
    above both probes), and the closest-pair rule (the knob-2 ball puts the foreign image in the
    closest pair of the four in about 9 questions in 10). The figure over all questions ranks (more
    questions, narrower interval than the test split's)."""
    def key(r):
        best = best_adversary(r)[0]
        return (best is None, -(best or 0.0), -(r.get("probe_acc") or 0.0), r["dataset_id"])
    return sorted(rows, key=key)


ADVERSARIES = (("qo_acc", "learned probe"), ("probe_acc", "distance probe"), ("centre_rule_acc", "centre rule"),
               ("pair_rule_acc", "closest pair"), ("tree_acc", "tree probe"), ("look_acc", "look probe"),
               ("words_acc", "words probe"), ("words_tree_acc", "words trees"), ("order_acc", "order probe"))


def best_adversary(r: dict) -> tuple[float | None, str | None]:
    """(figure, name) of the context-free adversary that reads row r best (`ordering_by_probe`'s key);
    the first in ADVERSARIES order on a tie; (None, None) when none ran."""
    best = (None, None)
    for col, name in ADVERSARIES:
        v = r.get(col)
        if v is not None and (best[0] is None or v > best[0]):
            best = (v, name)
    return best


def _fmt(v, col: str) -> str:
    if v is None:
        return "–"
    if col in ("qo_acc", "qo_test_acc"):
        return f"{100 * v:.1f}%"
    if col in ("hasty_student_acc", "probe_acc", "centre_rule_acc", "pair_rule_acc", "recipe_coverage", "tree_acc",
               "tree_test_acc", "look_acc", "words_acc", "words_tree_acc", "order_acc"):
        return f"{100 * v:.1f}%"
    if col == "question_overlap":
        return f"{v:.3f}"
    if col == "encoder_id":
        return short_encoder(v)
    if col == "answer_rank_share":
        return " / ".join(f"{100 * x:.0f}%" for x in v)
    if isinstance(v, int):
        return f"{v:,d}"
    return str(v)


def _split_entry(r: dict, split: str = "all") -> dict:
    return next((e for e in r.get("split_metrics") or [] if e["split"] == split), {})


def with_wilson(entry: dict, metric: str, with_n: bool = False) -> str:
    """`47.5% [44.1, 50.9]` (and ` n=300`) from a split_metrics entry; `–` when not measured."""
    acc, ci = entry.get(f"{metric}_acc"), entry.get(f"{metric}_ci")
    if acc is None or ci is None:
        return "–"
    n = f" n={entry[f'{metric}_n']:,d}" if with_n else ""
    return f"{100 * acc:.1f}% [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]{n}"


def with_interval(r: dict, col: str) -> str:
    """A learned-probe accuracy with its 95% interval, e.g. `76.7% [73.0, 80.1] n=300`."""
    prefix = {"qo_test_acc": "qo_test", "tree_acc": "tree", "look_acc": "look", "words_acc": "words",
              "words_tree_acc": "words_tree", "order_acc": "order"}.get(col, "qo")
    lo, hi = r.get(f"{prefix}_ci_low"), r.get(f"{prefix}_ci_high")
    if r.get(col) is None or lo is None or hi is None:
        return _fmt(r.get(col), col)
    n = f" n={r['qo_n_test']:,d}" if col == "qo_test_acc" and r.get("qo_n_test") is not None else ""
    return f"{_fmt(r[col], col)} [{100 * lo:.1f}, {100 * hi:.1f}]{n}"


def table_rows(rows: list[dict]) -> list[dict]:
    """The report table as plain dicts (also the Prefect table artifact)."""
    def cell(r, col):
        if col in ("qo_acc", "qo_test_acc", "tree_acc", "look_acc", "words_acc", "words_tree_acc", "order_acc"):
            return with_interval(r, col)
        if col in ("hasty_student_acc", "probe_acc") and r.get("split_metrics"):
            return with_wilson(_split_entry(r), col.removesuffix("_acc"))
        return _fmt(r.get(col), col)
    return [{label: cell(r, col) for col, label in TABLE_COLUMNS} for r in sorted(rows, key=setting_sort_key)]


def split_table_rows(rows: list[dict]) -> list[dict]:
    """Per setting and split (train, val, test, all): questions and the three accuracies with their
    95% Wilson intervals and the number of questions each covers."""
    out = []
    for r in sorted(rows, key=setting_sort_key):
        for e in r.get("split_metrics") or []:
            out.append({"setting": str(r["knobs"]), "dataset": r["dataset_id"], "split": e["split"],
                        "questions": f"{e['n']:,d}",
                        **{f"{label} (95% Wilson)": with_wilson(e, m, with_n=e[f"{m}_n"] != e["n"])
                           for m, label in SPLIT_COLUMNS}})
    return out


# ----------------------------------------------------------------------------- plots

class Plot(type(Path())):
    """A written PNG (a Path) with the labels of its axes: [{"title", "x", "y"}] per panel."""
    axes: list[dict]


def save_plot(fig: Figure, path: Path) -> Plot:
    """Write the figure as PNG; refuse a panel without both axis labels (every plot is labelled)."""
    axes = [{"title": ax.get_title(), "x": ax.get_xlabel(), "y": ax.get_ylabel()} for ax in fig.axes
            if ax.get_visible() and ax.has_data()]
    unlabelled = [a["title"] or "(untitled)" for a in axes if not (a["x"].strip() and a["y"].strip())]
    if unlabelled:
        raise ValueError(f"{path.name}: panels without axis labels: {unlabelled}")
    fig.savefig(path, format="png", metadata=PNG_META)
    out = Plot(path)
    out.axes = axes
    return out


def plot_histograms(rows: list[dict], path: Path, task: str) -> Plot | None:
    """Fig. 2: distance from the question of the correct choice vs the incorrect ones, per setting."""
    rows = [r for r in sorted(rows, key=setting_sort_key)
            if r.get("_distances") is not None and len(r["_distances"].qids)]
    if not rows:
        return None
    ncols = min(3, len(rows))
    nrows = int(np.ceil(len(rows) / ncols))
    fig = Figure(figsize=(4.2 * ncols, 3.0 * nrows), dpi=80)
    allv = np.concatenate([r["_distances"].probe.ravel() for r in rows])
    lo, hi = float(np.percentile(allv, 0.5)), float(np.percentile(allv, 99.5))
    bins = np.linspace(lo, hi if hi > lo else lo + 1e-6, 31)
    xlabel = ("mean consecutive cosine distance of the ordering" if task.startswith("visual_ordering")
              else "distance from the question (coherence: from the other 3)" if task.startswith("visual_coherence")
              else "cosine distance from the question")
    for k, r in enumerate(rows):
        d = r["_distances"]
        ax = fig.add_subplot(nrows, ncols, k + 1)
        mask = np.zeros(d.probe.shape, dtype=bool)
        mask[np.arange(len(d.answers)), d.answers] = True
        # one filled outline per histogram, not a bar per bin: the same picture, drawn in 0.7x the time
        ax.hist(d.probe[~mask], bins=bins, density=True, alpha=0.55, color="tab:red", label="incorrect",
                histtype="stepfilled")
        ax.hist(d.probe[mask], bins=bins, density=True, alpha=0.55, color="tab:green", label="correct",
                histtype="stepfilled")
        probe = "–" if r["probe_acc"] is None else f"{100 * r['probe_acc']:.0f}%"
        ax.set_title(f"{r['knobs']}  (probe {probe}, n={len(d.qids)})", fontsize=9)
        ax.set_xlabel(xlabel, fontsize=7)
        ax.set_ylabel("density (per unit distance)", fontsize=7)
        ax.tick_params(labelsize=7)
        if k == 0:
            ax.legend(fontsize=7)
    fig.suptitle(f"{task}: choice distance from the question "
                 f"({'mean consecutive distance' if task == 'visual_ordering' else 'cosine'})", fontsize=10)
    fig.tight_layout()
    return save_plot(fig, path)


def knob_effects(rows: list[dict], metric: str = "probe_acc") -> dict[int, list[tuple[str, list]]]:
    """For each knob j: lines (label of the other knobs fixed, [(value, accuracy)...]) over the
    paper's binary settings; duplicates (several seeds/encoders) are averaged."""
    acc: dict[tuple, list[float]] = {}
    for r in rows:
        if is_paper_setting(r) and r.get(metric) is not None:
            acc.setdefault((int(r["knob1"]), int(r["knob2"]), int(r["knob3"])), []).append(r[metric])
    mean = {k: float(np.mean(v)) for k, v in acc.items()}
    out: dict[int, list] = {}
    for j in range(3):
        lines = []
        others = [i for i in range(3) if i != j]
        for fixed in itertools.product((0, 1), repeat=2):
            pts = []
            for v in (0, 1):
                key = [0, 0, 0]
                key[j] = v
                key[others[0]], key[others[1]] = fixed
                if tuple(key) in mean:
                    pts.append((v, mean[tuple(key)]))
            if len(pts) == 2:
                lines.append((f"k{others[0] + 1}={fixed[0]}, k{others[1] + 1}={fixed[1]}", pts))
        if lines:
            out[j + 1] = lines
    return out


def plot_knob_effects(rows: list[dict], path: Path, task: str) -> Plot | None:
    """Fig. 5: accuracy per knob value with the other knobs fixed (probe solid, Hasty Student dotted)."""
    probe, hasty = knob_effects(rows, "probe_acc"), knob_effects(rows, "hasty_student_acc")
    if not probe:
        return None
    preset = [r for r in rows if r.get("preset") and r.get("probe_acc") is not None]
    fig = Figure(figsize=(4.0 * len(probe), 3.4), dpi=80)
    colours = ["tab:blue", "tab:orange", "tab:green", "tab:purple"]
    for n, (j, lines) in enumerate(sorted(probe.items())):
        ax = fig.add_subplot(1, len(probe), n + 1)
        for c, (label, pts) in zip(colours, lines):
            ax.plot([p[0] for p in pts], [100 * p[1] for p in pts], "o-", color=c, label=label)
        for c, (_label, pts) in zip(colours, hasty.get(j, [])):
            ax.plot([p[0] for p in pts], [100 * p[1] for p in pts], "s:", color=c, alpha=0.6)
        ax.axhline(25, color="grey", lw=0.8, ls="--")
        for r in preset:
            ax.axhline(100 * r["probe_acc"], color="black", lw=0.8, ls="-.")
        ax.set_xticks([0, 1])
        ax.set_xlabel(f"knob {j} value")
        ax.set_ylabel("accuracy (%)")
        ax.set_ylim(0, 100)
        ax.set_title(f"knob {j} (other knobs fixed)", fontsize=9)
        ax.legend(fontsize=6, loc="upper right")
    fig.suptitle(f"{task}: probe (solid) and Hasty Student (dotted); dashed = chance, "
                 f"dash-dot = RecipeQA-style probe", fontsize=9)
    fig.tight_layout()
    return save_plot(fig, path)


def plot_adversaries(rows: list[dict], path: Path, task: str) -> Plot | None:
    """Per setting, the context-free adversaries side by side: Hasty Student, distance probe, and the
    learned question-only probe over all questions and over the test split (95% bootstrap-by-recipe
    intervals as error bars); dashed line = chance."""
    rows = [r for r in sorted(rows, key=setting_sort_key)
            if any(r.get(c) is not None for c in ("hasty_student_acc", "probe_acc", "qo_acc"))]
    if not rows:
        return None
    bars = [("hasty_student_acc", None, "Hasty Student", "tab:gray"),
            ("probe_acc", None, "distance probe", "tab:blue"),
            ("qo_acc", "qo", "learned probe (all)", "tab:red"),
            ("qo_test_acc", "qo_test", "learned probe (test split)", "tab:orange")]
    x = np.arange(len(rows))
    width = 0.2
    fig = Figure(figsize=(max(6.0, 0.9 * len(rows) + 2), 3.6), dpi=80)
    ax = fig.add_subplot(1, 1, 1)
    for k, (col, ci, label, colour) in enumerate(bars):
        v = np.array([np.nan if r.get(col) is None else 100 * r[col] for r in rows])
        err = None
        if ci:
            lo = np.array([np.nan if r.get(f"{ci}_ci_low") is None else 100 * r[f"{ci}_ci_low"] for r in rows])
            hi = np.array([np.nan if r.get(f"{ci}_ci_high") is None else 100 * r[f"{ci}_ci_high"] for r in rows])
            err = np.nan_to_num(np.vstack([v - lo, hi - v]))
        ax.bar(x + (k - 1.5) * width, np.nan_to_num(v), width, yerr=err, capsize=2, color=colour, label=label)
    _setting_axes(ax, rows)
    ax.legend(fontsize=6, loc="upper right", ncol=2)
    ax.set_title(f"{task}: context-free adversaries per setting (dashed = chance)", fontsize=9)
    fig.tight_layout()
    return save_plot(fig, path)


def _setting_axes(ax, rows: list[dict]) -> None:
    """The shared frame of the per-setting accuracy plots: the settings on x, accuracy (%) on y,
    0-100, a dashed line at chance."""
    ax.axhline(100 * float(rows[0].get("chance") or 0.25), color="black", lw=0.8, ls="--")
    ax.set_xticks(np.arange(len(rows)))
    ax.set_xticklabels([str(r["knobs"]) for r in rows], rotation=30, ha="right", fontsize=7)
    ax.set_xlabel("setting")
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 100)


def plot_splits(rows: list[dict], path: Path, task: str) -> Plot | None:
    """One panel per diagnostic (Hasty Student, distance probe, learned probe): accuracy per setting
    and split (train / val / test bars) with 95% Wilson intervals as error bars; dashed = chance."""
    rows = [r for r in sorted(rows, key=setting_sort_key) if r.get("split_metrics")]
    if not rows:
        return None
    splits = [s for s in ("train", "val", "test") if any(_split_entry(r, s) for r in rows)]
    x = np.arange(len(rows))
    width = 0.8 / max(1, len(splits))
    fig = Figure(figsize=(max(6.0, 0.6 * len(rows) + 2) * 1.0, 3.2 * len(SPLIT_COLUMNS)), dpi=80)
    for n, (metric, label) in enumerate(SPLIT_COLUMNS):
        ax = fig.add_subplot(len(SPLIT_COLUMNS), 1, n + 1)
        for k, split in enumerate(splits):
            entries = [_split_entry(r, split) for r in rows]
            v = np.array([np.nan if e.get(f"{metric}_acc") is None else 100 * e[f"{metric}_acc"] for e in entries])
            lo = np.array([np.nan if not e.get(f"{metric}_ci") else 100 * e[f"{metric}_ci"][0] for e in entries])
            hi = np.array([np.nan if not e.get(f"{metric}_ci") else 100 * e[f"{metric}_ci"][1] for e in entries])
            ax.bar(x + (k - (len(splits) - 1) / 2) * width, np.nan_to_num(v), width,
                   yerr=np.nan_to_num(np.vstack([v - lo, hi - v])), capsize=2, color=SPLIT_COLOURS[split],
                   label=split)
        _setting_axes(ax, rows)
        ax.set_title(f"{label}: accuracy per split, 95% Wilson intervals (dashed = chance)", fontsize=9)
        ax.legend(fontsize=6, loc="upper right", ncol=len(splits))
    fig.suptitle(task, fontsize=10)
    fig.tight_layout()
    return save_plot(fig, path)


# ----------------------------------------------------------------------------- HTML

CSS = """body{font-family:sans-serif;margin:2em;max-width:1300px;color:#222}
header dl{display:grid;grid-template-columns:max-content auto;gap:2px 1em;font-size:14px}
header dt{font-weight:bold}header dd{margin:0}figure{margin:1em 0}figcaption{color:#555;font-size:12px}
table{border-collapse:collapse;margin:1em 0;font-size:13px}th,td{border:1px solid #bbb;padding:3px 8px;text-align:right}
th{background:#eee}td:nth-child(1),td:nth-child(2){text-align:left;font-family:monospace}
img{max-width:100%;border:1px solid #ddd;margin:0.5em 0}.note{color:#555;font-size:13px}"""


def _html_table(rows: list[dict], cls: str) -> str:
    if not rows:
        return "<p>no datasets</p>"
    head = "".join(f"<th>{html.escape(k)}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in r.values()) + "</tr>"
                   for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def git_commit(repo: Path | None = None) -> str:
    """The code's git commit (12 hex digits, `+ uncommitted changes` when the tracked files differ from
    it), or `unknown` outside a git checkout or without git."""
    repo = repo or Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (sha + (" + uncommitted changes" if dirty else "")) if sha else "unknown"


def corpus_counts(con: duckdb.DuckDBPyConnection, dataset_ids: list[str]) -> dict:
    """What the report measured on: ok recipes, their steps, ok images, and the reported datasets'
    questions."""
    recipes, steps = con.execute("""SELECT count(DISTINCT r.recipe_id), count(s.recipe_id) FROM recipes r
                                    LEFT JOIN steps s USING (recipe_id) WHERE r.status = 'ok'""").fetchall()[0]
    images = con.execute("""SELECT count(*) FROM images i JOIN recipes r USING (recipe_id)
                            WHERE i.status = 'ok' AND r.status = 'ok'""").fetchall()[0][0]
    questions = con.execute("SELECT count(*) FROM questions WHERE dataset_id IN (SELECT unnest(?))",
                            [dataset_ids]).fetchall()[0][0]
    return {"recipes": recipes, "steps": steps, "images": images, "questions": questions,
            "datasets": len(dataset_ids)}


def find_export(con: duckdb.DuckDBPyConnection, exports: Path, dataset_ids: list[str],
                given: Path | None = None) -> tuple[Path | None, str | None]:
    """The Parquet export the report links and what to say of it, each export checked against the warehouse
    by its datasets' content hashes (features/datasets/export.py export_freshness): `given` as it is, else
    of the folders of `exports` holding questions/ (not one being written) the one holding the most of the
    reported `dataset_ids` as the warehouse has them (`all` first, then the newest, on a tie), and none
    lacking a side file. The note says how many it holds, what of it is stale (datasets generated or
    filtered again since it was written, or gone from the warehouse), and which exports it passed over;
    (None, why) when no export holds a reported dataset as it is."""
    from features.datasets.export import WRITING_PREFIX, export_freshness
    if given is not None:
        found = [Path(given)] if Path(given).is_dir() else []
    elif exports.is_dir():
        found = sorted((p for p in exports.iterdir()
                        if not p.name.startswith(WRITING_PREFIX) and (p / "questions").is_dir()),
                       key=lambda p: (p.name != "all", -p.stat().st_mtime, p.name))
    else:
        found = []
    wanted, seen, skipped = set(dataset_ids), [], []
    for cand in found:
        try:
            fr = export_freshness(con, cand)
        except ValueError as e:
            skipped.append(f"{cand.name}: {e}")
            continue
        stale = [f"{len(fr[k])} {w} ({', '.join(fr[k][:3])}{', ...' if len(fr[k]) > 3 else ''})"
                 for k, w in (("changed", "generated or filtered again since"),
                              ("gone", "no longer in the warehouse")) if fr[k]]
        if fr["missing"]:
            stale.append(f"no {', '.join(fr['missing'])}")
            if given is None:
                skipped.append(f"{cand.name} is incomplete ({'; '.join(stale)})")
                continue
        seen.append((cand, len(set(fr["current"]) & wanted), stale))
    usable = [x for x in seen if x[1] or given is not None]
    if not usable:
        why = skipped + [f"{c.name} is stale ({'; '.join(st)})" for c, _, st in seen]
        return None, (f"none current: {'; '.join(why)} (`mrqa export --all` writes it again)" if why else None)
    cand, holds, stale = max(usable, key=lambda x: x[1])          # the first of the most: all, then the newest
    note = f"holds {holds:,d} of the {len(dataset_ids):,d} datasets reported as they are"
    if stale:
        note += f"; stale: {'; '.join(stale)} (`mrqa export` writes it again)"
    passed = skipped + [f"{c.name} ({h:,d})" for c, h, _ in seen if c != cand]
    if passed:
        note += f"; passed over: {'; '.join(passed)}"
    return cand, note


def report_header(con: duckdb.DuckDBPyConnection, metrics: list[dict], out_dir: Path, model: str, seed: int,
                  generated_at: str | None = None, commit: str | None = None,
                  export_dir: Path | None = None, export_note: str | None = None) -> dict:
    """The header's facts: date (UTC, `generated_at` or today), commit (`git_commit`), encoders (short
    name and id), corpus counts, the export folder and its dataset card (README.md) as links relative to
    the report folder, and what was measured."""
    encoders = sorted({str(m["encoder_id"]) for m in metrics})
    export = None
    if export_dir is not None and Path(export_dir).is_dir():
        export_dir = Path(export_dir).resolve()
        card = export_dir / "README.md"
        export = {"path": str(export_dir), "href": os.path.relpath(export_dir, Path(out_dir).resolve()) + "/",
                  "card": os.path.relpath(card, Path(out_dir).resolve()) if card.is_file() else None,
                  "note": export_note}
    elif export_note:
        export = {"path": None, "note": export_note}
    return {"date": generated_at or datetime.now(UTC).date().isoformat(),
            "commit": commit or git_commit(),
            "encoders": [{"short": short_encoder(e), "id": e} for e in encoders],
            "corpus": corpus_counts(con, [m["dataset_id"] for m in metrics]),
            "export": export,
            "measured": (f"Hasty Student; distance probe ({model}, 5 folds by recipe, seed {seed}); learned "
                         f"question-only probe (conditional logit, 5 folds by recipe, seed {seed}); per dataset "
                         "over all questions and per split (train/val/test), with 95% Wilson intervals")}


def render_header(h: dict) -> str:
    c = h["corpus"]
    enc = "; ".join(f"<b>{html.escape(e['short'])}</b> (<code>{html.escape(e['id'])}</code>)" for e in h["encoders"])
    if h["export"] and h["export"]["path"]:
        e = h["export"]
        export = f"<a href='{html.escape(e['href'])}'>{html.escape(e['path'])}</a>"
        export += (f"; dataset card <a href='{html.escape(e['card'])}'>README.md</a>" if e["card"]
                   else "; no dataset card (README.md) in it")
        export += f"; {html.escape(e['note'])}" if e.get("note") else ""
    elif h["export"]:
        export = html.escape(h["export"]["note"])
    else:
        export = "none found (write one with <code>mrqa export --all</code>)"
    rows = [("date", html.escape(h["date"])), ("code", f"git commit <code>{html.escape(h['commit'])}</code>"),
            ("encoder", enc or "–"),
            ("corpus", f"{c['recipes']:,d} recipes, {c['steps']:,d} steps, {c['images']:,d} images; "
                       f"{c['questions']:,d} questions in {c['datasets']:,d} datasets"),
            ("export", export), ("measured", html.escape(h["measured"]))]
    body = "".join(f"<dt>{k}</dt><dd class='{k}'>{v}</dd>" for k, v in rows)
    return f"<header id='report-header'><dl>{body}</dl></header>"


def render_figure(name: str, alt: str, axes: list[dict]) -> str:
    """An <img> in a <figure> that lists its panels' axis labels (data-axes JSON and a caption)."""
    cap = "; ".join(f"{a['title'] or 'panel'}: x = {a['x']}, y = {a['y']}" for a in axes[:3])
    if len(axes) > 3:
        cap += f"; and {len(axes) - 3} more panels with the same axes"
    return (f"<figure data-axes='{html.escape(json.dumps(axes), quote=True)}'><img src='{html.escape(name)}' "
            f"alt='{html.escape(alt)}'><figcaption>Axes: {html.escape(cap)}</figcaption></figure>")


def render_cue(cues: list[dict]) -> str:
    """The background cue's section: per space, the mean cosine of the three kinds of photo pairs and the
    kind of each photo's nearest neighbour against chance."""
    rows = []
    for c in cues:
        name = c["space"] if not c.get("encoder_id") else f"{c['space']} ({short_encoder(c['encoder_id'])})"
        row = {"space": name, "photos": c["n_photos"], "recipes": c["n_recipes"], "authors": c["n_authors"]}
        for k, label in (("same_recipe", "same recipe"), ("same_author", "same author"),
                         ("other_author", "other authors")):
            cos, nn, ch = c.get(f"cos_{k}"), c.get(f"nn_{k}"), c.get(f"chance_{k}")
            row[f"mean cosine, {label}"] = "–" if cos is None else f"{cos:.3f}"
            row[f"nearest photo, {label} (chance)"] = ("–" if nn is None else
                                                       f"{100 * nn:.1f}% ({100 * ch:.1f}%)")
        rows.append(row)
    return ("<h2 id='background-cue'>background cue: same recipe, same author, other authors</h2>"
            "<p class='note'>How much more alike two photos are when they share a recipe (different steps) or "
            "an author (different recipes) than when their authors differ: the mean cosine of every such pair, "
            "and how often a photo's nearest other photo (not of its step) is of each kind, against the share "
            "a random pick from the same photos would give. <b>look</b>: the look probe's pixel statistics; "
            "<b>encoder</b>: the encoder's image vectors, the space the knobs and AF filter in.</p>"
            + _html_table(rows, "cue"))


def render_html(tasks: dict[str, dict], header: dict | None = None, competence: list[dict] | None = None,
                cues: list[dict] | None = None) -> str:
    parts = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
             "<title>Meta-RecipeQA bias report</title>", f"<style>{CSS}</style></head><body>",
             "<h1>Meta-RecipeQA bias report</h1>", render_header(header) if header else "",
             ("<p class='note'>Chance is 25% (4 choices). <b>Hasty Student</b>: context-free pick by "
             "distance (cloze: the choice closest on average to the question; coherence: the image most "
             "dissimilar to the others; ordering: the smoothest sequence). <b>Distance probe</b>: logistic "
             "regression on each choice's distance from the question (value, gap to the nearest, rank), "
             "5-fold cross-validated by recipe. <b>Learned probe</b>: a conditional logit on the frozen "
             "vectors of the question and the choices (never the recipe text) plus the distance probe's "
             "features, so it learns its own metric on top of the fixed distances; "
             "every question is scored by a model fitted on other recipes (5-fold GroupKFold by recipe); "
             "over all questions and over the test split, with 95% intervals from a bootstrap that "
             "resamples recipes, widened to the Wilson interval where that is wider. Settings are ranked "
             "by it (the stronger adversary), or by the distance probe where that reads higher. "
             "<b>Per split</b>: the three accuracies on the train, val and test questions (and all), each "
             "with its 95% Wilson score interval (questions as independent draws). "
             "<b>Recipe coverage</b>: share of a recipe's steps its "
             "questions show; <b>question overlap</b>: mean pairwise Jaccard of their step sets. "
             "<b>Answer distance rank</b>: how often the answer is the nearest / 2nd / 3rd / farthest "
             "choice.</p>"), "<ul>"]
    parts += [f"<li><a href='#{t}'>{t}</a></li>" for t in tasks]
    if cues:
        parts.append("<li><a href='#background-cue'>background cue</a></li>")
    if competence:
        parts.append("<li><a href='#competence'>competence families</a></li>")
    parts.append("</ul>")
    for task, info in tasks.items():
        parts.append(f"<h2 id='{task}'>{task}</h2>")
        parts.append(_html_table(info["table"], "metrics"))
        parts.append(f"<h3>{task}: per split</h3>")
        parts.append(_html_table(info.get("split_table") or [], "splits"))
        for enc, ordering in info["ordering"].items():
            order = " &gt; ".join(f"{html.escape(str(r['knobs']))} ({_fmt(v, 'qo_acc')}{', ' + name if name else ''})"
                                  for r in ordering for v, name in [best_adversary(r)])
            parts.append(f"<p class='note'>Settings by the context-free adversary that reads them best (the "
                         f"learned, distance, tree or look probe, the centre or closest-pair rule; most biased "
                         f"first), encoder "
                         f"<b title='{html.escape(str(enc))}'>{html.escape(short_encoder(enc))}</b>: {order}</p>")
        for name in info["plots"]:
            alt = {"knobs_": "knob effect plot", "adversaries_": "adversaries per setting",
                   "splits_": "accuracy per split"}.get(name.split("_")[0] + "_", "choice distance histograms")
            parts.append(render_figure(name, f"{task} {alt}", info.get("axes", {}).get(name, [])))
    if cues:
        parts.append(render_cue(cues))
    if competence:
        parts.append("<h2 id='competence'>competence families (R2VQ-style, open answers)</h2>")
        parts.append("<p class='note'>Exact match / token F1 (%, SQuAD normalisation) on the test split. "
                     "<b>Answer prior</b>: the most frequent train answer of the question's template; "
                     "<b>question-only</b>: a bag-of-words classifier on the question text; <b>context-only</b>: "
                     "the recipe's most frequent entity; <b>reader</b>: role lookup in the recipe's own steps, "
                     "and in another recipe's steps. Flagged: a baseline gets more than 40% EM.</p>")
        parts.append(_html_table(competence, "competence"))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def check_out_dir(out_dir: Path) -> Path:
    """Only ever replace a previous report (html + png files), never a user's folder."""
    if out_dir.exists():
        if not out_dir.is_dir():
            raise ValueError(f"refusing to replace {out_dir}: it is a file; choose another --out")
        foreign = [x.name for x in out_dir.iterdir() if not (x.is_file() and x.suffix in (".html", ".png"))]
        if foreign:
            raise ValueError(f"refusing to replace {out_dir}: it holds more than a report "
                             f"({', '.join(sorted(foreign)[:3])}); choose another --out")
    return out_dir


def build_report(con: duckdb.DuckDBPyConnection, out_dir: Path, dataset_ids: list[str] | None = None,
                 lance_uri: str | None = None, seed: int = 0, model: str = "logreg",
                 progress: bool = True, generated_at: str | None = None, commit: str | None = None,
                 export_dir: Path | None = None, home: Path | None = None,
                 plot_workers: int | None = None) -> dict:
    """Compute the bias metrics, store them in bias_metrics, write out_dir/index.html + PNGs.
    `generated_at` (the header's date; default today, UTC), `commit` (default `git_commit()`),
    `export_dir` (the export to link, checked against the warehouse; default `find_export`'s pick of
    MRQA_HOME/exports: the first export holding no dataset older than the warehouse's).
    Returns {out, index, images, n_datasets, header, tasks: {task: {rows, table, split_table, ordering,
    plots, axes}}}."""
    out_dir = check_out_dir(Path(out_dir))
    if lance_uri is None:
        from etl.config import Paths
        lance_uri = Paths.from_env().lance
    metrics = compute_bias_metrics(con, dataset_ids, lance_uri=lance_uri, seed=seed, model=model,
                                   progress=progress, keep_distances=True, keep_resolved=True)
    if home is None:
        from etl.config import Paths
        home = Paths.from_env().home
    from training.procs import kept_processes
    with kept_processes():          # the probes' and the plots' jobs share 2 processes instead of starting 5 pools
        tree_rows(con, metrics, lance_uri, seed)                        # the tree probe on the AF datasets
        look = look_rows(con, metrics, Path(home), seed, progress=progress)  # the look probe: the photos' pixels
        words_rows(con, metrics, seed)                                  # the words probe: the titles' own words
        order_rows(con, metrics, seed)                                  # the order probe: the corpus's title order
        # the background cue (same recipe, same author, other authors) in the look space and each encoder's
        visual = [m for m in metrics if m["task"] in VISUAL_TASKS and m.get("encoder_id")]
        cues = report_cues(con, look, lance_uri, sorted({str(m["encoder_id"]) for m in visual}),
                           {str(m["encoder_id"]): m["_lookup"] for m in visual if m.get("_lookup") is not None})
        return _store_and_render(con, out_dir, metrics, model, seed, generated_at, commit, export_dir, plot_workers,
                                 cues)


def _store_and_render(con: duckdb.DuckDBPyConnection, out_dir: Path, metrics: list[dict], model: str, seed: int,
                      generated_at: str | None, commit: str | None, export_dir: Path | None,
                      plot_workers: int | None, cues: list | None = None) -> dict:
    """`build_report`'s second half: store the metrics (and the background cue), draw the plots, write the HTML."""
    for m in metrics:
        m.pop("_resolved", None)
        m.pop("_lookup", None)
    if not metrics:
        raise LookupError("no datasets to report on; run `mrqa generate --all` first")
    write_bias_metrics(con, [{k: v for k, v in m.items() if k != "_distances"} for m in metrics])
    cues = list(cues or [])
    if cues:
        write_background_cue(con, cues)
    from etl.config import Paths
    export_dir, export_note = find_export(con, Paths.from_env().exports, [m["dataset_id"] for m in metrics],
                                          export_dir)
    if export_note:
        log.info("report: export %s: %s", export_dir or "none", export_note)
    header = report_header(con, metrics, out_dir, model, seed, generated_at, commit, export_dir, export_note)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    tasks: dict[str, dict] = {}
    images = []
    task_names = [t for t in TASKS if any(m["task"] == t for m in metrics)]
    drawn = draw_plots(metrics, task_names, out_dir, plot_workers)
    for task in task_names:
        rows = [m for m in metrics if m["task"] == task]
        encoders = sorted({str(r["encoder_id"]) for r in rows})
        plots, ordering, axes = [], {}, {}
        for enc in encoders:
            group = [r for r in rows if str(r["encoder_id"]) == enc]
            got = [p for p in drawn[(task, enc)] if p]
            plots += [p.name for p in got]
            axes.update({p.name: p.axes for p in got})
            ordering[enc] = [{"knobs": r["knobs"], "dataset_id": r["dataset_id"], "probe_acc": r["probe_acc"],
                              "hasty_student_acc": r["hasty_student_acc"], "centre_rule_acc": r.get("centre_rule_acc"),
                              "pair_rule_acc": r.get("pair_rule_acc"), "tree_acc": r.get("tree_acc"),
                              "look_acc": r.get("look_acc"), "words_acc": r.get("words_acc"),
                              "words_tree_acc": r.get("words_tree_acc"), "order_acc": r.get("order_acc"),
                              **{k: r.get(k) for k in QO_KEYS}}
                             for r in ordering_by_probe(group)]
        images += [out_dir / p for p in plots]
        clean = [{k: v for k, v in r.items() if k != "_distances"} for r in rows]
        tasks[task] = {"rows": clean, "table": table_rows(clean), "split_table": split_table_rows(clean),
                       "ordering": ordering, "plots": plots, "axes": axes}
    from features.competence.report import html_rows, stored_results
    competence = stored_results(con)
    index = out_dir / "index.html"
    index.write_text(render_html(tasks, header, html_rows(competence), [c.as_row() for c in cues]),
                     encoding="utf-8")
    log.info("report: %d datasets, %d plots -> %s", len(metrics), len(images), index)
    return {"out": str(out_dir), "index": str(index), "images": [str(p) for p in images],
            "n_datasets": len(metrics), "header": header, "tasks": tasks, "competence": competence,
            "background_cue": [c.as_row() for c in cues]}


PLOT_PROCESSES_FROM = 20
PLOTS = {"hist": plot_histograms, "knobs": plot_knob_effects, "adversaries": plot_adversaries, "splits": plot_splits}


def _draw(job: tuple) -> tuple[str, list[dict]] | None:
    """One plot (a process pool's unit of work): (file name, panel labels), or None when it has nothing
    to show. A Plot's `axes` would not survive pickling, so they travel apart."""
    kind, group, path, label = job
    got = PLOTS[kind](group, Path(path), label)
    return None if got is None else (got.name, got.axes)


def draw_plots(metrics: list[dict], task_names: list[str], out_dir: Path, workers: int | None = None
               ) -> dict[tuple[str, str], list[Plot | None]]:
    """Every task's and encoder's 4 plots (histograms, knob effects, adversaries, splits), written to
    out_dir: {(task, encoder): [Plot or None, in that order]}. matplotlib holds the GIL, so the 16 plots
    of the demo's report are drawn in `workers` spawned processes (default: the CPU count, at most 4, from
    `PLOT_PROCESSES_FROM` datasets on; in turn with 1); each PNG's bytes are the same either way."""
    jobs, keys = [], []
    for task in task_names:
        rows = [m for m in metrics if m["task"] == task]
        encoders = sorted({str(r["encoder_id"]) for r in rows})
        for enc in encoders:
            group = [r for r in rows if str(r["encoder_id"]) == enc]
            tag = task if len(encoders) == 1 else f"{task}_{_slug(enc)}"
            label = f"{task} [{short_encoder(enc)}]"
            for kind in PLOTS:
                jobs.append((kind, group, str(out_dir / f"{kind}_{tag}.png"), label))
                keys.append((task, enc))
    if workers is None:                 # a spawned process costs about 2 s: worth it from about 20 datasets
        workers = min(4, os.cpu_count() or 1) if len(metrics) >= PLOT_PROCESSES_FROM else 1
    workers = max(1, min(len(jobs), workers))
    if workers <= 1:
        done = [_draw(j) for j in jobs]
    else:
        from training.procs import spawn_map
        # the heavy histograms first, so the light plots fill in behind them
        order = sorted(range(len(jobs)), key=lambda i: jobs[i][0] != "hist")
        got = dict(zip(order, spawn_map(_draw, [jobs[i] for i in order], workers)))
        done = [got[i] for i in range(len(jobs))]
    out: dict[tuple[str, str], list[Plot | None]] = {}
    for key, d in zip(keys, done):
        plot = None
        if d is not None:
            plot = Plot(out_dir / d[0])
            plot.axes = d[1]
        out.setdefault(key, []).append(plot)
    return out


def _slug(s: str) -> str:
    """A file-name-safe short tag of an encoder id (readable prefix + hash)."""
    import hashlib
    import re
    return re.sub(r"[^A-Za-z0-9]+", "-", s)[:16].strip("-") + "-" + hashlib.sha256(s.encode()).hexdigest()[:6]


def format_ordering(tasks: dict[str, dict]) -> list[str]:
    """Printable lines: per task and encoder, settings in `ordering_by_probe` order (most biased
    first): the learned probe over all questions and on the test split with its 95% interval, the
    distance probe, the Hasty Student and the centre-of-the-choices rule."""
    lines = []
    for task, info in tasks.items():
        for enc, ordering in info["ordering"].items():
            lines.append(f"{task} (encoder {enc}):")
            lines += [f"  {r['knobs']!s:17s} learned {_fmt(r.get('qo_acc'), 'qo_acc'):>6s}  "
                      f"test {with_interval(r, 'qo_test_acc'):28s}  probe {_fmt(r['probe_acc'], 'probe_acc'):>6s}  "
                      f"hasty {_fmt(r['hasty_student_acc'], 'hasty_student_acc'):>6s}  "
                      f"centre {_fmt(r.get('centre_rule_acc'), 'centre_rule_acc'):>6s}  "
                      + (f"pair {_fmt(r.get('pair_rule_acc'), 'pair_rule_acc'):>6s}  " if task == "visual_coherence"
                         else "")
                      + (f"tree {_fmt(r.get('tree_acc'), 'tree_acc'):>6s}  " if r.get("tree_acc") is not None else "")
                      + (f"look {_fmt(r.get('look_acc'), 'look_acc'):>6s}  " if r.get("look_acc") is not None else "")
                      + (f"words {_fmt(r.get('words_acc'), 'words_acc'):>6s} / "
                         f"{_fmt(r.get('words_tree_acc'), 'words_tree_acc'):>6s}  " if r.get("words_acc") is not None
                         else "")
                      + (f"order {_fmt(r.get('order_acc'), 'order_acc'):>6s}  " if r.get("order_acc") is not None
                         else "")
                      + r["dataset_id"]
                      for r in ordering]
    return lines
