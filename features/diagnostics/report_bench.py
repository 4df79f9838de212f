"""`mrqa bench report-home`, `order-features`: the report's parts in processes, and the order figures, on a home.

On the warehouse of MRQA_HOME (read-only, e.g. the demo's), each part is timed in turn (one process)
and in `workers` spawned processes, and their results are compared:
- the words probe (linear with the blank's place, and trees) on every textual cloze dataset;
- the look probe's linear model and trees on every visual dataset (the photos' statistics read once,
  not timed);
- the report's 16 plots, drawn from the stored bias_metrics figures and the datasets' distances.
Each part prints its two wall times, their ratio, and whether the figures (or the PNG bytes) are the same.
Then the three parts together in `workers` processes: each part's pool started anew against the processes
kept for all three (training/procs.py `kept_processes`, as the report runs them).

`mrqa bench order-features` (`bench_order_features`): the order figures of every choice of the home's textual
cloze datasets, as the order probe and AF's order members compute them (title_order.TitleOrder.batch),
against the obvious loop, one choice at a time (TitleOrder.features).
"""
from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from features.diagnostics.bias import BIAS_COLUMNS


def _timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _pair(name: str, one: float, many: float, same: bool, workers: int) -> str:
    return (f"{name:34s} in turn {one:7.1f} s   {workers} processes {many:7.1f} s   "
            f"{one / many if many > 0 else float('nan'):5.2f}x   {'the same' if same else 'DIFFERENT'}")


def stored_rows(con, dataset_ids: list[str]) -> list[dict]:
    """The bias_metrics rows of `dataset_ids` as the report builds them (JSON columns decoded)."""
    cols = ", ".join(BIAS_COLUMNS)
    cur = con.execute(f"SELECT {cols} FROM bias_metrics WHERE list_contains(?, dataset_id) ORDER BY dataset_id",
                      [dataset_ids])
    rows = [dict(zip(BIAS_COLUMNS, r)) for r in cur.fetchall()]
    for r in rows:
        for c in ("answer_rank_share", "split_metrics"):
            if isinstance(r.get(c), str):
                r[c] = json.loads(r[c])
    return rows


def bench_report_home(con, home: Path, lance_uri: str, workers: int = 2, seed: int = 0) -> Iterator[str]:
    """Yield the report lines of each part (see the module's docstring). ValueError when the home has no
    datasets or no report yet (run `mrqa demo` or `mrqa generate --all` and `mrqa report` first)."""
    from features.diagnostics.bias import VectorLookup, dataset_distances, list_datasets
    from features.diagnostics.look_probe import VISUAL_TASKS, look_space, space_probe_rows
    from features.diagnostics.report import TASKS, draw_plots
    from features.diagnostics.words_probe import placed_features, words_space
    if workers < 2:
        raise ValueError(f"--workers must be 2 or more (1 is the in-turn run it is compared with), got {workers}")
    datasets = list_datasets(con, None)
    if not datasets:
        raise ValueError("no datasets in the warehouse: run `mrqa demo`, or `mrqa generate --all`, first")
    text = [d for d in datasets if d["task"] == "textual_cloze"]
    visual = [d for d in datasets if d["task"] in VISUAL_TASKS]
    yield f"{len(datasets)} datasets ({len(text)} textual cloze, {len(visual)} visual); seed {seed}"
    wspace = lspace = None
    if text:
        wspace = words_space(con)
        a, one = _timed(lambda: space_probe_rows(con, text, wspace, seed, 5, placed_features, workers=1))
        b, many = _timed(lambda: space_probe_rows(con, text, wspace, seed, 5, placed_features, workers=workers))
        yield _pair("words probe (linear and trees)", a, b, one == many, workers)
    if visual:
        lspace = look_space(con, home, progress=False)
        if lspace.ids:
            a, one = _timed(lambda: space_probe_rows(con, visual, lspace, seed, 5, workers=1))
            b, many = _timed(lambda: space_probe_rows(con, visual, lspace, seed, 5, workers=workers))
            yield _pair("look probe (linear and trees)", a, b, one == many, workers)
        else:
            lspace = None
            yield f"look probe: no photo readable under {home}; not timed"
    rows = stored_rows(con, [d["dataset_id"] for d in datasets])
    by_id = {d["dataset_id"]: d for d in datasets}
    for r in rows:                      # the dataset fields the report's rows carry beside the figures
        r.update({k: by_id[r["dataset_id"]][k]
                  for k in ("knob1", "knob2", "knob3", "k3_mode", "adversarial", "preset")})
    if not rows:
        raise ValueError("no bias_metrics rows: run `mrqa report` first (the plots draw its figures)")
    lookups: dict[tuple[str, str], VectorLookup] = {}
    for r in rows:
        space_name = "title" if r["task"] == "textual_cloze" else "image"
        key = (str(r["encoder_id"]), space_name)
        if key not in lookups:
            lookups[key] = VectorLookup(lance_uri, key[0], space_name)
        r["_distances"] = dataset_distances(con, r["dataset_id"], lookups[key], r["task"])
    tasks = [t for t in TASKS if any(r["task"] == t for r in rows)]
    with tempfile.TemporaryDirectory(prefix="mrqa-plots-") as tmp:
        dirs = [Path(tmp) / "in-turn", Path(tmp) / "processes"]
        for d in dirs:
            d.mkdir()
        a, one = _timed(lambda: draw_plots(rows, tasks, dirs[0], workers=1))
        b, many = _timed(lambda: draw_plots(rows, tasks, dirs[1], workers=workers))
        names = sorted(p.name for p in dirs[0].iterdir())
        same = names == sorted(p.name for p in dirs[1].iterdir()) and all(
            (dirs[0] / n).read_bytes() == (dirs[1] / n).read_bytes() for n in names)
        same = same and [[p and p.axes for p in v] for v in one.values()] == \
            [[p and p.axes for p in v] for v in many.values()]
    yield _pair(f"the report's {len(names)} plots", a, b, same, workers)
    yield from _kept_or_not(con, text, wspace, visual, lspace, rows, tasks, seed, workers)


