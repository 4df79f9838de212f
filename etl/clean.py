"""Cleaning + tokenizing the warehouse's steps, re-runnable from the raw columns.

`clean_corpus(con, paths)`:
1. reads every recipe that is ok or was rejected by an earlier clean (raw text, videos, images);
2. cleans titles/bodies with the rules of etl.clean_rules (counted per rule), in worker processes;
3. trains the Punkt sentence model on the cleaned corpus if none is stored (or when asked);
4. filters recipes (etl.filters): rejected ones get recipes.status='rejected' + status_reason and a
   row in `rejects` (stage clean); their raw text stays;
5. tokenizes kept steps (sentences -> NLTK words -> OOV repair, repairs cached per token type) and
   replaces their `step_tokens`; vocabulary figures before/after repair go to `vocab_stats`.
Running it twice changes nothing (the output is a function of the raw columns and the Punkt model).

Worker processes come from a `forkserver` (never a plain fork of this process: the CLI runs
threads, the Prefect temporary server's and DuckDB's, and forking a threaded process can deadlock a
child on a lock some thread held). They run under concurrent.futures' ProcessPoolExecutor, so a
worker that dies fails the stage at once with CleanWorkerDied (BrokenProcessPool underneath)
instead of a wait that never ends; nothing is written to the warehouse before all workers finish.
"""
from __future__ import annotations

import logging
import multiprocessing as mp
import os
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass, field

import duckdb
import pyarrow as pa
from tqdm import tqdm

from etl.clean_rules import clean_text, clean_title
from etl.config import Paths
from etl.filters import DEFAULT_FILTERS, RecipeView, StepView, filter_recipe
from etl.repair import Repairer, english_frequencies, repair_text
from etl.repair import rule_counts as split_counts_by_rule
from etl.tokenize import (
    load_punkt,
    punkt_from_json,
    punkt_to_json,
    reference_tokenize_text,
    save_punkt,
    tokenize_text,
    train_punkt,
)
from etl.warehouse import clear_rejects, record_reject, transaction, utcnow

log = logging.getLogger(__name__)
CACHE_MAX_LINES = 200_000
CLEAN_REASONS = ("non_food", "non_english", "too_few_steps", "too_many_steps", "video_only")
START_METHOD = "forkserver"
# fault injection for the tests: with this set to 1, each worker process exits (code 1) on its first chunk
CRASH_ENV = "MRQA_CLEAN_WORKER_CRASH"


class CleanWorkerDied(RuntimeError):
    """A clean worker process ended abruptly (killed, out of memory, crashed); nothing was written."""


@dataclass
class CleanConfig:
    workers: int = 2                   # processes for cleaning/tokenizing (1 = in-process)
    chunk_recipes: int = 200
    chunk_steps: int = 2000            # steps per cleaning task (tokenizing tasks: half as many)
    retrain_punkt: bool = False
    punkt_train_chars: int = 2_000_000
    repair: bool = True
    top_oov: int = 30


# ----------------------------------------------------------------------------- pure per-step work

def clean_step(title_raw: str | None, body_raw: str | None, counts: Counter) -> tuple[str, str]:
    return clean_title(title_raw or "", counts) or "", clean_text(body_raw or "", counts=counts) or ""


def pipeline_tokens(text: str, punkt, repairer: Repairer | None,
                    cache: dict | None = None,
                    tokenize=tokenize_text) -> tuple[list[list[str]], list[list[str]]]:
    """Cleaned text -> (tokens per sentence before repair, after repair).

    Lines are sentence boundaries, so results are cached per line when `cache` is given (ingredient
    lines, titles and boilerplate repeat across recipes); the cache is bounded by CACHE_MAX_LINES.
    `tokenize` is etl.tokenize.tokenize_text (or the stock-NLTK reference, same tokens)."""
    before: list[list[str]] = []
    after: list[list[str]] = []
    for line in (text or "").split("\n"):
        hit = cache.get(line) if cache is not None else None
        if hit is None:
            b = tokenize(line, punkt)
            a = b if repairer is None else [repairer.repair_tokens(x) for x in b]
            hit = (b, a)
            if cache is not None and len(cache) < CACHE_MAX_LINES:
                cache[line] = hit
        before.extend(hit[0])
        after.extend(hit[1])
    return before, after


