"""The look probe: question-only models on the photos' own pixels, outside the encoder's space.

The knobs, AF and the pooled adversary all measure and filter in one space: the default encoder's
vectors. A reviewer's question-only model need not use that space; a small CNN on the photos would
not. Every photo of a recipe is taken in one kitchen (counter, light, framing), and a distractor from
another recipe is taken in another, so plain image statistics can tell which choice belongs with the
question without any recipe text. This module measures that, as a diagnostic next to the probes of
the encoder's space:

- `image_statistics` (look_statistics.py, which also keeps them between runs): 124 numbers per photo,
  from the photo scaled to 64 x 64 RGB: a 4 x 4 thumbnail
  (48), a 4 x 4 x 4 colour histogram (64), and the mean and spread of each colour in the outer 8-pixel
  frame (the counter) and in the centre (12). Nothing is trained on the recipes. (An 8 x 8 thumbnail,
  268 numbers, read the demo's AF visual cloze datasets within 1.5 points of these, at twice the cost.)
- `LookSpace`: those statistics of every readable photo of the warehouse's `images` table (status ok),
  each block standardised over the photos, projected on their 32 principal axes (`principal`) and each
  row scaled to unit length (over every readable photo, so a dataset's figure does not depend on which
  others are measured with it); photos drawn again in another kitchen (`redrawn_images`, `mrqa redraw`)
  are scaled and projected by the same statistics and axes, never fitted on, in the shape of
  bias.VectorLookup, so the probes of the encoder's space run on it unchanged. Photos that are missing
  or cannot be decoded are counted with their reason; a question with such a photo is left out and
  counted, never guessed.
- `look_probe_rows`: per dataset, the learned question-only probe (linear, question_only.py) and the
  tree probe (tree_probe.py) on those statistics: every question scored by models that never saw its
  recipe (folds of recipes), with 95% intervals, over every question and on the test split. Visual
  tasks only (textual cloze shows no photos).

It is a measurement, not a filter: no dataset is changed. `mrqa look-probe` prints it."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np

from features.diagnostics.look_statistics import BINS, BLOCKS, THUMB, image_statistics  # noqa: F401 - re-exported

log = logging.getLogger(__name__)

N_STATISTICS = 3 * THUMB * THUMB + BINS ** 3 + 12
COMPONENTS = 32                # principal axes of the standardised statistics the probes read
VISUAL_TASKS = ("visual_cloze", "visual_coherence", "visual_ordering")


@dataclass
class LookSpace:
    """Image statistics of the readable photos, one unit row per photo (bias.VectorLookup's shape)."""
    ids: list[str]
    mat: np.ndarray
    index: dict[str, int] = field(repr=False)
    missing: dict[str, str] = field(default_factory=dict)       # image_id -> why it has no row
    own: np.ndarray | None = field(repr=False, default=None)   # per row: a recipe's own photo (not redrawn)

    def rows(self, ids) -> list[int] | None:
        out = [self.index.get(i) for i in ids]
        return None if any(o is None for o in out) else out

    def own_photos(self) -> tuple[list[str], np.ndarray]:
        """The ids and rows of the recipes' own photos (not the redrawn ones)."""
        if self.own is None:
            return self.ids, self.mat
        return [i for i, o in zip(self.ids, self.own) if o], self.mat[self.own]


def standardise(blocks: dict[str, np.ndarray], fit: np.ndarray | None = None) -> np.ndarray:
    """Each block z-scored over the photos (a constant column stays 0), the blocks side by side, each row
    scaled to unit length (a photo whose statistics are all average stays the zero row). `fit`: a mask of the
    rows whose mean and spread are used (default: all); the other rows are scaled by them."""
    parts = []
    for name in BLOCKS:
        b = blocks[name].astype(np.float64)
        f = b if fit is None else b[fit]
        parts.append((b - f.mean(0)) / np.where(f.std(0) > 1e-9, f.std(0), 1.0))
    m = np.concatenate(parts, axis=1)
    norm = np.linalg.norm(m, axis=1, keepdims=True)
    return (m / np.where(norm > 0, norm, 1.0)).astype(np.float32)


def principal(m: np.ndarray, k: int = COMPONENTS, fit: np.ndarray | None = None) -> np.ndarray:
    """The rows of `m` on its first `k` principal axes (centred; each axis signed so that its largest
    loading is positive, so the result does not depend on the SVD's sign choice), scaled to unit length.
    `fit`: a mask of the rows the centre and axes are found on (default: all); the others are projected.
    The probes' cost grows with the width (4 x width pair features per choice): 32 axes of the 124
    statistics read the demo's AF visual cloze and coherence datasets as well as all 124 (89.5-97.9%
    against 88-97%) in a quarter of the time."""
    from features.diagnostics.question_only import one_blas_thread
    c = m.astype(np.float64) - (m if fit is None else m[fit]).mean(0)
    with one_blas_thread():                       # the same axes whatever the machine's threads
        _, _, vt = np.linalg.svd(c if fit is None else c[fit], full_matrices=False)
    vt = vt[:k]
    vt *= np.where(vt[np.arange(len(vt)), np.abs(vt).argmax(1)] < 0, -1.0, 1.0)[:, None]
    z = c @ vt.T
    norm = np.linalg.norm(z, axis=1, keepdims=True)
    return (z / np.where(norm > 0, norm, 1.0)).astype(np.float32)


def look_space(con: duckdb.DuckDBPyConnection, home: Path, progress: bool = True) -> LookSpace:
    """The statistics of every `images` row with status ok, read from their files under `home`, in
    image_id order (one space for all datasets, so a dataset's figure does not depend on the others).
    The statistics of a photo whose file is unchanged come from the cache (look_statistics.py)."""
    from features.diagnostics.look_statistics import photo_rows, read_statistics, redrawn_photo_ids
    rows = photo_rows(con)
    redrawn = redrawn_photo_ids(con)
    ids, blocks, missing = [], {b: [] for b in BLOCKS}, {}
    stats, _ = read_statistics(rows, home, progress=progress)
    for (iid, _), st in zip(rows, stats):
        if isinstance(st, str):
            missing[iid] = st
            continue
        ids.append(iid)
        for b in BLOCKS:
            blocks[b].append(st[b])
    own = np.array([i not in redrawn for i in ids], dtype=bool)     # the axes: the recipes' own photos
    if missing:
        log.warning("look probe: %d of %d photos could not be read (e.g. %s: %s); questions showing them are "
                    "left out", len(missing), len(rows), *next(iter(missing.items())))
    fit = None if own.all() else own
    mat = principal(standardise({b: np.array(v, dtype=np.float32).reshape(len(ids), -1) for b, v in blocks.items()},
                                fit), fit=fit) if own.sum() > 1 else np.zeros((len(ids), 1), np.float32)
    return LookSpace(ids, mat, {i: n for n, i in enumerate(ids)}, missing, own)


def look_probe_rows(con: duckdb.DuckDBPyConnection, home: Path, dataset_ids: list[str] | None = None,
                    seed: int = 0, n_folds: int = 5, progress: bool = True) -> dict:
    """The look probe on `dataset_ids` (default: every dataset of a visual task). Returns {"datasets":
    [one row per dataset], "photos": readable photos, "photos_unreadable": {reason: count}}."""
    from features.diagnostics.bias import list_datasets
    rows = list_datasets(con, dataset_ids)
    text = [r["dataset_id"] for r in rows if r["task"] not in VISUAL_TASKS]
    if dataset_ids and text:
        raise ValueError(f"{', '.join(text)}: the look probe reads photos; textual cloze shows none")
    rows = [r for r in rows if r["task"] in VISUAL_TASKS]
    space = look_space(con, home, progress=progress)     # every photo: the axes do not depend on the datasets
    out = space_probe_rows(con, rows, space, seed, n_folds)
    reasons: dict[str, int] = {}
    for why in space.missing.values():
        key = why.split(":")[0]
        reasons[key] = reasons.get(key, 0) + 1
    from features.diagnostics.background_cue import background_cue
    own_ids, own_mat = space.own_photos()
    cue = background_cue(con, own_ids, own_mat, "look").as_row() if len(own_ids) > 1 else None
    return {"datasets": out, "photos": len(space.ids), "photos_unreadable": reasons, "seed": seed,
            "background_cue": cue}


def space_probe_row(con: duckdb.DuckDBPyConnection, r: dict, space: LookSpace, seed: int, n_folds: int,
                    features=None) -> dict:
    """One dataset (a `bias.list_datasets` row) in a space outside the encoder's (the look probe's, the words
    probe's): the linear question-only probe and the tree probe on its questions resolved to the space's rows,
    every question and the test split, with 95% intervals. `features(res, mat)`: the probes' features,
    `task_features` by default (the words probe's add the blank's place before the set-level features,
    the last columns, which are all the trees read), built once for both."""
    return space_probe_rows(con, [r], space, seed, n_folds, features, workers=1)[0]


PROCESS_MIN_QUESTIONS = 5_000     # questions over all the datasets before spawned processes (about 2 s each) pay


def probe_workers(workers: int | None, n_jobs: int, n_questions: int) -> int:
    """Processes for per-dataset probes: `workers` when given, else the CPU count (at most 4) when the
    datasets hold `PROCESS_MIN_QUESTIONS` questions or more, else 1 (in turn); never more than the jobs."""
    import os
    if workers is None:
        workers = min(4, os.cpu_count() or 1) if n_questions >= PROCESS_MIN_QUESTIONS else 1
    return max(1, min(n_jobs, workers))


def space_probe_rows(con: duckdb.DuckDBPyConnection, rows: list[dict], space: LookSpace, seed: int, n_folds: int,
                     features=None, workers: int | None = None) -> list[dict]:
    """`space_probe_row` of every row: the questions resolved on this thread (DuckDB), the probes of the
    datasets in `workers` spawned processes (default: `probe_workers`; in turn with 1), each with
    one BLAS thread and the trees' OpenMP threads, so the figures are the same whatever `workers` is.
    `features` must then be a module-level function (it is pickled). The probes hold the GIL most of their
    time: the words probe's 25 demo datasets took 16.4-17.6 s on 2 threads, 12.1-13.3 s in 2 processes and
    18.6-20.0 s in turn."""

    from features.diagnostics.bias import resolve_dataset
    resolved = [resolve_dataset(con, r["dataset_id"], space, r["task"]) for r in rows]
    workers = probe_workers(workers, len(rows), sum(len(res.qids) for res in resolved))
    jobs = [({k: r.get(k) for k in ("dataset_id", "task", "setting")}, res, space.mat, seed, n_folds, features)
            for r, res in zip(rows, resolved)]
    if workers <= 1:
        return [_probe_row(job) for job in jobs]
    from training.procs import spawn_map
    return spawn_map(_probe_row, jobs, workers)


def _probe_row(job: tuple) -> dict:
    """The linear and the tree probe of one resolved dataset, with one BLAS thread and the trees' OpenMP
    threads (a process pool's unit of work)."""
    from threadpoolctl import threadpool_limits

    from features.diagnostics.bias import r4
    from features.diagnostics.question_only import one_blas_thread, question_only_probe, task_features
    from features.diagnostics.tree_probe import tree_probe, tree_threads
    r, res, mat, seed, n_folds, features = job
    lin = tree = None
    if res.qids:
        with one_blas_thread(), threadpool_limits(tree_threads(), user_api="openmp"):
            X = (features(res, mat) if features is not None
                 else task_features(r["task"], res.question_rows, res.choice_rows, mat))
            lin = question_only_probe(X, res.answers, res.recipe_ids, res.splits, n_folds, seed)
            tree = tree_probe(X, res.answers, res.recipe_ids, res.splits, seed=seed)
    row = {"dataset_id": r["dataset_id"], "task": r["task"], "setting": r.get("setting"),
           "n_questions": res.n_questions, "n_scored": len(res.qids), "n_left_out": res.n_missing_vectors,
           "chance": 1.0 / 4}
    for name, p in (("linear", lin), ("tree", tree)):
        row[name] = {"accuracy": r4(p.accuracy) if p else None,
                     "ci": [r4(x) for x in p.ci] if p and p.ci else None,
                     "test_accuracy": r4(p.test_accuracy) if p else None,
                     "test_ci": [r4(x) for x in p.test_ci] if p and p.test_ci else None,
                     "n_test": p.n_test if p else 0}
    return row


def format_table(res: dict) -> str:
    """The printed table: one line per dataset, linear and tree probe, every question and test split."""
    def f(p: dict, key: str) -> str:
        a, ci = p[key], p["ci" if key == "accuracy" else "test_ci"]
        if a is None:
            return "-"
        return f"{100 * a:.1f}% [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if ci else f"{100 * a:.1f}%"
    head = (f"{'dataset':36s} {'scored':>6s}  {'linear, every question':>22s}  {'linear, test':>20s}  "
            f"{'trees, every question':>22s}  {'trees, test':>20s}")
    lines = [head]
    for r in res["datasets"]:
        lines.append(f"{r['dataset_id']:36s} {r['n_scored']:6d}  {f(r['linear'], 'accuracy'):>22s}  "
                     f"{f(r['linear'], 'test_accuracy'):>20s}  {f(r['tree'], 'accuracy'):>22s}  "
                     f"{f(r['tree'], 'test_accuracy'):>20s}")
    bad = ", ".join(f"{k} {v}" for k, v in sorted(res["photos_unreadable"].items()))
    lines.append(f"chance 25.0%; {res['photos']} photos read" + (f"; unreadable: {bad}" if bad else "")
                 + "; question-only models on the photos' pixel statistics, outside the encoder's space")
    if res.get("background_cue"):
        from features.diagnostics.background_cue import format_cue
        lines += format_cue([res["background_cue"]])
    return "\n".join(lines)


def _linear(job):
    """The linear probe of one resolved dataset on one BLAS thread (a process pool's unit of work)."""
    res, mat, n_folds, seed = job
    from features.diagnostics.bias import learned_probe
    from features.diagnostics.question_only import one_blas_thread
    with one_blas_thread():
        return learned_probe(res, mat, n_folds, seed)


def remap(res, lookup, space: LookSpace):
    """Questions resolved to an encoder's VectorLookup (bias.resolve_dataset), resolved again to rows of
    `space` through their item ids, without reading the warehouse again; a question with a photo `space`
    could not read is left out and counted in n_missing_vectors."""
    from features.diagnostics.bias import ResolvedQuestions
    ids = np.empty(len(lookup.index), dtype=object)
    for item, n in lookup.index.items():
        ids[n] = item
    keep, q_rows, c_rows = [], [], []
    for k, (q, ch) in enumerate(zip(res.question_rows, res.choice_rows)):
        qr = space.rows(ids[q]) if len(q) else []
        cr = [space.rows(ids[c]) for c in ch] if res.task == "visual_ordering" else space.rows(ids[ch])
        if qr is None or cr is None or (res.task == "visual_ordering" and any(x is None for x in cr)):
            continue
        keep.append(k)
        q_rows.append(qr)
        c_rows.append(cr)
    pick = lambda xs: [xs[k] for k in keep]
    return ResolvedQuestions(res.dataset_id, res.task, pick(res.qids), pick(res.recipe_ids), pick(res.splits),
                             res.answers[keep], q_rows, c_rows, res.n_questions,
                             res.n_missing_vectors + len(res.qids) - len(keep), pick(res.blanks) if res.blanks else [])


def look_rows(con: duckdb.DuckDBPyConnection, rows: list[dict], home: Path, seed: int = 0, n_folds: int = 5,
              workers: int | None = None, progress: bool = True) -> LookSpace | None:
    """The report's look probe: the linear model on the pixel statistics of every visual dataset of
    `rows` (bias_metrics rows of `bias.compute_bias_metrics`), written into each row as look_acc,
    look_ci_low, look_ci_high, look_test_acc (None where no photo could be read, e.g. a home whose
    image files are gone, or a text task). The probes run in `workers` spawned processes (default:
    `probe_workers`) with one BLAS thread each, so the figures are the same whatever `workers` is.
    Returns the look space it read (for the report's background cue), None without a visual dataset."""

    from features.diagnostics.bias import r4, resolve_dataset
    for r in rows:
        r.update(look_acc=None, look_ci_low=None, look_ci_high=None, look_test_acc=None)
    visual = [r for r in rows if r["task"] in VISUAL_TASKS]
    if not visual:
        return None
    space = look_space(con, home, progress=progress)     # the same space as `mrqa look-probe`: the same figures
    if not space.ids:
        log.warning("look probe: no photo of the datasets could be read under %s; no look figures", home)
        return space
    jobs = [(remap(r["_resolved"][0], r["_lookup"], space) if r.get("_resolved") and r.get("_lookup")
             else resolve_dataset(con, r["dataset_id"], space, r["task"]), space.mat, n_folds, seed) for r in visual]
    workers = probe_workers(workers, len(jobs), sum(len(job[0].qids) for job in jobs))
    if workers <= 1:
        results = [_linear(job) for job in jobs]
    else:                           # the probes hold the GIL most of their time: processes, not threads
        from training.procs import spawn_map
        results = spawn_map(_linear, jobs, workers)
    for r, p in zip(visual, results):
        if p is None or p.accuracy is None:
            continue
        r.update(look_acc=r4(p.accuracy), look_ci_low=r4(p.ci[0]), look_ci_high=r4(p.ci[1]),
                 look_test_acc=r4(p.test_accuracy))
    return space
