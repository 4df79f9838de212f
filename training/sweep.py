"""`mrqa sweep`: scorers x knob settings x tasks -> an accuracy table (Parquet + Markdown) and a plot.

Each cell is a full `train_run` (early stopping, checkpoint, `runs` row); the Hasty Student
accuracy of the same test questions sits next to it. The summary compares, per task and scorer,
the RecipeQA-style preset with the mean over the knob settings (the paper: 83.6% vs 67.1%).
"""
from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from features.datasets.knobs import setting_of
from training.config import VISUAL_TASKS, ModelConfig, TrainConfig, align_for
from training.data import list_datasets, load_for_training

log = logging.getLogger(__name__)


def ci95(acc: float, n: int) -> list[float] | None:
    """The 95% Wilson interval of a test accuracy over its n questions (rounded), None without any: on
    the 80-160 test questions of an AF setting of the demo it spans about 15 points, so two figures a
    few points apart, or a figure and a bound, are told apart only where the intervals say so."""
    from features.diagnostics.question_only import wilson_interval
    ci = wilson_interval(round(acc * n), n)
    return None if ci is None else [round(ci[0], 4), round(ci[1], 4)]


def difference_ci(a: float, b: float, n: int, n_b: int | None = None) -> list[float] | None:
    """The 95% interval of a - b, two accuracies over n questions (and n_b for b, default n: the reader's
    lead over question-only, or what another recipe's steps cost it, on the same questions): Newcombe's hybrid
    score interval from the two Wilson intervals (Newcombe 1998, method 10). It treats the two as independent
    samples; two models scored on the same questions agree more than that, so the interval is if anything too
    wide. None for no questions."""
    ca, cb = ci95(a, n), ci95(b, n if n_b is None else n_b)
    if ca is None or cb is None:
        return None
    d = a - b
    lo = d - ((a - ca[0]) ** 2 + (cb[1] - b) ** 2) ** 0.5
    hi = d + ((ca[1] - a) ** 2 + (b - cb[0]) ** 2) ** 0.5
    return [round(lo, 4), round(hi, 4)]


def _setting_name(text: str) -> str:
    """A knob label as the export's partitions spell it (`0-0-1:balanced` -> `0-0-1-balanced`); text that
    is not a setting is kept as given (it then matches no dataset)."""
    from features.datasets.knobs import parse_setting
    try:
        return parse_setting(text).name
    except ValueError:
        return text


def selected(listed: list[dict], tasks: list[str], knobs: list[str] | None) -> list[dict]:
    """The datasets of an export's listing (`list_datasets`) that a sweep of `tasks` [and `knobs` labels,
    matched by setting: an export's twins of one setting all match it; or one twin's own knobs= value,
    `0-1-1-s1-1a2b3c4d`, as the error below lists them] trains on."""
    names = [_setting_name(k) for k in knobs] if knobs else None
    return [d for d in listed if d["task"] in tasks
            and (not names or setting_of(d["knobs"]) in names or d["knobs"] in names)]


def sweep(export_dir: Path, out_dir: Path, scorers: list[str], tasks: list[str] = VISUAL_TASKS,
          knobs: list[str] | None = None, model_cfg: ModelConfig | None = None,
          train_cfg: TrainConfig | None = None, text_features: str = "tokens", record: bool = True,
          align: bool | None = None, pooled: bool = False) -> dict:
    """Train every (dataset of `tasks` [and `knobs` labels], scorer); write the table + plot. `align`: the
    recipe-reading scorers' step alignment (None: on with step-text vectors; never for question_only).
    `pooled`: per task and scorer, train once on the union of the datasets' train/val questions
    (training/pooled.py) and test that model on each dataset's test split."""
    from training.baselines import hasty_student_accuracy
    from training.train import train_run
    model_cfg, train_cfg = model_cfg or ModelConfig(), train_cfg or TrainConfig()
    listed = list_datasets(export_dir)
    datasets = selected(listed, tasks, knobs)
    knobs = [_setting_name(k) for k in knobs] if knobs else None
    if not datasets:
        there = sorted({d["knobs"] for d in listed if d["task"] in tasks})
        if knobs and there:
            raise ValueError(f"no datasets of {', '.join(tasks)} with knobs {', '.join(knobs)} in {export_dir} "
                             f"(it has: {', '.join(there)})")
        raise ValueError(f"no datasets of {', '.join(tasks)} in {export_dir}")
    rows = []
    if pooled:
        rows = _pooled_rows(export_dir, datasets, scorers, model_cfg, train_cfg, text_features, align)
    for d in ([] if pooled else datasets):
        ds = load_for_training(export_dir, d["dataset_id"], text_features, train_cfg)
        test_split = "test" if "test" in ds.splits else "val"
        hasty = hasty_student_accuracy(ds, test_split)
        for scorer in scorers:
            t0 = time.perf_counter()
            m = train_run(export_dir, d["dataset_id"],
                          replace(model_cfg, scorer=scorer, text_features=text_features,
                                  align=align_for(scorer, text_features, align)),
                          train_cfg, record=record, ds=ds)
            rows.append({"task": d["task"], "knobs": d["knobs"], "dataset_id": d["dataset_id"], "scorer": scorer,
                         "test_acc": round(m["test_acc"], 4),
                         "test_ci": ci95(m["test_acc"], m["n_questions"].get(test_split, 0)),
                         "val_acc": round(m["val_acc"], 4),
                         "hasty_student_acc": round(hasty, 4), "n_train": m["n_questions"].get("train", 0),
                         "n_test": m["n_questions"].get(test_split, 0), "epochs": m["epochs_run"],
                         "seconds": round(time.perf_counter() - t0, 1), "run_id": m["run_id"],
                         "faithfulness_ratio": (m["faithfulness"] or {}).get("ratio_vs_uniform"),
                         "rollout_ratio": (m["faithfulness"] or {}).get("rollout_ratio_vs_uniform"),
                         "foreign_context_acc": round(m["context_ablation"]["foreign_context_acc"], 4),
                         "text_source": ds.text_source})
            log.info("sweep %s %s: test %.3f (hasty %.3f)", d["dataset_id"], scorer, m["test_acc"], hasty)
    out_dir.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), out_dir / "accuracy.parquet")
    summary = summarize(rows)
    (out_dir / "accuracy.md").write_text(markdown(rows, summary))
    plot(rows, out_dir / "accuracy.png")
    return {"out": str(out_dir), "rows": rows, "summary": summary}