_W: dict = {}


def _init_worker(punkt_json: dict | None, repair: bool, crash: bool = False) -> None:
    _W["punkt"] = punkt_from_json(punkt_json) if punkt_json else None
    _W["repairer"] = Repairer() if repair else None
    _W["cache"] = {}
    _W["tokenize"] = tokenize_text
    _W["crash"] = crash


def _clean_chunk(rows: list[tuple]) -> tuple[list[tuple], Counter]:
    if _W.get("crash"):
        os._exit(1)
    counts: Counter = Counter()
    out = [(rid, idx, *clean_step(t, b, counts)) for rid, idx, t, b in rows]
    return out, counts


def _tokenize_chunk(rows: list[tuple]) -> tuple[list[tuple], Counter, Counter, list[tuple]]:
    """rows of (recipe_id, step_idx, title, body) -> token rows, before/after token counters, and the
    rows with the repaired text (etl.repair.repair_text: what steps.title/body store and exports carry)."""
    punkt, rep = _W["punkt"], _W["repairer"]
    out, before_c, after_c, texts = [], Counter(), Counter(), []
    for rid, idx, title, body in rows:
        fixed = []
        for fld, text in (("title", title), ("body", body)):
            before, after = pipeline_tokens(text, punkt, rep, _W["cache"], _W["tokenize"])
            for k, (b, a) in enumerate(zip(before, after)):
                before_c.update(b)
                after_c.update(a)
                out.append((rid, idx, fld, k, a))
            fixed.append(text if rep is None else repair_text(text, rep)[0])
        texts.append((rid, idx, *fixed))
    return out, before_c, after_c, texts


def _chunks(xs: list, n: int) -> list[list]:
    return [xs[i:i + n] for i in range(0, len(xs), n)]


@contextmanager
def worker_pool(workers: int, init_args: tuple) -> Iterator[ProcessPoolExecutor]:
    """`workers` processes from a forkserver, each initialised with `_init_worker(*init_args)`.
    A worker that dies raises CleanWorkerDied from the block at once; the pool is torn down
    without waiting for work still queued."""
    ctx = mp.get_context(START_METHOD)
    if START_METHOD == "forkserver":
        ctx.set_forkserver_preload(["etl.clean"])   # workers fork from a server that imported us
    crash = os.environ.get(CRASH_ENV) == "1"
    pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker,
                               initargs=(*init_args, crash))
    try:
        yield pool
    except BrokenProcessPool as e:
        pool.shutdown(wait=False, cancel_futures=True)
        raise CleanWorkerDied(f"a clean worker process died ({e}); the warehouse is unchanged. "
                              "Re-run `mrqa clean`, or use --workers 1 to clean in this process") from e
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _map(fn, chunks, workers: int, init_args: tuple, desc: str):
    if workers <= 1 or len(chunks) <= 1:
        _init_worker(*init_args)
        yield from (fn(c) for c in tqdm(chunks, desc=desc, leave=False, disable=len(chunks) < 5))
        return
    with worker_pool(workers, init_args) as pool:
        yield from tqdm(pool.map(fn, chunks), total=len(chunks), desc=desc, leave=False,
                        disable=len(chunks) < 5)


# ----------------------------------------------------------------------------- warehouse IO

