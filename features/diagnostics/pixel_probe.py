"""The pixel probe: a small CNN trained end to end on the photos, question-only.

Every other question-only check reads fixed features: the encoder's vectors (the linear and tree probes,
GM3C question-only) or hand-made pixel statistics (the look probe: a thumbnail, a colour histogram, the
frame's colours). A sceptical reviewer's next model learns its own features from the pixels. This module
is that model, a measurement next to the look probe (its figures are written only on request,
`record_pixel_checks` for `mrqa pixel-probe --record`; `mrqa af-pool --pixel` drops by its verdicts, and
with `--pixel-swaps` swaps by its scores of each alternate foreign photo, `with_alternates`):

- the photos each question shows, scaled to `SIDE` x `SIDE` RGB (64: half the sample kitchen's side; JPEG
  decoded at a reduced scale), from the warehouse's `images` (status ok) and `redrawn_images` rows; a photo
  that is missing or cannot be decoded is counted with its reason and its questions are left out, never guessed;
- `PixelQuestionOnly`: one CNN (4 conv blocks of 16-64 channels, batch norm, max pooling, the mean over the
  photo, with each colour's mean and spread) embeds every photo; per choice a small MLP reads the choice,
  the mean of the question's shown photos, the mean of the other choices, their products and absolute
  differences (visual cloze; coherence has no shown photos beside its 4 choices, so only the choice set);
  for ordering the MLP reads the 4 photos in the candidate order. Softmax over the 4 choices;
- folds: the val and the test split are each held out whole (a distractor comes from the same split, so a
  held-out photo was never seen in training), the train split's recipes are cut in as many folds
  (`train_fold_count`: 2 to `MAX_TRAIN_FOLDS`) as it takes for none to hold more questions than the test
  split, so every fold's model trains on at least as many questions as the test split's does (the CNN's
  learning curve is steep there: with 2 folds of the train split its models trained on ~620 questions of the
  paper-size author coherence 0-0-0 and read 23-27%, the val and test splits' models on ~900 read 36-40%);
  each fold's model trains on the others, early-stopped on a seeded 15% of their recipes, and scores its
  fold. Every question is so scored by a model that never saw its recipe;
- the folds' models train in spawned processes of one thread each (`training.procs.spawn_map`), each
  seeded by (seed, dataset, fold), so the figures are the same whatever the workers; with
  MRQA_PIXEL_DEVICE=cuda (or auto on a GPU host, `pixel_device`) in turn on the GPU instead.

Visual tasks only (textual cloze shows titles). `mrqa pixel-probe` prints it, with 95% intervals over every
question and on the test split."""
from __future__ import annotations

import hashlib
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np

log = logging.getLogger(__name__)

# photos are scaled to SIDE x SIDE before the CNN: at 32 x 32 it did not see what tells the author coherence
# 0-0-0 AF foreign photo apart (a recipe's own light and framing), at 64 x 64 it read 36.8-37.2% of it, over
# half of the test split (the sample kitchen's photos are 128 x 128; docs/results.md, "The pixel probe's folds
# and side")
SIDE = 64
MAX_TRAIN_FOLDS = 10        # folds of the train split's recipes at most (the val and test splits are one fold each)
EPOCHS = 15                 # at most; early stopping on the held-back recipes' loss
PATIENCE = 3
BATCH = 64                  # questions per step
LR = 2e-3
WEIGHT_DECAY = 1e-4
STOP_SHARE = 15             # % of the training recipes held back for early stopping
VISUAL_TASKS = ("visual_cloze", "visual_coherence", "visual_ordering")
# Where the CNN trains: cpu (the default, so a figure is the same on every machine of an instruction set), cuda,
# or auto (cuda when there is one). On CUDA the folds train in turn on the one device, with cuDNN's deterministic
# kernels; the figures then differ from the CPU's in the last digits.
DEVICE_ENV = "MRQA_PIXEL_DEVICE"
DEVICES = ("cpu", "cuda", "auto")


