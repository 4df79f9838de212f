"""The pooled adversary of adversarial filtering: a GM3C question-only model trained on every AF
setting of a task at once, scoring each question out of fold.

AF (features/datasets/adversarial.py) picks distractors against a linear ensemble trained per
setting. A nonlinear question-only model that sees all settings' questions (the settings share one
recipe split) still learns a cue AF leaves: on the 1,000-recipe demo it reads 37-52% of the AF visual
cloze questions (`mrqa sweep --pooled`). `out_of_fold_scores` trains that model k times, each time on
the questions of the other folds of recipes (all splits; about 10% of those recipes held out for early
stopping), and returns for every question the logits of its choices and of its recorded alternates
(each scored in place: cloze, at the placeholder; coherence, as the foreign image; ordering, a wrong
order scored as a choice). `swap_plan` aims
the questions it solves beyond a share at the answer ranks short of theirs (`swaps_for`,
`coherence_swap_for`, with the centre and distance-probe guards); `drop_plan` names the questions it
still solves with probability at least `tau`, never taking a dataset below `min_kept` of its plain
setting's questions (nor, optionally, below a share solved). Deterministic for a seed.
"""
from __future__ import annotations

import hashlib
import json
import logging
import time
import zipfile
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from features.datasets.adversarial import answer_rank, objective
from training.config import CLOZE_TASKS, resolve_configs
from training.data import QADataset, Split, load_for_training
from training.pooled import pool

FOLDS = 4
FOLD_BY = ("recipe", "split")
TAU = 0.5
MIN_KEPT = 0.4           # the drop's floor: a dataset keeps at least this share of its plain setting's questions
ROUNDS = 2
ADVERSARIES = 1          # pooled models per pass, each with its own seed and fold split (their mean logits)
SOLVED_SHARE = 0.25      # swap rounds: the share of a dataset's questions the adversary may still solve

log = logging.getLogger(__name__)


def _unit(key: str) -> int:
    return int(hashlib.sha256(key.encode()).hexdigest()[:12], 16)


def check_fold_by(fold_by: str, name: str = "fold_by") -> None:
    """Refuse a `fold_by` outside FOLD_BY (`name`: how the caller's user spells the option)."""
    if fold_by not in FOLD_BY:
        raise ValueError(f"{name} must be one of {', '.join(FOLD_BY)}, got {fold_by!r}")