def _read(con: duckdb.DuckDBPyConnection, recipe_ids: list[str] | None):
    where = "(r.status = 'ok' OR (r.status = 'rejected' AND list_contains(?, r.status_reason)))"
    params: list = [list(CLEAN_REASONS)]
    if recipe_ids is not None:
        where += " AND list_contains(?, r.recipe_id)"
        params.append(recipe_ids)
    recipes = con.execute(f"SELECT recipe_id, title, category FROM recipes r WHERE {where} "
                          "ORDER BY recipe_id", params).fetchall()
    steps = con.execute(f"""
        SELECT s.recipe_id, s.step_idx, s.title_raw, s.body_raw, s.n_videos,
               (SELECT count(*) FROM images i WHERE i.recipe_id = s.recipe_id
                  AND i.step_idx = s.step_idx) AS n_images
        FROM steps s JOIN recipes r USING (recipe_id) WHERE {where}
        ORDER BY s.recipe_id, s.step_idx""", params).fetchall()
    return recipes, steps


def _write(con, done_ids: list[str], step_rows: list[tuple], token_rows: list[tuple],
           rejected: dict[str, str], details: dict[str, str]) -> None:
    staged_steps = pa.table({  # noqa: F841 (scanned by DuckDB)
        "recipe_id": [r[0] for r in step_rows], "step_idx": pa.array([r[1] for r in step_rows], pa.int32()),
        "title": [r[2] for r in step_rows], "body": [r[3] for r in step_rows]})
    staged_tokens = pa.table({  # noqa: F841
        "recipe_id": [r[0] for r in token_rows], "step_idx": pa.array([r[1] for r in token_rows], pa.int32()),
        "field": [r[2] for r in token_rows], "sentence_idx": pa.array([r[3] for r in token_rows], pa.int32()),
        "tokens": pa.array([list(r[4]) for r in token_rows], pa.list_(pa.string()))})
    kept = [r for r in done_ids if r not in rejected]
    with transaction(con):
        con.execute("""UPDATE steps SET title = st.title, body = st.body FROM staged_steps st
                       WHERE steps.recipe_id = st.recipe_id AND steps.step_idx = st.step_idx""")
        con.execute("DELETE FROM step_tokens WHERE list_contains(?, recipe_id)", [done_ids])
        con.execute("INSERT INTO step_tokens SELECT recipe_id, step_idx, field, sentence_idx, tokens "
                    "FROM staged_tokens")
        clear_rejects(con, "clean", done_ids)
        if kept:
            con.execute("UPDATE recipes SET status = 'ok', status_reason = NULL "
                        "WHERE list_contains(?, recipe_id) AND status = 'rejected'", [kept])
        for rid, reason in rejected.items():
            con.execute("UPDATE recipes SET status = 'rejected', status_reason = ? WHERE recipe_id = ?",
                        [reason, rid])
            record_reject(con, "clean", rid, reason, details.get(rid))


# ----------------------------------------------------------------------------- the stage

@dataclass
class CleanResult:
    summary: dict
    before: Counter = field(default_factory=Counter)
    after: Counter = field(default_factory=Counter)


