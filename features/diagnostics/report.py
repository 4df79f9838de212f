"""The benchmark bias report: one static folder, index.html + PNG plots (matplotlib Agg).

Per task: a table of datasets x (questions, recipes, Hasty Student accuracy, distance-probe accuracy,
learned question-only probe accuracy with its 95% interval, overlap), histograms of the answer's vs
the distractors' distance from the question for the RecipeQA-style preset and every knob setting
(Meta-RecipeQA Fig. 2), a knob-effect plot (accuracy per knob value with the other knobs fixed,
Fig. 5), and a plot of the three context-free adversaries side by side per setting. Settings are
ranked by the learned probe, or the distance probe where higher (see `ordering_by_probe`). The numbers go to
DuckDB `bias_metrics` too.

    res = build_report(con, out_dir)        # -> {"index": ".../index.html", "tasks": {...}, ...}

The output has no timestamps, so the same warehouse gives the same HTML.
"""
from __future__ import annotations

import html
import itertools
import logging
import re
import shutil
from pathlib import Path

import duckdb
import numpy as np
from matplotlib.figure import Figure

from features.datasets.knobs import TASKS
from features.diagnostics.bias import compute_bias_metrics, write_bias_metrics

log = logging.getLogger(__name__)
QO_KEYS = ("qo_acc", "qo_ci_low", "qo_ci_high", "qo_n_test", "qo_test_acc", "qo_test_ci_low", "qo_test_ci_high")
PNG_META = {"Software": None}          # no matplotlib version in the file: byte-stable output
TABLE_COLUMNS = [("knobs", "setting"), ("dataset_id", "dataset"), ("encoder_id", "encoder"),
                 ("n_questions", "questions"),
                 ("n_recipes", "recipes"), ("hasty_student_acc", "Hasty Student"),
                 ("probe_acc", "distance probe"), ("qo_acc", "learned probe (95% CI)"),
                 ("qo_test_acc", "learned probe, test split (95% CI)"), ("recipe_coverage", "recipe coverage"),
                 ("question_overlap", "question overlap (Jaccard)"), ("answer_rank_share",
                                                                     "answer distance rank 0/1/2/3")]


def setting_sort_key(row: dict) -> tuple:
    """By encoder; presets first, then knob settings in (k1, k2, k3) order, then variants."""
    return (str(row.get("encoder_id")), 0 if row.get("preset") else 1, str(row["knobs"]), row["dataset_id"])


def is_paper_setting(row: dict) -> bool:
    """A binary knob setting with the paper's parameters: knob 3 off or the paper's coin flip, not
    adversarially filtered, and no `-p<hash>` suffix on the id (parameters overridden)."""
    return (not row.get("preset") and row.get("knob1") is not None and row.get("knob2") is not None
            and row.get("knob3") is not None and row.get("k3_mode") in ("off", "coin")
            and not row.get("adversarial") and re.search(r"-p[0-9a-f]{6}$", row["dataset_id"]) is None)


def ordering_by_probe(rows: list[dict]) -> list[dict]:
    """Settings sorted by the best context-free adversary, most biased first: the learned
    question-only probe's cross-fitted accuracy (qo_acc), or the distance probe's where that is
    higher; ties by the distance probe, then the id; settings with neither last.

    The learned probe leads because it is the stronger adversary: it is given the distance probe's
    own features (each choice's distance, its gap to the nearest, its rank) and also the choice and
    question vectors themselves, so besides the fixed-distance cue it learns a metric of its own (a
    shared kitchen or author look) that no fixed distance shows -- a setting that only fools the
    distance probe is not de-biased. Its fit can still read lower than the distance probe, notably
    on adversarially filtered datasets, whose distractors were chosen against this very model
    family; there the distance probe's figure counts. The figure over all questions ranks (more
    questions, narrower interval than the test split's)."""
    def key(r):
        qo, pr = r.get("qo_acc"), r.get("probe_acc")
        best = max((v for v in (qo, pr) if v is not None), default=None)
        return (best is None, -(best or 0.0), -(pr or 0.0), r["dataset_id"])
    return sorted(rows, key=key)


def _fmt(v, col: str) -> str:
    if v is None:
        return "–"
    if col in ("qo_acc", "qo_test_acc"):
        return f"{100 * v:.1f}%"
    if col in ("hasty_student_acc", "probe_acc", "recipe_coverage"):
        return f"{100 * v:.1f}%"
    if col == "question_overlap":
        return f"{v:.3f}"
    if col == "encoder_id":
        return v if len(v) <= 24 else v[:21] + "..."
    if col == "answer_rank_share":
        return " / ".join(f"{100 * x:.0f}%" for x in v)
    if isinstance(v, int):
        return f"{v:,d}"
    return str(v)