def out_of_fold_scores(export_dir: Path, dataset_ids: list[str], recipe_of: dict[tuple[str, str], str],
                       folds: int = FOLDS, seed: int = 0, size: str = "small", max_epochs: int = 30,
                       patience: int = 5, lance_uri: str | None = None,
                       alternates: dict[tuple[str, str], list[str]] | None = None,
                       alt_vectors: dict[str, np.ndarray] | None = None,
                       fold_by: str = "recipe", checkpoint: Path | None = None,
                       only_folds: Collection[int] | None = None) -> dict[str, dict[str, dict]]:
    """dataset_id -> qid -> {"choices": the logits of its 4 choices, "answer": the answer's index,
    "alts": the logits of its alternates}, each question scored by a question-only model that never
    trained on its recipe. `recipe_of`: (dataset_id, qid) -> recipe. `alternates` (visual cloze):
    (dataset_id, qid) -> image ids that could stand in a distractor's place, each scored as the image
    at the placeholder (the question-only model scores each choice alone, so an alternate's logit is
    the logit it would have as a choice); their vectors in `alt_vectors`.

    `fold_by`: "recipe", k folds of recipes over all splits; "split", the val and the test split are
    each a fold of their own and the train split's recipes make the k others. A distractor comes from
    another recipe of the same split, so with folds of recipes a held-out answer image has been seen
    as a distractor of other questions in training (and a held-out distractor as another question's
    answer), and the model scores it by that memory; a whole split held out shares no image with the
    rest, so its questions are scored as a model trained on the other splits scores them.

    `checkpoint`: a folder where each fold's logits are written as soon as its model is scored; a later
    call with the same folder skips the folds found there (a fold's file is keyed by everything its model
    depends on but the vectors, which the caller keys the folder by). Each fold's model is seeded by
    itself, so a run resumed after an interruption gives the logits of a run in one go: byte for byte
    with tiny models (tested); at the small and paper sizes MKL may round a fold trained in another
    process's memory state differently in the last float32 bits (up to 4e-6 measured), unless the
    processes run with MKL_CBWR=AUTO,STRICT.

    `only_folds`: train (or find) these folds' models only, write their logits to `checkpoint` and return
    {}; several processes can so train one seed's folds side by side, and a call without it then reads
    them all (`python -m training.af_jobs --workers` above the number of seeds)."""
    check_fold_by(fold_by)
    if only_folds is not None and checkpoint is None:
        raise ValueError("only_folds needs a checkpoint folder to write the folds' logits to")
    from training.ddp import init_distributed
    from training.train import autocast, build_model, fit, set_seed
    if folds < 2:
        raise ValueError("--folds must be at least 2")
    mc, tc = resolve_configs(size, text_features="vectors", max_epochs=max_epochs, patience=patience, seed=seed)
    dss = (_loaded_once(export_dir, dataset_ids, tc, lance_uri) if only_folds is not None else
           [load_for_training(export_dir, d, "vectors", tc, lance_uri) for d in dataset_ids])
    union = pool(dss, splits=("train", "val", "test"))
    names = [s for s in ("train", "val", "test") if s in union.splits]
    parts = [union.splits[s] for s in names]
    qids = [q for p in parts for q in p.qids]
    rr, qq, aa, tt = (np.concatenate([getattr(p, f) for p in parts])
                      for f in ("recipe_row", "query", "answer", "target_ctx"))
    recipes = [recipe_of[tuple(q.split("/", 1))] for q in qids]
    fold = np.array([_unit(f"fold:{seed}:{r}") % folds for r in recipes])
    if fold_by == "split":
        split = np.concatenate([np.full(len(p.qids), s) for s, p in zip(names, parts)])
        fold = np.where(split == "val", folds, np.where(split == "test", folds + 1, fold))
    stop_key = np.array([_unit(f"stop:{seed}:{r}") for r in recipes], dtype=np.uint64)
    alts = [list((alternates or {}).get(tuple(q.split("/", 1)), ())) for q in qids]
    missing = sorted({i for al in alts for a in al for i in ([a] if isinstance(a, str) else a)
                      if i not in (alt_vectors or {})})
    if missing:
        raise ValueError(f"{len(missing)} alternates have no image vector (e.g. {missing[0]})")

    def sub(ix: np.ndarray) -> Split:
        return Split([qids[i] for i in ix], rr[ix], qq[ix], aa[ix], tt[ix])

    _, device = init_distributed(tc)
    logits = np.zeros(qq.shape[:2], dtype=np.float64)
    alt_logits: list[np.ndarray] = [np.zeros(len(a)) for a in alts]
    all_folds = sorted(set(fold.tolist()))
    for n_fold, f in enumerate(all_folds, 1):
        if only_folds is not None and f not in only_folds:
            continue
        held = np.where(fold == f)[0]
        inner = _early_stop_rows(fold != f, stop_key)
        path = Path(checkpoint) / f"fold-{f}.npz" if checkpoint else None
        key = _fold_key(seed, f, size, max_epochs, patience, [qids[i] for i in held],
                        [qids[i] for i in np.where(fold != f)[0]], [alts[i] for i in held]) if path else ""
        done = _read_fold(path, key, len(held)) if path else None
        if done is not None:
            logits[held], lens = done[0], [len(alts[i]) for i in held]
            for i, a in zip(held, np.split(done[1], np.cumsum(lens)[:-1])):
                alt_logits[i] = a
            log.info("seed %d: fold %d/%d (%d questions held out) read from %s", seed, n_fold, len(all_folds),
                     len(held), path)
            continue
        t0 = time.perf_counter()
        ds: QADataset = replace(union, splits={"train": sub(np.where((fold != f) & ~inner)[0]),
                                               "val": sub(np.where(inner)[0]), "test": sub(held)})
        set_seed(seed + f)
        model = build_model(ds, replace(mc, scorer="question_only", text_features="vectors", align=False))
        fit(model, ds, tc, device)
        model.eval()
        with torch.no_grad():
            for s in range(0, len(held), 256):
                idx = np.arange(s, min(s + 256, len(held)))
                b = ds.batch("test", idx, device)
                with autocast(device, tc.amp):
                    logits[held[idx]] = model(b).float().cpu().numpy()
                rows = held[idx]
                if any(alts[i] for i in rows):
                    al = _alt_logits(model, b, [alts[i] for i in rows], alt_vectors, union.task, device, tc.amp)
                    for k, i in enumerate(rows):
                        alt_logits[i] = al[k]
        if path:
            _write_fold(path, key, logits[held], [alt_logits[i] for i in held])
        log.info("seed %d: fold %d/%d (%d questions held out) trained and scored in %.1f s on %s", seed, n_fold,
                 len(all_folds), len(held), time.perf_counter() - t0, device.type)
    if only_folds is not None:
        return {}
    out: dict[str, dict[str, dict]] = {}
    for i, q in enumerate(qids):
        d, qid = q.split("/", 1)
        out.setdefault(d, {})[qid] = {"choices": np.round(logits[i], 6), "answer": int(aa[i]),
                                      "alts": np.round(alt_logits[i], 6)}
    return out


_LOADED: dict = {}      # a fold job's process: the export it loaded last (its other fold jobs read the same one)