def clean_corpus(con: duckdb.DuckDBPyConnection, paths: Paths | None = None,
                 config: CleanConfig | None = None, recipe_ids: list[str] | None = None,
                 filters=DEFAULT_FILTERS) -> CleanResult:
    cfg = config or CleanConfig()
    paths = (paths or Paths.from_env()).ensure()
    t0 = time.perf_counter()
    recipes, steps = _read(con, recipe_ids)
    n_chars = sum(len(s[2] or "") + len(s[3] or "") for s in steps)
    # 1. clean
    rule_counts: Counter = Counter()
    cleaned: list[tuple] = []
    for rows, counts in _map(_clean_chunk, _chunks([s[:4] for s in steps], cfg.chunk_steps), cfg.workers,
                             (None, False), "clean"):
        cleaned.extend(rows)
        rule_counts.update(counts)
    # 2. Punkt
    punkt = None if cfg.retrain_punkt else load_punkt(paths.models)
    trained = False
    if punkt is None:
        punkt = train_punkt((b for *_, b in cleaned), cfg.punkt_train_chars)
        save_punkt(punkt, paths.models, {"trained_at": str(utcnow()), "n_steps": len(cleaned)})
        trained = True
    # 3. filters
    by_recipe: dict[str, list[StepView]] = {}
    for (rid, idx, title, body), s in zip(cleaned, steps):
        by_recipe.setdefault(rid, []).append(StepView(idx, title, body, s[4], s[5]))
    rejected, details = {}, {}
    for rid, title, category in recipes:
        view = RecipeView(rid, clean_title(title or ""), category, by_recipe.get(rid, []))
        keep, reason = filter_recipe(view, filters)
        if not keep:
            rejected[rid] = reason
            details[rid] = f"{len(view.steps)} steps; category={category!r}; title={title!r}"
    # 4. tokens for kept recipes
    keep_rows = [c for c in cleaned if c[0] not in rejected]
    token_rows: list[tuple] = []
    repaired: dict[tuple, tuple] = {}
    before, after = Counter(), Counter()
    for rows, b, a, texts in _map(_tokenize_chunk, _chunks(keep_rows, max(1, cfg.chunk_steps // 2)), cfg.workers,
                                  (punkt_to_json(punkt), cfg.repair), "tokenize"):
        token_rows.extend(rows)
        before.update(b)
        after.update(a)
        repaired.update({(rid, idx): (t, b_) for rid, idx, t, b_ in texts})
    done_ids = [r[0] for r in recipes]
    stored = [(rid, idx, *repaired.get((rid, idx), (t, b_))) for rid, idx, t, b_ in cleaned]
    _write(con, done_ids, stored, token_rows, rejected, details)
    dt = time.perf_counter() - t0
    from etl.vocab import store_vocab_stats, vocab_figures
    vb, va = vocab_figures(before, cfg.top_oov), vocab_figures(after, cfg.top_oov)
    store_vocab_stats(con, "clean", vb, va)
    summary = {
        "recipes": len(recipes), "steps": len(steps), "kept": len(recipes) - len(rejected),
        "rejected": dict(Counter(rejected.values())), "rule_changes": dict(sorted(rule_counts.items())),
        "repairs": {k: v for k, v in repair_rule_counts(before).items() if v["types"]} if cfg.repair else {},
        "sentences": len(token_rows), "tokens": sum(after.values()),
        "punkt": "trained" if trained else "loaded", "chars": n_chars, "seconds": round(dt, 2),
        "chars_per_s": round(n_chars / dt) if dt else None,
        "vocab_before": {k: v for k, v in vb.items() if k != "top_oov"},
        "vocab_after": {k: v for k, v in va.items() if k != "top_oov"},
    }
    log.info("clean: %s", summary)
    return CleanResult(summary, before, after)


def repair_rule_counts(before: Counter) -> dict[str, dict[str, int]]:
    """Per repair rule: the word types and token occurrences of `before` (tokens before repair) it split."""
    return split_counts_by_rule(Repairer(), before)


# ----------------------------------------------------------------------------- benchmark

class _UncachedRepairer(Repairer):
    """The obvious alternative: repair every token occurrence (no per-type cache)."""

    def repair_token(self, token: str) -> tuple[str, ...]:
        return self._repair(token)


def _process_texts(rows: list[tuple], workers: int, punkt_json: dict, naive: bool = False,
                   chunk: int = 1000) -> int:
    """Clean + tokenize + repair rows of (recipe_id, step_idx, title_raw, body_raw); returns the
    number of tokens. `naive`: stock NLTK tokenizers, no line cache, no per-type repair cache."""
    n_tokens = 0
    if workers <= 1:
        _init_worker(punkt_json, True)
        if naive:
            _W.update(repairer=_UncachedRepairer(), cache=None, tokenize=reference_tokenize_text)
        for part in _chunks(rows, chunk):
            n_tokens += _clean_and_tokenize_chunk(part)
        return n_tokens
    with worker_pool(workers, (punkt_json, True)) as pool:
        for n in pool.map(_clean_and_tokenize_chunk, _chunks(rows, chunk)):
            n_tokens += n
    return n_tokens


def _clean_and_tokenize_chunk(rows: list[tuple]) -> int:
    """The work of the clean stage on a chunk (the token rows are built as for the warehouse);
    only the token count travels back, the warehouse write is not part of this benchmark."""
    cleaned, _ = _clean_chunk(rows)
    out, _b, _a, _texts = _tokenize_chunk(cleaned)
    return sum(len(r[4]) for r in out)


def _load_average() -> str:
    import os
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def bench_clean(n_recipes: int = 4500, seed: int = 11, workers: int = 2,
                baseline_chars: int = 1_000_000, quality: bool = True, quality_recipes: int = 600) -> dict:
    """Throughput (chars/s) of clean + tokenize + repair on the raw step text of a generated sample
    kitchen (each recipe different: no repetition), with `workers` processes and with 1 process,
    against the naive single-process path (stock NLTK regexes, no caches) on the first
    `baseline_chars`; plus repair precision/recall on the first `quality_recipes` of the sample's
    ground truth."""
    import json
    import tempfile
    from pathlib import Path

    from etl.sample.generate import build_sample
    from etl.vocab import evaluate_on_ground_truth
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        build_sample(Path(tmp), n_recipes, seed)
        build_s = time.perf_counter() - t
        gt_path = Path(tmp) / "ground_truth.jsonl"
        recs = [json.loads(line) for line in gt_path.read_text().splitlines()]
        rows = [(r["recipe_id"], s["step_idx"], s["title_raw"], s["body_raw"])
                for r in recs for s in r["steps"]]
        t = time.perf_counter()
        punkt = train_punkt(clean_text(b) for *_, b in rows)
        punkt_s = time.perf_counter() - t
        scores = None
        if quality:   # scored on the first quality_recipes recipes: enough instances, cheap
            sub_gt = Path(tmp) / "ground_truth_quality.jsonl"
            sub_gt.write_text("".join(line + "\n" for line in
                                      gt_path.read_text().splitlines()[:quality_recipes]))
            scores = evaluate_on_ground_truth(sub_gt, punkt)
    n = sum(len(t or "") + len(b or "") for *_, t, b in rows)
    sub, m = [], 0
    for r in rows:
        if m >= baseline_chars:
            break
        sub.append(r)
        m += len(r[2] or "") + len(r[3] or "")
    pj = punkt_to_json(punkt)
    english_frequencies()   # load the dictionary once, before timing
    load_before = _load_average()
    t = time.perf_counter()
    tokens = _process_texts(rows, workers, pj)
    fast_s = time.perf_counter() - t
    t, c = time.perf_counter(), time.process_time()
    _process_texts(rows, 1, pj)
    one_s, one_cpu = time.perf_counter() - t, time.process_time() - c
    t = time.perf_counter()
    _process_texts(sub, 1, pj, naive=True)
    slow_s = time.perf_counter() - t
    fast, one, slow = n / fast_s, n / one_s, m / slow_s
    out = {"chars": n, "recipes": len(recs), "steps": len(rows), "tokens": tokens,
           "workers": workers, "seconds": round(fast_s, 2), "chars_per_s": round(fast),
           "single_process": {"seconds": round(one_s, 2), "chars_per_s": round(one),
                              "cpu_seconds": round(one_cpu, 2), "chars_per_cpu_s": round(n / one_cpu)},
           "baseline": {"what": "1 process, stock NLTK (regex under timeout), no line/type caches",
                        "chars": m, "seconds": round(slow_s, 2), "chars_per_s": round(slow)},
           "ratio_vs_baseline": round(fast / slow, 2),
           "single_process_ratio_vs_baseline": round(one / slow, 2),
           "target_chars_per_s": 500_000, "meets_target": fast >= 500_000,
           "load_average_1_5_15": {"before": load_before, "after": _load_average()},
           "cpu_count": __import__("os").cpu_count(),
           "sample_build_seconds": round(build_s, 1), "punkt_train_seconds": round(punkt_s, 2)}
    if scores is not None:
        out["repair_quality"] = {k: scores[k] for k in ("recipes", "steps", "fused_word", "number_unit",
                                                        "precision", "noise_removed", "rare_words",
                                                        "steps_tokens_equal_gold")}
    return out