def pixel_device() -> str:
    """The device the pixel probe trains on, from MRQA_PIXEL_DEVICE (DEVICES; unset: cpu). Raises ValueError on
    another value, or on cuda where no CUDA device is available."""
    v = (os.environ.get(DEVICE_ENV) or "cpu").strip().lower()
    if v not in DEVICES:
        raise ValueError(f"{DEVICE_ENV} must be one of {', '.join(DEVICES)}, got {v!r}")
    if v == "cpu":
        return v
    import torch
    if torch.cuda.is_available():
        return "cuda"
    if v == "cuda":
        raise ValueError(f"{DEVICE_ENV}=cuda but torch sees no CUDA device: unset it (cpu) or set it to auto")
    return "cpu"


@dataclass
class PhotoIndex:
    """image_id -> row, over every photo the warehouse has a file for (bias.VectorLookup's `rows` shape)."""
    ids: list[str]
    paths: list[str | None]
    index: dict[str, int] = field(repr=False)

    def rows(self, ids) -> list[int] | None:
        out = [self.index.get(i) for i in ids]
        return None if any(o is None for o in out) else out


def photo_index(con: duckdb.DuckDBPyConnection) -> PhotoIndex:
    from features.diagnostics.look_statistics import photo_rows
    rows = photo_rows(con)
    return PhotoIndex([r[0] for r in rows], [r[1] for r in rows], {r[0]: n for n, r in enumerate(rows)})


def decode(path: Path, side: int = SIDE) -> np.ndarray:
    """One photo as a (3, side, side) uint8 array. Raises OSError / PIL errors on a missing or broken file."""
    from PIL import Image
    with Image.open(path) as im:
        im.draft("RGB", (side, side))
        rgb = im.convert("RGB").resize((side, side), Image.BILINEAR)
    return np.ascontiguousarray(np.asarray(rgb, dtype=np.uint8).transpose(2, 0, 1))


def read_photos(home: Path, paths: list[str | None], side: int = SIDE, threads: int = 2
                ) -> tuple[np.ndarray, dict[int, str]]:
    """The photos at `paths` (relative to `home`) as (n, 3, side, side) uint8, and {position: why} for
    those that could not be read (their rows stay zero)."""
    out = np.zeros((len(paths), 3, side, side), dtype=np.uint8)
    bad: dict[int, str] = {}

    def one(n: int) -> None:
        rel = paths[n]
        if rel is None:
            bad[n] = "no file recorded"
            return
        try:
            out[n] = decode(Path(home) / rel, side)
        except FileNotFoundError:
            bad[n] = "missing file"
        except Exception as e:  # noqa: BLE001 - any unreadable photo is counted with its reason, not fatal
            bad[n] = f"unreadable: {type(e).__name__}"
    with ThreadPoolExecutor(max(1, threads)) as ex:
        list(ex.map(one, range(len(paths))))
    return out, bad


@dataclass
class PixelQuestions:
    """One dataset's questions on the photos it shows: `photos` (n_photos, 3, S, S) uint8; per question
    `shown` (n, 3) rows of `photos` (-1: none; visual cloze only), `choices` (n, 4) rows (coherence: the 4
    photos; ordering: (n, 4, 4), each candidate order's photos), the answer, its recipe and split."""
    dataset_id: str
    task: str
    qids: list[str]
    photos: np.ndarray
    shown: np.ndarray
    choices: np.ndarray
    answers: np.ndarray
    recipes: list[str]
    splits: list[str]
    n_questions: int
    n_left_out: int


def pixel_questions(con: duckdb.DuckDBPyConnection, home: Path, dataset_id: str, task: str, index: PhotoIndex,
                    side: int = SIDE, unreadable: dict[str, str] | None = None) -> PixelQuestions:
    """A dataset's questions with the photos they show decoded; questions with a photo that has no file
    row or cannot be read are left out (counted; the photo's reason goes to `unreadable`)."""
    from features.diagnostics.bias import resolve_dataset
    res = resolve_dataset(con, dataset_id, index, task)
    used = sorted({r for q in res.question_rows for r in q} |
                  {r for ch in res.choice_rows for c in ch for r in (c if isinstance(c, list) else [c])})
    pix, bad = read_photos(home, [index.paths[r] for r in used], side)
    broken = {used[n] for n in bad}
    for n, why in bad.items():
        if unreadable is not None:
            unreadable[index.ids[used[n]]] = why
    local = {r: n for n, r in enumerate(used)}
    keep, shown, choices = [], [], []
    for k, (q, ch) in enumerate(zip(res.question_rows, res.choice_rows)):
        flat = list(q) + [r for c in ch for r in (c if isinstance(c, list) else [c])]
        if any(r in broken for r in flat):
            continue
        keep.append(k)
        shown.append(([local[r] for r in q] + [-1] * 3)[:3])
        choices.append([[local[r] for r in c] for c in ch] if task == "visual_ordering" else [local[r] for r in ch])
    return PixelQuestions(dataset_id, task, [res.qids[k] for k in keep], pix,
                          np.array(shown, dtype=np.int64).reshape(len(keep), 3),
                          np.array(choices, dtype=np.int64).reshape((len(keep), 4, 4) if task == "visual_ordering"
                                                                     else (len(keep), 4)),
                          res.answers[keep], [res.recipe_ids[k] for k in keep], [res.splits[k] for k in keep],
                          res.n_questions, res.n_missing_vectors + len(res.qids) - len(keep))