def _loaded_once(export_dir: Path, dataset_ids: list[str], tc, lance_uri: str | None) -> list[QADataset]:
    """The datasets of an export as `load_for_training` gives them, loaded once per process: the fold jobs a
    process runs in turn (`only_folds`) read the same export, and loading it was a fifth of each job (about 3
    s of the demo's textual cloze datasets). Keyed by the export's files (name, size, mtime) and the loading
    limits; one export is kept."""
    root = Path(export_dir)
    files = tuple(sorted((str(f.relative_to(root)), st.st_size, st.st_mtime_ns)
                         for f in root.rglob("*.parquet") for st in (f.stat(),)))
    key = (str(root.resolve()), tuple(dataset_ids), lance_uri, tc.max_steps_per_recipe, tc.max_tokens_per_step,
           tc.min_token_freq, tc.max_vocab, tc.max_train_questions, files)
    if key not in _LOADED:
        _LOADED.clear()
        _LOADED[key] = [load_for_training(root, d, "vectors", tc, lance_uri) for d in dataset_ids]
    return _LOADED[key]


def _fold_key(seed: int, f: int, size: str, max_epochs: int, patience: int, held: list[str], trained: list[str],
              alts: list[list]) -> str:
    """What one fold's model and logits depend on, besides the vectors: the seed, the fold, the model's
    size and stopping, the questions it trains on and scores, and the held-out questions' alternates."""
    doc = {"seed": seed, "fold": f, "size": size, "max_epochs": max_epochs, "patience": patience,
           "held": held, "trained": trained, "alts": alts}
    return hashlib.sha256(json.dumps(doc, default=list).encode()).hexdigest()


def _read_fold(path: Path, key: str, n: int) -> tuple[np.ndarray, np.ndarray] | None:
    """A fold's (choice logits, alternate logits) from its checkpoint file; None when there is none, or it is
    another fold's or unreadable (then the fold is trained again and the file replaced)."""
    if not path.is_file():
        return None
    try:
        with np.load(path) as z:
            if str(z["key"]) != key or z["logits"].shape[0] != n:
                log.warning("%s is another run's fold: training it again", path)
                return None
            return z["logits"].astype(np.float64), z["alts"].astype(np.float64)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        log.warning("%s is unreadable (%s): training the fold again", path, e)
        return None