def with_interval(r: dict, col: str) -> str:
    """A learned-probe accuracy with its 95% interval, e.g. `76.7% [73.0, 80.1] n=300`."""
    prefix = "qo_test" if col == "qo_test_acc" else "qo"
    lo, hi = r.get(f"{prefix}_ci_low"), r.get(f"{prefix}_ci_high")
    if r.get(col) is None or lo is None or hi is None:
        return _fmt(r.get(col), col)
    n = f" n={r['qo_n_test']:,d}" if col == "qo_test_acc" and r.get("qo_n_test") is not None else ""
    return f"{_fmt(r[col], col)} [{100 * lo:.1f}, {100 * hi:.1f}]{n}"


def table_rows(rows: list[dict]) -> list[dict]:
    """The report table as plain dicts (also the Prefect table artifact)."""
    return [{label: with_interval(r, col) if col in ("qo_acc", "qo_test_acc") else _fmt(r.get(col), col)
             for col, label in TABLE_COLUMNS}
            for r in sorted(rows, key=setting_sort_key)]


# ----------------------------------------------------------------------------- plots

def plot_histograms(rows: list[dict], path: Path, task: str) -> Path | None:
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
    for k, r in enumerate(rows):
        d = r["_distances"]
        ax = fig.add_subplot(nrows, ncols, k + 1)
        mask = np.zeros(d.probe.shape, dtype=bool)
        mask[np.arange(len(d.answers)), d.answers] = True
        ax.hist(d.probe[~mask], bins=bins, density=True, alpha=0.55, color="tab:red", label="incorrect")
        ax.hist(d.probe[mask], bins=bins, density=True, alpha=0.55, color="tab:green", label="correct")
        probe = "–" if r["probe_acc"] is None else f"{100 * r['probe_acc']:.0f}%"
        ax.set_title(f"{r['knobs']}  (probe {probe}, n={len(d.qids)})", fontsize=9)
        ax.tick_params(labelsize=7)
        if k == 0:
            ax.legend(fontsize=7)
    fig.suptitle(f"{task}: choice distance from the question "
                 f"({'mean consecutive distance' if task == 'visual_ordering' else 'cosine'})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, format="png", metadata=PNG_META)
    return path


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


def plot_knob_effects(rows: list[dict], path: Path, task: str) -> Path | None:
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
        ax.set_xlabel(f"knob {j}")
        ax.set_ylabel("accuracy (%)")
        ax.set_ylim(0, 100)
        ax.set_title(f"knob {j} (other knobs fixed)", fontsize=9)
        ax.legend(fontsize=6, loc="upper right")
    fig.suptitle(f"{task}: probe (solid) and Hasty Student (dotted); dashed = chance, "
                 f"dash-dot = RecipeQA-style probe", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, format="png", metadata=PNG_META)
    return path


def plot_adversaries(rows: list[dict], path: Path, task: str) -> Path | None:
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
    ax.axhline(100 * float(rows[0].get("chance") or 0.25), color="black", lw=0.8, ls="--")
    ax.set_xticks(x)
    ax.set_xticklabels([str(r["knobs"]) for r in rows], rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=6, loc="upper right", ncol=2)
    ax.set_title(f"{task}: context-free adversaries per setting (dashed = chance)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, format="png", metadata=PNG_META)
    return path


# ----------------------------------------------------------------------------- HTML

CSS = """body{font-family:sans-serif;margin:2em;max-width:1300px;color:#222}
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


def render_html(tasks: dict[str, dict]) -> str:
    parts = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
             "<title>Meta-RecipeQA bias report</title>", f"<style>{CSS}</style></head><body>",
             "<h1>Meta-RecipeQA bias report</h1>",
             ("<p class='note'>Chance is 25% (4 choices). <b>Hasty Student</b>: context-free pick by "
             "distance (cloze: the choice closest on average to the question; coherence: the image most "
             "dissimilar to the others; ordering: the smoothest sequence). <b>Distance probe</b>: logistic "
             "regression on each choice's distance from the question (value, gap to the nearest, rank), "
             "5-fold cross-validated by recipe. <b>Learned probe</b>: a conditional logit on the frozen "
             "vectors of the question and the choices (never the recipe text) plus the distance probe's "
             "features, so it learns its own metric on top of the fixed distances; "
             "every question is scored by a model fitted on other recipes (5-fold GroupKFold by recipe); "
             "over all questions and over the test split, with 95% intervals from a bootstrap that "
             "resamples recipes. Settings are ranked by it (the stronger adversary), or by the distance "
             "probe where that reads higher. "
             "<b>Recipe coverage</b>: share of a recipe's steps its "
             "questions show; <b>question overlap</b>: mean pairwise Jaccard of their step sets. "
             "<b>Answer distance rank</b>: how often the answer is the nearest / 2nd / 3rd / farthest "
             "choice.</p>"), "<ul>"]
    parts += [f"<li><a href='#{t}'>{t}</a></li>" for t in tasks]
    parts.append("</ul>")
    for task, info in tasks.items():
        parts.append(f"<h2 id='{task}'>{task}</h2>")
        parts.append(_html_table(info["table"], "metrics"))
        for enc, ordering in info["ordering"].items():
            order = " &gt; ".join(f"{html.escape(str(r['knobs']))} ({_fmt(r['qo_acc'], 'qo_acc')})"
                                  for r in ordering)
            parts.append(f"<p class='note'>Settings by learned-probe accuracy, or the distance probe's "
                         f"where higher (most biased first), encoder "
                         f"<code>{html.escape(str(enc))}</code>: {order}</p>")
        for name in info["plots"]:
            alt = {"knobs_": "knob effect plot", "adversaries_": "adversaries per setting"}.get(
                name.split("_")[0] + "_", "choice distance histograms")
            parts.append(f"<img src='{html.escape(name)}' alt='{task} {alt}'>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def check_out_dir(out_dir: Path) -> Path:
    """Only ever replace a previous report (html + png files), never a user's folder."""
    if out_dir.exists():
        foreign = [x.name for x in out_dir.iterdir() if not (x.is_file() and x.suffix in (".html", ".png"))]
        if foreign or not out_dir.is_dir():
            raise ValueError(f"refusing to replace {out_dir}: it holds more than a report "
                             f"({', '.join(sorted(foreign)[:3])}); choose another --out")
    return out_dir


def build_report(con: duckdb.DuckDBPyConnection, out_dir: Path, dataset_ids: list[str] | None = None,
                 lance_uri: str | None = None, seed: int = 0, model: str = "logreg",
                 progress: bool = True) -> dict:
    """Compute the bias metrics, store them in bias_metrics, write out_dir/index.html + PNGs.
    Returns {out, index, images, n_datasets, tasks: {task: {rows, table, ordering}}}."""
    out_dir = check_out_dir(Path(out_dir))
    metrics = compute_bias_metrics(con, dataset_ids, lance_uri=lance_uri, seed=seed, model=model,
                                   progress=progress, keep_distances=True)
    if not metrics:
        raise LookupError("no datasets to report on; run `mrqa generate --all` first")
    write_bias_metrics(con, [{k: v for k, v in m.items() if k != "_distances"} for m in metrics])
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    tasks: dict[str, dict] = {}
    images = []
    for task in [t for t in TASKS if any(m["task"] == t for m in metrics)]:
        rows = [m for m in metrics if m["task"] == task]
        encoders = sorted({str(r["encoder_id"]) for r in rows})
        plots, ordering = [], {}
        for enc in encoders:
            group = [r for r in rows if str(r["encoder_id"]) == enc]
            tag = task if len(encoders) == 1 else f"{task}_{_slug(enc)}"
            hist = plot_histograms(group, out_dir / f"hist_{tag}.png", f"{task} [{enc}]")
            knobs = plot_knob_effects(group, out_dir / f"knobs_{tag}.png", f"{task} [{enc}]")
            adv = plot_adversaries(group, out_dir / f"adversaries_{tag}.png", f"{task} [{enc}]")
            plots += [p.name for p in (hist, knobs, adv) if p]
            ordering[enc] = [{"knobs": r["knobs"], "dataset_id": r["dataset_id"], "probe_acc": r["probe_acc"],
                              "hasty_student_acc": r["hasty_student_acc"], **{k: r.get(k) for k in QO_KEYS}}
                             for r in ordering_by_probe(group)]
        images += [out_dir / p for p in plots]
        clean = [{k: v for k, v in r.items() if k != "_distances"} for r in rows]
        tasks[task] = {"rows": clean, "table": table_rows(clean), "ordering": ordering, "plots": plots}
    index = out_dir / "index.html"
    index.write_text(render_html(tasks), encoding="utf-8")
    log.info("report: %d datasets, %d plots -> %s", len(metrics), len(images), index)
    return {"out": str(out_dir), "index": str(index), "images": [str(p) for p in images],
            "n_datasets": len(metrics), "tasks": tasks}


def _slug(s: str) -> str:
    """A file-name-safe short tag of an encoder id (readable prefix + hash)."""
    import hashlib
    import re
    return re.sub(r"[^A-Za-z0-9]+", "-", s)[:16].strip("-") + "-" + hashlib.sha256(s.encode()).hexdigest()[:6]


def format_ordering(tasks: dict[str, dict]) -> list[str]:
    """Printable lines: per task and encoder, settings in `ordering_by_probe` order (most biased
    first): the learned probe over all questions and on the test split with its 95% interval, the
    distance probe and the Hasty Student."""
    lines = []
    for task, info in tasks.items():
        for enc, ordering in info["ordering"].items():
            lines.append(f"{task} (encoder {enc}):")
            lines += [f"  {r['knobs']!s:14s} learned {_fmt(r.get('qo_acc'), 'qo_acc'):>6s}  "
                      f"test {with_interval(r, 'qo_test_acc'):28s}  probe {_fmt(r['probe_acc'], 'probe_acc'):>6s}  "
                      f"hasty {_fmt(r['hasty_student_acc'], 'hasty_student_acc'):>6s}  {r['dataset_id']}"
                      for r in ordering]
    return lines