def _kept_or_not(con, text, wspace, visual, lspace, rows, tasks, seed: int, workers: int) -> Iterator[str]:
    """The words and look probes and the plots in `workers` processes, each part's pool started anew
    against one set of processes kept for all three: the report line, and whether the results are the same."""
    import contextlib

    from features.diagnostics.look_probe import space_probe_rows
    from features.diagnostics.report import draw_plots
    from features.diagnostics.words_probe import placed_features
    from training.procs import kept_processes

    def parts(out: Path, kept: bool):
        with kept_processes() if kept else contextlib.nullcontext():
            words = wspace and space_probe_rows(con, text, wspace, seed, 5, placed_features, workers=workers)
            look = lspace and space_probe_rows(con, visual, lspace, seed, 5, workers=workers)
            plots = draw_plots(rows, tasks, out, workers=workers)
        return (words, look, [[p and (p.name, p.axes) for p in v] for v in plots.values()],
                {p.name: p.read_bytes() for p in sorted(out.iterdir())})

    with tempfile.TemporaryDirectory(prefix="mrqa-kept-") as tmp:
        dirs = [Path(tmp) / "fresh", Path(tmp) / "kept"]
        for d in dirs:
            d.mkdir()
        a, fresh = _timed(lambda: parts(dirs[0], False))
        b, kept = _timed(lambda: parts(dirs[1], True))
    yield (f"{'probes and plots, pools anew':34s} {a:7.1f} s   kept processes {b:7.1f} s   "
           f"{a / b if b > 0 else float('nan'):5.2f}x   {'the same' if fresh == kept else 'DIFFERENT'}")


def bench_order_features(con, repeats: int = 3) -> Iterator[str]:
    """On the home's textual cloze datasets (read-only): the counts built once (timed), then the 6 order figures
    of every choice with `TitleOrder.batch` (order_probe.order_features) and one choice at a time
    (`TitleOrder.features`), each `repeats` times in turn; the medians, their ratio and whether the figures
    are the same bit for bit."""
    import numpy as np

    from features.diagnostics.bias import list_datasets, resolve_dataset
    from features.diagnostics.order_probe import order_features, order_space
    from features.diagnostics.title_order import N_ORDER_FEATURES, TitleOrder
    t_counts, order = _timed(lambda: TitleOrder(con))
    space = order_space(order)
    rows = [r for r in list_datasets(con, None) if r["task"] == "textual_cloze"]
    if not rows:
        raise LookupError("no textual cloze datasets in the warehouse: run `mrqa demo` or `mrqa generate` first")
    resolved = [resolve_dataset(con, r["dataset_id"], space, "textual_cloze") for r in rows]
    n_q = sum(len(res.choice_rows) for res in resolved)

    def one_at_a_time():
        out = []
        for res in resolved:
            X = np.zeros((len(res.choice_rows), 4, N_ORDER_FEATURES), np.float32)
            for i, (shown, choices) in enumerate(zip(res.question_rows, res.choice_rows)):
                b = res.blanks[i] if i < len(res.blanks) else -1
                if 0 <= b <= len(shown) and len(choices) == 4:
                    X[i] = [order.features(list(shown), b, c, res.recipe_ids[i]) for c in choices]
            out.append(X)
        return out

    times = {"batch": [], "loop": []}
    got = {}
    for _ in range(repeats):
        for name, fn in (("batch", lambda: [order_features(res, order) for res in resolved]),
                         ("loop", one_at_a_time)):
            t, got[name] = _timed(fn)
            times[name].append(t)
    same = all(np.array_equal(a, b) for a, b in zip(got["batch"], got["loop"]))
    med = {k: float(np.median(v)) for k, v in times.items()}
    yield (f"counts: {order.n_titles} distinct titles over {order.n_recipes} train recipes, built in "
           f"{t_counts:.2f} s")
    yield (f"order figures of {n_q:,} questions x 4 choices ({len(rows)} textual cloze datasets), {repeats} runs "
           f"each: batch {med['batch']:.2f} s (min {min(times['batch']):.2f}), one choice at a time "
           f"{med['loop']:.2f} s (min {min(times['loop']):.2f}); ratio {med['loop'] / max(med['batch'], 1e-9):.1f}x; "
           f"same figures bit for bit: {same}")