def _write_fold(path: Path, key: str, logits: np.ndarray, alts: list[np.ndarray]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:                 # a run stopped while writing leaves no half file behind
        np.savez(fh, key=np.array(key), logits=logits,
                 alts=np.concatenate(alts) if alts else np.zeros(0))
    tmp.replace(path)


def linear_verdicts(scores: dict[str, dict[str, np.ndarray]], answers: dict[str, dict[str, int]]
                    ) -> dict[str, dict[str, tuple[float, bool]]]:
    """`verdicts` of the linear probe: dataset_id -> qid -> (softmax probability of the answer among its
    cross-fitted scores, the answer is the argmax)."""
    return verdicts({d: {q: {"choices": np.asarray(s, np.float64), "answer": answers[d][q]} for q, s in qs.items()}
                     for d, qs in scores.items()})


def mean_scores(members: list[dict[str, dict[str, dict]]]) -> dict[str, dict[str, dict]]:
    """The ensemble of several `out_of_fold_scores` (each its own seed, so its own fold split): per
    question the mean of their choice and alternate logits. One model's verdict on a question is partly
    the luck of its split and initialisation; questions kept because one model missed them are solved
    by the next one (a fresh model of the same kind) more often than chance."""
    if not members:
        raise ValueError("an ensemble needs at least one member")
    if len(members) == 1:
        return members[0]
    out: dict[str, dict[str, dict]] = {}
    for d, qs in members[0].items():
        out[d] = {}
        for q, s in qs.items():
            got = [m[d][q] for m in members]
            out[d][q] = {"choices": np.round(np.mean([g["choices"] for g in got], axis=0), 6),
                         "answer": s["answer"],
                         "alts": np.round(np.mean([g["alts"] for g in got], axis=0), 6) if len(s["alts"])
                         else s["alts"]}
    return out


def guided_scores(scores: dict[str, dict[str, dict]], other: dict[str, dict[str, dict]]
                  ) -> dict[str, dict[str, dict]]:
    """Coherence scores read by two adversaries: per question and per alternate (A, 4), the mean of the two
    models' log-probabilities over the 4 choices (a product of experts), so a choice or alternate set
    scores well only where both find it plausible. Where `other` has no question, or NaN logits for an
    alternate (a photo it could not read), `scores`' log-probabilities alone."""
    from scipy.special import log_softmax

    def lsm(x) -> np.ndarray:                    # log-probabilities over each row's 4 choices
        return log_softmax(np.asarray(x, np.float64), axis=-1)
    out: dict[str, dict[str, dict]] = {}
    for d, qs in scores.items():
        out[d] = {}
        for q, s in qs.items():
            g = dict(s)
            g["choices"] = lsm(s["choices"])
            alts = np.asarray(s["alts"], np.float64)
            if alts.ndim == 2 and len(alts):
                g["alts"] = lsm(alts)
            o = other.get(d, {}).get(q)
            if o is not None:
                if o["answer"] != s["answer"]:
                    raise ValueError(f"{d} {q}: the two adversaries disagree on the answer")
                g["choices"] = np.round((g["choices"] + lsm(o["choices"])) / 2, 6)
                if alts.ndim == 2 and len(alts):
                    oa = np.asarray(o["alts"], np.float64)
                    if oa.shape != alts.shape:
                        raise ValueError(f"{d} {q}: {oa.shape[0]} alternates scored, {alts.shape[0]} recorded")
                    ok = ~np.isnan(oa).any(1)
                    g["alts"] = np.round(np.where(ok[:, None], (g["alts"] + lsm(np.nan_to_num(oa))) / 2, g["alts"]), 6)
            out[d][q] = g
    return out


def member_seed(seed: int, k: int) -> int:
    """The seed of the k-th member of a pass seeded `seed` (k = 0: `seed` itself)."""
    return seed + 7919 * k


def _early_stop_rows(train: np.ndarray, stop_key: np.ndarray) -> np.ndarray:
    """The training rows held out for early stopping: those of about 10% of the training recipes (the
    smallest seeded keys; at least one recipe, never all of them when there are two or more)."""
    keys = np.unique(stop_key[train])
    if len(keys) < 2:
        raise ValueError("the pooled adversary needs at least two recipes in each fold's training part; "
                         "generate on more recipes or use fewer --folds")
    cut = keys[min(max(1, len(keys) // 10), len(keys) - 1) - 1]
    return train & (stop_key <= cut)


def _alt_logits(model, b: dict, alts: list[list[str]], alt_vectors: dict[str, np.ndarray], task: str,
                device, amp: bool) -> list[np.ndarray]:
    """Per question of batch `b`, its alternates' logits. Visual cloze: (A,), each alternate at the
    placeholder (the question-only model scores each choice alone, so this is the logit it would have
    as a choice). Visual coherence: (A, 4), the 4 choices' logits with the alternate as the foreign
    image (choice `answer`'s query, the 3 coherent images, is the same; every other choice's query holds
    the foreign image, at the answer's place among the other three). Visual ordering: (A,), each
    alternate an image sequence (its ids in order), scored as a choice's query."""
    from training.train import autocast
    n = len(alts)
    width = max(len(a) for a in alts)
    dev = b["query"].device
    ar = torch.arange(n, device=dev)
    ans = b["answer"]
    if task == "visual_ordering":
        m, d = b["query"].shape[2:]
        seq = torch.zeros(n, width, m, d, dtype=b["query"].dtype)
        mask = torch.zeros(n, width, m, dtype=b["query_mask"].dtype)
        for k, a in enumerate(alts):
            for j, ids in enumerate(a):
                seq[k, j, :len(ids)] = torch.as_tensor(np.stack([alt_vectors[x] for x in ids]))
                mask[k, j, :len(ids)] = 1
        with torch.no_grad(), autocast(device, amp):
            out = model({**b, "query": seq.to(dev), "query_mask": mask.to(dev)}).float().cpu().numpy()
        return [out[k, :len(a)].astype(np.float64) for k, a in enumerate(alts)]
    vec = torch.zeros(n, width, b["query"].shape[-1], dtype=b["query"].dtype)
    for k, a in enumerate(alts):
        if a:
            vec[k, :len(a)] = torch.as_tensor(np.stack([alt_vectors[x] for x in a]))
    vec = vec.to(b["query"].device)
    if task in CLOZE_TASKS:           # textual cloze: the titles' vectors, as the images'
        q = b["query"][ar, ans]                                                   # (B, M, d)
        slot = (b["query"] != b["query"][:, :1]).any(-1).any(1).float().argmax(1)  # where the choices differ
        aq = q[:, None].repeat(1, width, 1, 1)
        aq[ar[:, None], torch.arange(width, device=dev)[None, :], slot[:, None]] = vec
        qm = b["query_mask"][ar, ans][:, None].expand(-1, width, -1)
        with torch.no_grad(), autocast(device, amp):
            out = model({**b, "query": aq, "query_mask": qm}).float().cpu().numpy()
        return [out[k, :len(a)].astype(np.float64) for k, a in enumerate(alts)]
    # coherence: the 3 other choices' queries, each with the alternate in the foreign image's place
    others = torch.stack([torch.tensor([j for j in range(4) if j != int(a)]) for a in ans.cpu()]).to(dev)  # (B, 3)
    q = b["query"][ar[:, None], others]                                            # (B, 3, M, d)
    at = ans[:, None] - (others < ans[:, None]).long()                              # the foreign's place
    aq = q[:, None].repeat(1, width, 1, 1, 1)                                      # (B, A, 3, M, d)
    aq[ar[:, None, None], torch.arange(width, device=dev)[None, :, None], torch.arange(3, device=dev)[None, None, :],
       at[:, None, :].expand(-1, width, -1)] = vec[:, :, None, :].expand(-1, -1, 3, -1)
    qm = b["query_mask"][ar[:, None], others][:, None].expand(-1, width, -1, -1)
    with torch.no_grad(), autocast(device, amp):
        o = model({**b, "query": aq.reshape(n, width * 3, *aq.shape[3:]),
                   "query_mask": qm.reshape(n, width * 3, -1)}).float().cpu().numpy().reshape(n, width, 3)
        a_logit = model(b).float().cpu().numpy()[np.arange(n), ans.cpu().numpy()]
    res = []
    for k, a in enumerate(alts):
        full = np.zeros((len(a), 4))
        full[:, others[k].cpu().numpy()] = o[k, :len(a)]
        full[:, int(ans[k])] = a_logit[k]
        res.append(full)
    return res


def _rank(choices: np.ndarray, answer: int) -> int:
    """How many other choices score above the answer (0: the model picks it)."""
    return int(answer_rank(choices, np.asarray(answer))[0])


def _p_answer(s: dict) -> float:
    """The softmax probability of the answer among a question's choice logits."""
    z = np.exp(s["choices"] - s["choices"].max())
    return float(z[s["answer"]] / z.sum())


def verdicts(scores: dict[str, dict[str, dict]]) -> dict[str, dict[str, tuple[float, bool]]]:
    """dataset_id -> qid -> (probability of the answer, answer is the argmax) from out-of-fold logits."""
    out: dict[str, dict[str, tuple[float, bool]]] = {}
    for d, qs in scores.items():
        for qid, s in qs.items():
            out.setdefault(d, {})[qid] = (round(_p_answer(s), 6), int(np.argmax(s["choices"])) == s["answer"])
    return out


def target_ranks(scores: dict[str, dict], order_key, solved_share: float = SOLVED_SHARE) -> dict[str, int]:
    """qid -> the answer rank to aim at, for the questions to change: the rank counts of a dataset made
    as even as the solved ones allow. The model's pick is the answer on c0 questions; the
    c0 - solved_share x n most confidently solved (`order_key`, larger first) move, each to the rank
    short of its share ((1 - solved_share) / 3 of n) the most (ties: the lower rank), so no rank, the
    reversed cue "the least plausible choice is the answer" included, ends over its share."""
    n = len(scores)
    rank = {q: _rank(s["choices"], s["answer"]) for q, s in scores.items()}
    counts = np.bincount(list(rank.values()), minlength=4).astype(float) if n else np.zeros(4)
    solved = sorted((q for q, r in rank.items() if r == 0), key=lambda q: (-order_key(q), q))
    share = np.array([solved_share] + [(1 - solved_share) / 3] * 3) * n
    out = {}
    for q in solved[:max(0, int(np.floor(counts[0] - share[0])))]:
        r = 1 + int(np.argmax(share[1:] - counts[1:]))
        if counts[r] >= share[r]:
            break
        out[q] = r
        counts[r] += 1
        counts[0] -= 1
    return out


def centre(V: np.ndarray) -> int:
    """The centre of a choice set (4, d): the choice with the highest mean cosine to the others (the
    centre rule of features/diagnostics/bias.py picks it)."""
    U = V / np.maximum(np.linalg.norm(V, axis=1, keepdims=True), 1e-12)
    g = U @ U.T
    return int(np.argmax((g.sum(1) - np.diag(g)) / (len(V) - 1)))


def swaps_for(choices: np.ndarray, answer: int, alts: np.ndarray, closer: np.ndarray, alt_closer: np.ndarray,
              need: int, exact: bool, target: int, V: np.ndarray | None = None,
              W: np.ndarray | None = None, texts: list[str] | None = None,
              alt_texts: list[str] | None = None) -> list[tuple[int, int]]:
    """(choice column, alternate index) swaps that bring the answer to `target` choices scored above it:
    the distractors below the answer, lowest first, each replaced by the alternate scored above the
    answer by the least (the least distinguishable), while the number of distractors closer to the
    question than the answer stays what knob 3 asks (`need`, exactly when `exact`, else at least).
    closer (4,): per choice column (the answer's ignored); fewer swaps when the alternates run out.
    With the choices' and alternates' vectors V (4, d) and W (A, d): never a swap that makes the
    answer the centre of the choice set when it was not (alternates the adversary finds plausible sit
    near the answer, and a centre cue would replace the cue they remove). Textual cloze, with the choices'
    titles `texts` and the alternates' `alt_texts`: never a swap that gives two choices one title (case
    and outer spaces aside), so a question never shows a title twice."""
    s_a = choices[answer]
    fold = None if texts is None else [t.strip().lower() for t in texts]
    alt_fold = None if alt_texts is None else [t.strip().lower() for t in alt_texts]
    cols = [c for c in np.argsort(choices, kind="stable") if c != answer and choices[c] <= s_a]
    above = [j for j in np.argsort(alts - s_a, kind="stable") if alts[j] > s_a]
    n_closer = int(sum(closer[c] for c in range(len(choices)) if c != answer))
    have = len(choices) - 1 - len(cols)
    out, used = [], set()
    V = None if V is None else V.copy()
    for c in cols:
        if have >= target:
            break
        for j in above:
            if j in used:
                continue
            n_new = n_closer - int(closer[c]) + int(alt_closer[j])
            if not ((n_new == need) if exact else (n_new >= need)):
                continue
            if fold is not None and alt_fold[j] in fold[:c] + fold[c + 1:]:
                continue
            if V is not None:
                T = V.copy()
                T[c] = W[j]
                if centre(T) == answer != centre(V):
                    continue
                V = T
            out.append((int(c), int(j)))
            if fold is not None:
                fold[c] = alt_fold[j]
            used.add(j)
            n_closer, have = n_new, have + 1
            break
    return out


def coherence_swap_for(choices: np.ndarray, answer: int, alt_sets: np.ndarray, target: int,
                       probe_hit: np.ndarray | None = None, now_hit: bool = False) -> list[tuple[int, int]]:
    """[(answer column, alternate index)]: the foreign image whose 4-choice logits (alt_sets (A, 4))
    put the answer's rank nearest `target` (ties: the smallest logit gap, then the first), when that is
    nearer than now; [] otherwise. With `probe_hit` (A,): never an alternate the distance probe spots
    when it does not spot the foreign image now (`now_hit`)."""
    if not len(alt_sets):
        return []
    ranks, gaps = answer_rank(alt_sets, np.full(len(alt_sets), answer))
    obj = objective(ranks, gaps, target)
    if probe_hit is not None and not now_hit:
        obj = np.where(probe_hit, np.inf, obj)
    j = int(np.argmin(obj))
    if not np.isfinite(obj[j]):
        return []
    return [(int(answer), j)] if abs(ranks[j] - target) < abs(_rank(choices, answer) - target) else []


SWAP_FIRST = ("confident", "movable")


def movable(s: dict) -> bool:
    """Whether some alternate of a scored question can make the adversary miss it: one scored above the
    answer (cloze, ordering), or one with which another choice outscores the answer (coherence)."""
    a, alts = s["answer"], np.asarray(s["alts"])
    if alts.ndim == 2:
        return bool(len(alts)) and bool((np.delete(alts, a, axis=1) > alts[:, a:a + 1]).any())
    return bool((alts > s["choices"][a]).any())


def above_all_share(scores: dict[str, dict[str, dict]]) -> dict[str, float]:
    """Per dataset, the share of questions the adversary solves whatever the swap: the answer above every
    other choice and every alternate (ordering: the recipe order above all 23 wrong orders), or for
    coherence above the other three choices with each alternate as the foreign image. No swap can make
    it miss them, so they bound what the rounds can do."""
    out = {}
    for d, qs in scores.items():
        hit = []
        for s in qs.values():
            a, ch, alts = s["answer"], s["choices"], np.asarray(s["alts"])
            sets = np.vstack([ch[None, :], alts]) if alts.ndim == 2 and len(alts) else ch[None, :]
            ok = bool((np.delete(sets, a, axis=1) < sets[:, a:a + 1]).all())
            if alts.ndim == 1:
                ok = ok and bool((alts < ch[a]).all())
            hit.append(ok)
        out[d] = round(float(np.mean(hit)), 4) if hit else 0.0
    return out


def swap_plan(scores: dict[str, dict[str, dict]], alts: dict[tuple[str, str], dict],
              solved_share: float = SOLVED_SHARE, vectors: dict[str, np.ndarray] | None = None,
              first: str = "confident") -> dict[str, dict[str, list[tuple[int, int]]]]:
    """dataset_id -> qid -> its swaps toward the `target_ranks` of its dataset, the most confidently
    solved questions first (`first` = "movable": those some alternate can move first, then by
    confidence; the adversary may solve a question whatever the swap, and those use up the moves).
    `alts`: (dataset_id, qid) -> {"alts", "closer", "need", "exact", "choices", "probe_hit"}
    (features/datasets/af_pooled.alternates); questions without alternates are not swapped. Cloze and
    ordering: `swaps_for`, with the centre guard when `vectors` (image id -> unit vector) hold the
    choices and alternates; coherence: `coherence_swap_for`, with the distance-probe guard."""
    if first not in SWAP_FIRST:
        raise ValueError(f"--swap-first must be one of {', '.join(SWAP_FIRST)} (or auto), got {first!r}")
    plan: dict[str, dict[str, list[tuple[int, int]]]] = {}
    for did, qs in sorted(scores.items()):
        p_ans = {q: _p_answer(s) for q, s in qs.items()}
        key = p_ans.__getitem__
        if first == "movable":
            m = {q: float(movable(s)) for q, s in qs.items()}
            key = (lambda q, m=m, p=p_ans: m[q] + p[q])
        out = {}
        for q, t in sorted(target_ranks(qs, key, solved_share).items()):
            a = alts.get((did, q))
            if not a:
                continue
            s = qs[q]
            if s["alts"].ndim == 2:           # coherence: the foreign image is the answer
                hits = np.array([bool(x.get("distance_probe_hit")) for x in a["alts"]])
                out[q] = coherence_swap_for(s["choices"], s["answer"], s["alts"], t, hits,
                                            bool(a.get("probe_hit")))
            else:
                V = W = None
                if vectors is not None:
                    V = np.stack([vectors[i] for i in a["choices"]])
                    W = np.stack([vectors[x["item"]] for x in a["alts"]])
                texts = a.get("texts")
                out[q] = swaps_for(s["choices"], s["answer"], s["alts"], np.array(a["closer"]),
                                   np.array([bool(x["closer"]) for x in a["alts"]]), a["need"], a["exact"], t, V, W,
                                   texts, [x["text"] for x in a["alts"]] if texts is not None else None)
        plan[did] = out
    return plan


def swapped_scores(scores: dict[str, dict[str, dict]], plan: dict[str, dict[str, list[tuple[int, int]]]]
                   ) -> dict[str, dict[str, dict]]:
    """The scores with each planned swap carried out: the model scores each choice alone (cloze), so a
    swapped-in alternate's logit is its logit as a choice; coherence: the alternate's 4 logits."""
    out = {d: dict(qs) for d, qs in scores.items()}
    for did, qs in plan.items():
        for q, sw in qs.items():
            if not sw:
                continue
            s = dict(out[did][q])
            ch = s["choices"].copy()
            for col, j in sw:
                if s["alts"].ndim == 2:
                    ch = s["alts"][j].copy()
                else:
                    ch[col] = s["alts"][j]
            s["choices"] = ch
            out[did][q] = s
    return out


def check_args(tau: float, min_kept: float, rounds: int = 0, solved_share: float = SOLVED_SHARE,
               keep_solved: float = 0.0, adversaries: int = ADVERSARIES) -> None:
    """The refusals of `drop_plan` and the swap rounds, for a caller that wants them before any work."""
    if adversaries < 1:
        raise ValueError(f"--adversaries must be at least 1, got {adversaries}")
    if rounds < 0:
        raise ValueError(f"--rounds must be 0 or more, got {rounds}")
    if not 0 <= solved_share <= 1:
        raise ValueError(f"--solved-share must be in [0, 1], got {solved_share}")
    if not 0 <= keep_solved < 1:
        raise ValueError(f"--keep-solved must be in [0, 1), got {keep_solved}")
    if not 0 < tau <= 1:
        raise ValueError(f"--tau must be in (0, 1], got {tau}")
    if not 0 <= min_kept < 1:
        raise ValueError(f"--min-kept must be in [0, 1), got {min_kept}")


def drop_plan(oof: dict[str, dict[str, tuple[float, bool]]], n_plain: dict[str, int], tau: float = TAU,
              min_kept: float = 0.0, keep_solved: float = 0.0,
              linear: dict[str, dict[str, tuple[float, bool]]] | None = None,
              tree: dict[str, dict[str, tuple[float, bool]]] | None = None,
              more: tuple[dict[str, dict[str, tuple[float, bool]]], ...] = (), order: str = "votes"
              ) -> dict[str, list[str]]:
    """dataset_id -> the qids to drop: solved out of fold (the pick is the answer) with probability
    >= tau, most confident first, while the dataset keeps at least `min_kept` x its plain setting's
    questions (0: no floor) and the adversary still solves at least `keep_solved` of the kept ones
    (0: no cap). With `linear` (the same shape: the linear question-only probe's out-of-fold verdicts,
    `linear_verdicts`), a question either adversary solves with probability >= tau is a candidate, and
    the two adversaries' lists, each most confident first, are taken in turn (the pooled model's first;
    a question on both lists counts at its earlier place): where the floor binds, the drop spends its
    room on both cues alike. Ordered by the larger of their confidences instead, the pooled model's
    confident picks took the room and left the linear probe at 31-36% on every question of the knob 2 = 0
    visual cloze settings of the demo (18-30% in turn; docs/results.md). The cap is
    AFLite's "drop what stays predictable, in either direction": dropping every solved question leaves
    a set the adversary gets below chance, and that reversed cue ("the choice it picks is never the
    answer") is one a fresh model learns. `tree` (the tree probe's verdicts, `flows.af_pool._tree_oof`)
    is a third list, taken in turn after the linear one; with it, the questions on more lists go first
    (each tier in turn): where the floor binds, a question that all three solve buys the most. Measured on
    the demo's knob 2 = 0 visual cloze settings, whose room is smallest (docs/results.md, "A tree
    probe"). `more`: further lists of the same shape (the words probe's, `flows.af_pool._words_oof`), taken in
    turn after the tree's, with the questions on more lists first.
    `order` "minimax" (`minimax_drop`): where the floor binds, each next question comes off the list whose
    adversary still solves the largest share of the kept questions, so the room goes where the highest
    figure is, not to the questions most lists share."""
    check_args(tau, min_kept, keep_solved=keep_solved)
    if order not in DROP_ORDERS:
        raise ValueError(f"drop order must be one of {', '.join(DROP_ORDERS)}, got {order!r}")
    plan = {}
    for did, qs in sorted(oof.items()):
        room = len(qs) - int(np.ceil(min_kept * n_plain.get(did, 0))) if min_kept else len(qs)
        if keep_solved:
            solved = sum(r for _, r in qs.values())        # (solved - d) / (n - d) >= keep_solved
            room = min(room, int(np.floor((solved - keep_solved * len(qs)) / (1 - keep_solved) + 1e-9)))
        if order == "minimax":
            lists = [qs, *(x.get(did, {}) for x in (linear or {}, tree or {}, *more))]
            plan[did] = sorted(minimax_drop(list(qs), lists, tau, max(0, room)))
            continue
        place: dict[str, tuple[int, int]] = {}        # qid -> (place on a list, which list), the earliest
        votes: dict[str, int] = {}                      # qid -> how many lists hold it
        for m, src in enumerate((qs, (linear or {}).get(did, {}), (tree or {}).get(did, {}),
                                 *(x.get(did, {}) for x in more))):
            ranked = sorted((q for q, (p, r) in src.items() if r and p >= tau and q in qs),
                            key=lambda q: (-src[q][0], q))
            for i, q in enumerate(ranked):
                place[q] = min(place.get(q, (i, m)), (i, m))
                votes[q] = votes.get(q, 0) + 1
        tier = votes if tree is not None or more else dict.fromkeys(place, 0)
        cands = sorted(place, key=lambda q, t=tier, pl=place: (-t[q], pl[q], q))
        plan[did] = sorted(cands[:max(0, room)])
    return plan


FLOOR_BY = ("dataset", "split")
DROP_ORDERS = ("votes", "minimax")


def minimax_drop(qids: list[str], lists: list[dict[str, tuple[float, bool]]], tau: float, room: int) -> list[str]:
    """Up to `room` of `qids` to drop, from `lists` (each qid -> (confidence, solved): one adversary's
    out-of-fold verdicts). A question is a candidate of a list when that adversary solves it with confidence
    >= tau. Each step takes the list whose adversary solves the largest share of the questions still kept
    (ties: the earlier list), and drops its candidate that the most lists solve, then the most confident
    one (then the qid). A list with no candidate left steps aside. The reading gate bounds the largest
    context-free figure, so the drop lowers the largest first; ranked by how many lists share a question
    (`drop_plan`'s "votes"), the room went to questions every adversary solves while a tree adversary's
    own were kept. Deterministic."""
    kept = set(qids)
    solved = [{q for q in qids if L.get(q, (0.0, False))[1]} for L in lists]
    sure = [{q for q in s if lists[m][q][0] >= tau} for m, s in enumerate(solved)]
    votes = {q: sum(q in c for c in sure) for q in qids}
    queues = [sorted(c, key=lambda q, L=lists[m]: (-votes[q], -L[q][0], q)) for m, c in enumerate(sure)]
    at = [0] * len(lists)
    count = [len(s) for s in solved]
    out: list[str] = []
    while len(out) < room:
        live = [m for m in range(len(lists)) if at[m] < len(queues[m])]
        if not live:
            break
        m = max(live, key=lambda k: (count[k], -k))
        q = queues[m][at[m]]
        at[m] += 1
        if q not in kept:
            continue
        kept.discard(q)
        out.append(q)
        for k, s in enumerate(solved):
            if q in s:
                count[k] -= 1
        for k in range(len(lists)):          # skip the queue heads already dropped
            while at[k] < len(queues[k]) and queues[k][at[k]] not in kept:
                at[k] += 1
    return out


def drop_plan_by_split(oof: dict[str, dict[str, tuple[float, bool]]], split_of: dict[str, dict[str, str]],
                       n_plain_split: dict[str, dict[str, int]], tau: float = TAU, min_kept: float = 0.0,
                       keep_solved: float = 0.0, linear: dict[str, dict[str, tuple[float, bool]]] | None = None,
                       tree: dict[str, dict[str, tuple[float, bool]]] | None = None,
                       more: tuple[dict[str, dict[str, tuple[float, bool]]], ...] = (), order: str = "votes"
                       ) -> dict[str, list[str]]:
    """`drop_plan` with its floor (and cap) held in each split of a dataset (`split_of`: dataset_id ->
    qid -> split; `n_plain_split`: dataset_id -> split -> the plain setting's questions there). With one
    floor per dataset the drop spends its room where the confident questions are, and on the demo the
    test split of a visual cloze AF setting kept 41-47% of its plain questions while the training split
    kept 38%; so a model was tested on a split filtered less deeply than the one it trained on. Here every
    split keeps at least `min_kept` of its own plain questions and is filtered as deeply as the others."""
    def group(v: dict[str, dict]) -> dict[tuple[str, str], dict]:
        out: dict[tuple[str, str], dict] = {}
        for did, qs in v.items():
            for q, x in qs.items():
                out.setdefault((did, split_of[did][q]), {})[q] = x
        return out
    n = {(did, s): c for did, m in n_plain_split.items() for s, c in m.items()}
    plan: dict[str, list[str]] = {did: [] for did in oof}
    for (did, _), qs in drop_plan(group(oof), n, tau, min_kept, keep_solved,   # type: ignore[arg-type]
                                  group(linear) if linear is not None else None,
                                  group(tree) if tree is not None else None,
                                  tuple(group(x) for x in more), order).items():
        plan[did].extend(qs)
    return {did: sorted(qs) for did, qs in plan.items()}