def _unit(key: str) -> int:
    return int(hashlib.md5(key.encode()).hexdigest()[:12], 16)


def train_fold_count(splits: list[str]) -> int:
    """Folds of the train split: the fewest (2 to MAX_TRAIN_FOLDS) that hold no more questions each than the
    test split (the val split where there is no test split), so that no fold's model trains on fewer
    questions than the test split's model."""
    n_train = sum(s == "train" for s in splits)
    held = sum(s == "test" for s in splits) or sum(s == "val" for s in splits)
    if not held:
        return 2
    return int(min(MAX_TRAIN_FOLDS, max(2, -(-n_train // held))))


def folds(recipes: list[str], splits: list[str], seed: int, train_folds: int | None = None) -> np.ndarray:
    """Fold of each question: the val split is fold `train_folds` (default `train_fold_count`), the test split
    `train_folds + 1`, the train split's recipes cut in `train_folds` folds of near-equal questions (by recipe,
    so a recipe's questions share one: the largest recipes first, ties in a seeded order, each to the fold
    with the fewest questions so far, as scikit-learn's GroupKFold)."""
    k = train_fold_count(splits) if train_folds is None else train_folds
    size: dict[str, int] = {}
    for r, s in zip(recipes, splits):
        if s == "train":
            size[r] = size.get(r, 0) + 1
    load, of = [0] * k, {}
    for r in sorted(size, key=lambda r: (-size[r], _unit(f"pixel-fold:{seed}:{r}"), r)):
        of[r] = min(range(k), key=lambda j: (load[j], j))
        load[of[r]] += size[r]
    return np.array([k if s == "val" else k + 1 if s == "test" else of[r] for r, s in zip(recipes, splits)])


def _model(task: str, width: int = 16, dim: int = 64):
    import torch
    from torch import nn

    def block(i: int, o: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU(), nn.MaxPool2d(2))

    class PixelQuestionOnly(nn.Module):
        """CNN photo embeddings, then a per-choice MLP on the choice set (see the module's doc)."""

        def __init__(self):
            super().__init__()
            self.cnn = nn.Sequential(block(3, width), block(width, 2 * width), block(2 * width, 4 * width),
                                     block(4 * width, 4 * width), nn.AdaptiveAvgPool2d(1), nn.Flatten())
            self.proj = nn.Linear(4 * width + 6, dim)
            n_in = 4 * dim if task == "visual_ordering" else 6 * dim
            self.head = nn.Sequential(nn.Linear(n_in, dim), nn.ReLU(), nn.Linear(dim, 1))

        def embed(self, x: torch.Tensor) -> torch.Tensor:
            x = x.float() / 255.0
            stats = torch.cat([x.mean((2, 3)), x.std((2, 3))], 1)
            return self.proj(torch.cat([self.cnn((x - 0.5) / 0.25), stats], 1))

        def forward(self, photos: torch.Tensor, shown: torch.Tensor, choices: torch.Tensor) -> torch.Tensor:
            e = self.embed(photos)
            if task == "visual_ordering":                      # (b, 4 orders, 4 places, dim)
                return self.head(e[choices].flatten(2)).squeeze(-1)
            c = e[choices]                                     # (b, 4, dim)
            mask = (shown >= 0).float().unsqueeze(-1)
            q = (e[shown.clamp(min=0)] * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            q = q.unsqueeze(1).expand_as(c)
            o = (c.sum(1, keepdim=True) - c) / 3.0
            return self.head(torch.cat([c, q, c * q, (c - q).abs(), c * o, (c - o).abs()], -1)).squeeze(-1)

    return PixelQuestionOnly()


def _batch(pq_photos: np.ndarray, shown: np.ndarray, choices: np.ndarray, device: str = "cpu"):
    """The unique photos of a batch of questions and the questions' indices into them (torch tensors on
    `device`)."""
    import torch
    uniq = np.unique(np.concatenate([shown[shown >= 0], choices.ravel()]))
    sh = np.where(shown >= 0, np.searchsorted(uniq, np.maximum(shown, 0)), -1)
    ch = np.searchsorted(uniq, choices)
    return tuple(torch.from_numpy(x).to(device) for x in (pq_photos[uniq], sh.astype(np.int64), ch))


def fit_fold(job: tuple) -> tuple[np.ndarray, int, float]:
    """Train one fold's model and score its held-out questions: (logits (n_held, 4), epochs run, seconds).
    `job`: (task, photos, shown, choices, answers, train rows, stop rows, held rows, seed, epochs, alternate
    rows or None (`with_alternates`), device); with alternate rows, a fourth item: their logits."""
    import torch
    import torch.nn.functional as F
    task, photos, shown, choices, answers, train, stop, held, seed, epochs, alt, device = job
    t0 = time.perf_counter()
    torch.set_num_threads(1)
    if device != "cpu":
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = _model(task).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    y = torch.from_numpy(answers.astype(np.int64)).to(device)

    def logits(rows: np.ndarray) -> torch.Tensor:
        return model(*_batch(photos, shown[rows], choices[rows], device))

    def evaluate(rows: np.ndarray) -> tuple[np.ndarray, float]:
        model.eval()
        out = []
        with torch.no_grad():
            for s in range(0, len(rows), 256):
                out.append(logits(rows[s:s + 256]))
        lg = torch.cat(out) if out else torch.zeros((0, 4), device=device)
        loss = float(F.cross_entropy(lg, y[rows])) if len(rows) else 0.0
        return lg.cpu().numpy().astype(np.float64), loss

    best, state, bad, run = float("inf"), None, 0, 0
    for _epoch in range(epochs):
        model.train()
        run += 1
        perm = rng.permutation(train)
        for s in range(0, len(perm), BATCH):
            rows = perm[s:s + BATCH]
            if len(rows) < 2:                  # batch norm needs two photos' worth of a batch
                continue
            opt.zero_grad()
            F.cross_entropy(logits(rows), y[rows]).backward()
            opt.step()
        if not len(stop):
            state = {k: v.clone() for k, v in model.state_dict().items()}
            continue
        _, loss = evaluate(stop)
        if loss < best - 1e-4:
            best, bad = loss, 0
            state = {k: v.clone() for k, v in model.state_dict().items()}
        else:
            bad += 1
            if bad >= PATIENCE:
                break
    if state is not None:
        model.load_state_dict(state)
    lg, _ = evaluate(held)
    if alt is None:
        return lg, run, time.perf_counter() - t0
    return lg, run, time.perf_counter() - t0, _alternate_logits(model, photos, shown, choices, answers, held, alt,
                                                                device)


def _alternate_logits(model, photos: np.ndarray, shown: np.ndarray, choices: np.ndarray, answers: np.ndarray,
                      held: np.ndarray, alt: np.ndarray, device: str = "cpu") -> np.ndarray:
    """Coherence: (n_held, A, 4) logits of each held-out question with its alternate foreign photo `alt`
    (rows of `photos`, -1: none) in the answer's place (NaN where there is no alternate)."""
    import torch
    a = alt[held]
    out = np.full((len(held), a.shape[1], 4), np.nan)
    pairs = np.argwhere(a >= 0)
    if not len(pairs):
        return out
    q = held[pairs[:, 0]]
    ch = choices[q].copy()
    ch[np.arange(len(q)), answers[q]] = a[pairs[:, 0], pairs[:, 1]]
    model.eval()
    got = []
    with torch.no_grad():
        for s in range(0, len(q), 256):
            got.append(model(*_batch(photos, shown[q[s:s + 256]], ch[s:s + 256], device)).cpu().numpy()
                       .astype(np.float64))
    out[pairs[:, 0], pairs[:, 1]] = np.concatenate(got)
    return out


def fold_jobs(pq: PixelQuestions, seed: int, epochs: int = EPOCHS, alt: np.ndarray | None = None,
              device: str = "cpu") -> list[tuple[int, tuple]]:
    """(fold, fit_fold job) of every fold of a dataset with questions to hold out and others to train on;
    with `alt` (`with_alternates`), each fold's model also scores its questions' alternates; on `device`."""
    f = folds(pq.recipes, pq.splits, seed)
    jobs = []
    for k in sorted(set(f.tolist())):
        held = np.where(f == k)[0]
        rest = np.where(f != k)[0]
        back = np.array([_unit(f"pixel-stop:{seed}:{pq.recipes[i]}") % 100 < STOP_SHARE for i in rest], dtype=bool)
        train, stop = rest[~back], rest[back]
        if len(train) < 2:
            continue
        fold_seed = _unit(f"pixel-model:{seed}:{pq.dataset_id}:{k}") % (2 ** 31)
        jobs.append((k, (pq.task, pq.photos, pq.shown, pq.choices, pq.answers, train, stop, held, fold_seed, epochs,
                         alt, device)))
    return jobs


def pixel_probe_rows(con: duckdb.DuckDBPyConnection, home: Path, dataset_ids: list[str] | None = None,
                     seed: int = 0, side: int = SIDE, epochs: int = EPOCHS, workers: int | None = None) -> dict:
    """The pixel probe on `dataset_ids` (default: every dataset of a visual task): `load_questions`, then
    `probe`. Returns {"datasets": [one row per dataset], "photos_unreadable": {reason: count}, "seed", "side",
    "epochs"}; `record_pixel_checks` writes it."""
    return probe(*load_questions(con, home, dataset_ids, side, epochs), seed=seed, side=side, epochs=epochs,
                 workers=workers)


def load_questions(con: duckdb.DuckDBPyConnection, home: Path, dataset_ids: list[str] | None = None,
                   side: int = SIDE, epochs: int = EPOCHS, index: PhotoIndex | None = None
                   ) -> tuple[list[tuple[dict, PixelQuestions, float]], dict[str, str]]:
    """What the probe reads from the warehouse, so that its models train with no connection open: per visual
    dataset (its `list_datasets` row with its content hash, its questions with their photos, the seconds the
    reading took), and {image_id: why} of the photos that could not be read. `index`: the warehouse's
    `photo_index`, when the caller has it already. Bad arguments raise ValueError."""
    from features.diagnostics.bias import list_datasets
    if side < 8 or side > 128:
        raise ValueError(f"--side must be 8 to 128 pixels, got {side}")
    if epochs < 1:
        raise ValueError(f"--epochs must be 1 or more, got {epochs}")
    pixel_device()                               # a bad MRQA_PIXEL_DEVICE is refused before any photo is read
    rows = list_datasets(con, dataset_ids)
    text = [r["dataset_id"] for r in rows if r["task"] not in VISUAL_TASKS]
    if dataset_ids and text:
        raise ValueError(f"{', '.join(text)}: the pixel probe reads photos; textual cloze shows none")
    rows = [r for r in rows if r["task"] in VISUAL_TASKS]
    index = index or photo_index(con)
    sha = dict(con.execute("SELECT dataset_id, content_sha256 FROM datasets WHERE list_contains(?, dataset_id)",
                           [[r["dataset_id"] for r in rows]]).fetchall())
    unreadable: dict[str, str] = {}
    loaded = []
    for r in rows:
        t0 = time.perf_counter()
        pq = pixel_questions(con, home, r["dataset_id"], r["task"], index, side, unreadable)
        loaded.append(({**r, "content_sha256": sha.get(r["dataset_id"])}, pq, time.perf_counter() - t0))
    return loaded, unreadable


def with_alternates(pq: PixelQuestions, alts: dict[str, list[str]], index: PhotoIndex, home: Path,
                    side: int = SIDE, unreadable: dict[str, str] | None = None) -> tuple[PixelQuestions, np.ndarray]:
    """Coherence: `pq` with its questions' alternate foreign photos (qid -> image ids, in order; e.g. those AF
    recorded) decoded and added to its photos, and their rows (n, A), -1 past a question's alternates and for
    a photo with no file row or that cannot be read (its reason goes to `unreadable`; that alternate gets no
    logits). The rows are in `alts`' order, so (question, column) names the same alternate."""
    from dataclasses import replace
    width = max((len(alts.get(q, ())) for q in pq.qids), default=0)
    ids = sorted({i for q in pq.qids for i in alts.get(q, ())})
    have = [i for i in ids if i in index.index]
    for i in set(ids) - set(have):
        if unreadable is not None:
            unreadable[i] = "no file recorded"
    pix, bad = read_photos(home, [index.paths[index.index[i]] for i in have], side)
    for n, why in bad.items():
        if unreadable is not None:
            unreadable[have[n]] = why
    at = {i: len(pq.photos) + n for n, i in enumerate(have) if n not in bad}
    rows = np.full((len(pq.qids), width), -1, dtype=np.int64)
    for n, q in enumerate(pq.qids):
        for j, i in enumerate(alts.get(q, ())):
            rows[n, j] = at.get(i, -1)
    return replace(pq, photos=np.concatenate([pq.photos, pix])), rows


def out_of_fold_logits(pq: PixelQuestions, seed: int = 0, epochs: int = EPOCHS, workers: int | None = None,
                       alt: np.ndarray | None = None) -> tuple[np.ndarray, list[tuple[int, tuple]], list[tuple]]:
    """Every question's 4 logits from the model of its fold (`fold_jobs`; NaN where no fold's model scored
    it), the jobs and their `fit_fold` results. The folds' models train in `workers` spawned processes
    (default one per core), or in turn with one (on CUDA, `pixel_device`: in turn on the device). With `alt`
    (coherence, `with_alternates`), each result's fourth item is its held-out questions' alternate logits
    (`alternate_logits` gathers them)."""
    from training.procs import in_turn, spawn_map
    if alt is not None and pq.task != "visual_coherence":
        raise ValueError(f"alternate foreign photos are scored for visual coherence only, not {pq.task}")
    device = pixel_device()
    jobs = fold_jobs(pq, seed, epochs, alt, device)
    n = 1 if device != "cpu" else workers if workers is not None else min(len(jobs), os.cpu_count() or 1)
    results = spawn_map(fit_fold, [j for _, j in jobs], n) if n > 1 and len(jobs) > 1 else \
        in_turn(fit_fold, [j for _, j in jobs])
    lg = np.full((len(pq.qids), 4), np.nan)
    for (k, job), (fold_lg, run, secs, *_) in zip(jobs, results):
        lg[job[7]] = fold_lg
        log.info("pixel probe: %s fold %d: %d questions held out, %d epochs, %.1f s", pq.dataset_id, k,
                 len(job[7]), run, secs)
    return lg, jobs, results


def alternate_logits(n: int, width: int, jobs: list[tuple[int, tuple]], results: list[tuple]) -> np.ndarray:
    """(n, width, 4): every question's alternate logits from its fold's model (`out_of_fold_logits` with
    `alt`); NaN where none."""
    out = np.full((n, width, 4), np.nan)
    for (_, job), res in zip(jobs, results):
        out[job[7]] = res[3]
    return out


def probe(loaded: list[tuple[dict, PixelQuestions, float]], unreadable: dict[str, str], seed: int = 0,
          side: int = SIDE, epochs: int = EPOCHS, workers: int | None = None) -> dict:
    """The folds' models of every loaded dataset (`load_questions`), trained and scored; the result of
    `pixel_probe_rows`."""
    from features.diagnostics.bias import r4
    from features.diagnostics.question_only import accuracy_interval
    out = []
    for r, pq, t_read in loaded:
        t0 = time.perf_counter()
        lg, jobs, results = out_of_fold_logits(pq, seed, epochs, workers)
        pred = np.where(np.isnan(lg).any(1), -1, np.nan_to_num(lg).argmax(1))
        scored = pred >= 0
        hit = (pred == pq.answers)[scored]
        groups = [rc for rc, s in zip(pq.recipes, scored) if s]
        test = np.array([s == "test" for s in pq.splits], dtype=bool)[scored]
        ci = accuracy_interval(hit, groups, seed=seed)
        tci = accuracy_interval(hit[test], [g for g, t in zip(groups, test) if t], seed=seed)
        out.append({"dataset_id": pq.dataset_id, "content_sha256": r["content_sha256"], "task": pq.task,
                    "setting": r.get("setting"),
                    "n_questions": pq.n_questions, "n_scored": int(scored.sum()),
                    "n_left_out": pq.n_questions - int(scored.sum()), "chance": 0.25,
                    "accuracy": r4(float(hit.mean())) if hit.size else None,
                    "ci": [r4(x) for x in ci] if ci else None,
                    "test_accuracy": r4(float(hit[test].mean())) if test.any() else None,
                    "test_ci": [r4(x) for x in tci] if tci else None, "n_test": int(test.sum()),
                    "train_folds": train_fold_count(pq.splits),
                    "fewest_trained": min((len(j[5]) for _, j in jobs), default=0),
                    "photos": len(pq.photos), "seconds_read": round(t_read, 1),
                    "seconds_train": round(sum(x[2] for x in results), 1)})
        log.info("pixel probe: %s: %s of %d questions scored (%d left out), %.1f s", pq.dataset_id,
                 f"{100 * hit.mean():.1f}%" if hit.size else "nothing", int(scored.sum()),
                 pq.n_questions - int(scored.sum()), t_read + time.perf_counter() - t0)
    reasons: dict[str, int] = {}
    for why in unreadable.values():
        key = why.split(":")[0]
        reasons[key] = reasons.get(key, 0) + 1
    if unreadable:
        log.warning("pixel probe: %d photos could not be read (e.g. %s: %s); questions showing them are left out",
                    len(unreadable), *next(iter(unreadable.items())))
    return {"datasets": out, "photos_unreadable": reasons, "seed": seed, "side": side, "epochs": epochs,
            "device": pixel_device()}


def record_pixel_checks(con: duckdb.DuckDBPyConnection, res: dict) -> int:
    """pixel_checks rows of `pixel_probe_rows`' result (datasets with a figure), each with the content hash it
    was measured on; a dataset's earlier row is replaced. Returns the rows written."""
    from etl.warehouse import transaction, utcnow
    rows = [[r["dataset_id"], r["content_sha256"], r["task"], r["n_scored"], r["accuracy"],
             *(r["ci"] or (None, None)), r["test_accuracy"], r["n_test"], res["seed"], res["side"], res["epochs"],
             r["train_folds"], r["fewest_trained"], utcnow()]
            for r in res["datasets"] if r["accuracy"] is not None and r["content_sha256"]]
    if rows:
        with transaction(con):
            con.executemany("INSERT OR REPLACE INTO pixel_checks (dataset_id, content_sha256, task, n, accuracy, "
                            "ci_low, ci_high, test_accuracy, n_test, seed, side, epochs, train_folds, fewest_trained, "
                            "computed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    log.info("pixel probe: recorded %d datasets in pixel_checks", len(rows))
    return len(rows)


def format_table(res: dict) -> str:
    """The printed table: one line per dataset, every question and the test split, with 95% intervals."""
    def f(a, ci) -> str:
        if a is None:
            return "-"
        return f"{100 * a:.1f}% [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if ci else f"{100 * a:.1f}%"
    lines = [f"{'dataset':40s} {'scored':>6s}  {'every question':>22s}  {'test split':>22s}  {'folds':>5s}  "
             f"{'fewest':>6s}  {'train s':>7s}"]
    for r in res["datasets"]:
        lines.append(f"{r['dataset_id']:40s} {r['n_scored']:6d}  {f(r['accuracy'], r['ci']):>22s}  "
                     f"{f(r['test_accuracy'], r['test_ci']):>22s}  {r['train_folds'] + 2:5d}  "
                     f"{r['fewest_trained']:6d}  {r['seconds_train']:7.1f}")
    bad = ", ".join(f"{k} {v}" for k, v in sorted(res["photos_unreadable"].items()))
    lines.append(f"chance 25.0%; a CNN question-only model on {res['side']} x {res['side']} photos "
                 f"({res.get('device', 'cpu')}), every question "
                 "scored by a model that never saw its split's photos or its recipe; folds: the train split's and the "
                 "val and test splits; fewest: questions the smallest fold's model trained on"
                 + (f"; unreadable: {bad}" if bad else ""))
    return "\n".join(lines)