def _pooled_rows(export_dir: Path, datasets: list[dict], scorers: list[str], model_cfg: ModelConfig,
                 train_cfg: TrainConfig, text_features: str, align: bool | None) -> list[dict]:
    from training.baselines import hasty_student_accuracy
    from training.ddp import init_distributed
    from training.pooled import pool
    from training.train import build_model, context_ablation, evaluate, fit, set_seed
    rows = []
    for task in sorted({d["task"] for d in datasets}):
        dss = [load_for_training(export_dir, d["dataset_id"], text_features, train_cfg)
               for d in datasets if d["task"] == task]
        union = pool(dss)
        _, device = init_distributed(train_cfg)
        for scorer in scorers:
            t0 = time.perf_counter()
            set_seed(train_cfg.seed)
            model = build_model(union, replace(model_cfg, scorer=scorer, text_features=text_features,
                                               align=align_for(scorer, text_features, align)))
            res = fit(model, union, train_cfg, device)
            for ds in dss:
                split = "test" if "test" in ds.splits else "val"
                test = evaluate(model, ds, split, device, amp=train_cfg.amp)
                abl = context_ablation(model, ds, split, device, test["accuracy"], amp=train_cfg.amp)
                rows.append({"task": task, "knobs": ds.knobs, "dataset_id": ds.dataset_id, "scorer": scorer,
                             "test_acc": round(test["accuracy"], 4),
                             "test_ci": ci95(test["accuracy"], len(ds.splits[split])),
                             "val_acc": round(res["best_val_acc"], 4),
                             "hasty_student_acc": round(hasty_student_accuracy(ds, split), 4),
                             "n_train": len(union.splits["train"]), "n_test": len(ds.splits[split]),
                             "epochs": res["epochs_run"], "seconds": round(time.perf_counter() - t0, 1),
                             "run_id": None, "faithfulness_ratio": None, "rollout_ratio": None,
                             "foreign_context_acc": round(abl["foreign_context_acc"], 4),
                             "text_source": ds.text_source})
                log.info("pooled sweep %s %s: test %.3f", ds.dataset_id, scorer, test["accuracy"])
    return rows


def _avg(xs: list[dict], k: str) -> float:
    return sum(x[k] for x in xs) / len(xs)


def summarize(rows: list[dict]) -> list[dict]:
    """Per (task, scorer): preset accuracy vs mean over knob settings, and Hasty Student likewise. A row's
    knobs is its export config's (`recipeqa-s0-1a2b3c4d` where the export held several preset datasets):
    its setting (`setting_of`) says whether it is the preset, and twins of one knob setting are averaged
    first, so each setting counts once."""
    out = []
    for task in sorted({r["task"] for r in rows}):
        for scorer in sorted({r["scorer"] for r in rows}):
            rs = [r for r in rows if r["task"] == task and r["scorer"] == scorer]
            pre = [r for r in rs if setting_of(r["knobs"]) == "recipeqa"]
            kn: dict[str, list[dict]] = {}              # per knob setting: its datasets (twins of one setting)
            for r in rs:
                if setting_of(r["knobs"]) != "recipeqa":
                    kn.setdefault(setting_of(r["knobs"]), []).append(r)
            per = [{k: _avg(v, k) for k in ("test_acc", "hasty_student_acc")} for v in kn.values()]
            mean = lambda xs, k: round(_avg(xs, k), 4) if xs else None
            out.append({"task": task, "scorer": scorer, "recipeqa_preset": mean(pre, "test_acc"),
                        "knob_mean": mean(per, "test_acc"), "n_knob_settings": len(per),
                        "hasty_preset": mean(pre, "hasty_student_acc"),
                        "hasty_knob_mean": mean(per, "hasty_student_acc")})
    return out


def markdown(rows: list[dict], summary: list[dict]) -> str:
    lines = ["| task | knobs | scorer | test acc | its 95% interval | val acc | Hasty Student | train q | test q "
             "| epochs | test acc, another recipe's steps as context | CLS attention on the placeholder step, "
             "x uniform: last layer / rollout |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        att = ("-" if r.get("faithfulness_ratio") is None
               else f"{r['faithfulness_ratio']:.2f} / {r.get('rollout_ratio') or float('nan'):.2f}")
        ci = "-" if not r.get("test_ci") else f"{r['test_ci'][0]:.3f}-{r['test_ci'][1]:.3f}"
        lines.append(f"| {r['task']} | {r['knobs']} | {r['scorer']} | {r['test_acc']:.3f} | {ci} | "
                     f"{r['val_acc']:.3f} | {r['hasty_student_acc']:.3f} | {r['n_train']} | {r['n_test']} | "
                     f"{r['epochs']} | {r['foreign_context_acc']:.3f} | {att} |")
    lines += ["", "| task | scorer | RecipeQA-style preset | mean over knob settings (n) | Hasty preset "
                  "| Hasty knob mean |", "|---|---|---|---|---|---|"]
    f = lambda v: "-" if v is None else f"{v:.3f}"
    for s in summary:
        lines.append(f"| {s['task']} | {s['scorer']} | {f(s['recipeqa_preset'])} | {f(s['knob_mean'])} "
                     f"({s['n_knob_settings']}) | {f(s['hasty_preset'])} | {f(s['hasty_knob_mean'])} |")
    lines += [""] + [f"- {c}" for c in checks(rows, summary)]
    return "\n".join(lines) + "\n"


def checks(rows: list[dict], summary: list[dict]) -> list[str]:
    """The paper's claims, stated per task on this sweep's test figures (never tuned on test)."""
    out = []
    for task in sorted({r["task"] for r in rows}):
        rs = {s["scorer"]: s for s in summary if s["task"] == task}
        ctx = [sc for sc in ("transformer", "bidaf", "impatient") if sc in rs]
        for col, label in (("recipeqa_preset", "preset"), ("knob_mean", "knob mean")):
            vals = {sc: rs[sc][col] for sc in ctx if rs[sc][col] is not None}
            if not vals:
                continue
            hasty = next(iter(rs.values()))["hasty_preset" if col == "recipeqa_preset" else "hasty_knob_mean"]
            best = max(vals, key=vals.get)
            beat = [sc for sc, v in vals.items() if hasty is not None and v > hasty]
            out.append(f"{task} ({label}): best scorer {best} ({vals[best]:.3f}); above Hasty Student "
                       f"({hasty:.3f}): {', '.join(beat) or 'none'}")
            free = rs.get("question_only", {}).get(col)
            if free is not None:           # the learned context-free scorer: what the recipe adds
                out.append(f"{task} ({label}): learned context-free scorer {free:.3f}; the best recipe-reading "
                           f"scorer adds {vals[best] - free:+.3f}")
        for sc in ctx:
            p, k = rs[sc]["recipeqa_preset"], rs[sc]["knob_mean"]
            if p is not None and k is not None:
                out.append(f"{task} {sc}: preset {p:.3f} {'>' if p > k else '<='} knob mean {k:.3f}")
    titles = sorted({r["dataset_id"] for r in rows if r.get("text_source") == "export:title"})
    if titles:
        out.append(f"step texts: titles only for {len(titles)} dataset(s) (an export without body vectors and no "
                   "feature store): the readers read far less than from the steps; re-export with "
                   "`mrqa export --with-vectors`")
    return out


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    tasks = sorted({r["task"] for r in rows})
    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        rs = [r for r in rows if r["task"] == task]
        knobs = sorted({r["knobs"] for r in rs})
        scorers = sorted({r["scorer"] for r in rs})
        w = 0.8 / (len(scorers) + 1)
        for i, sc in enumerate(scorers + ["Hasty Student"]):
            vals = [next((r["hasty_student_acc"] if sc == "Hasty Student" else r["test_acc"]
                          for r in rs if r["knobs"] == k and (sc == "Hasty Student" or r["scorer"] == sc)), 0)
                    for k in knobs]
            ax.bar([x + i * w for x in range(len(knobs))], vals, w, label=sc)
        ax.axhline(0.25, color="grey", ls="--", lw=1)
        ax.set_xticks([x + 0.4 - w / 2 for x in range(len(knobs))], knobs, rotation=45)
        ax.set_title(task)
        ax.set_ylim(0, 1)
        ax.set_ylabel("test accuracy")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
