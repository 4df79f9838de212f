"""The pooled adversary's GM3C pass as jobs for another machine (`mrqa af-pool --jobs-out` / `--scores-from`).

The paper-size question-only models want a GPU; the warehouse (DuckDB, LanceDB) may live elsewhere. So
one pass of `mrqa af-pool` can be split in three:

    mrqa af-pool --task visual_cloze --rounds 1 ... --size paper --jobs-out DIR     # warehouse host
    python -m training.af_jobs DIR                                                  # GPU host
    mrqa af-pool --task visual_cloze --rounds 1 ... --size paper --scores-from DIR/scores.json

The first writes what the pass's models read -- the Parquet export of the task's AF datasets with
vectors, each question's recipe, its recorded alternates and their vectors, the models' seeds and
configs -- and stops before it writes anything to the warehouse. The second trains the models
(`out_of_fold_scores`, one per seed, in parallel processes) with the training library alone (torch,
numpy, pyarrow, duckdb; no warehouse, no LanceDB, no Prefect), and writes their logits. The third
goes on from those logits exactly as af-pool goes on from models it trained itself (the swaps, the
linear and tree probes, the drop): the same datasets, byte for byte.

`mrqa af-check` splits the same way (its seeds' models; no alternates, nothing to write back).

Each fold's logits are kept as soon as its model is scored (JOBS/partial, or --partial FOLDER): run again
after a stop, the command goes on from the last fold, with the logits of a run in one go (to the last
float32 bits, which MKL may round otherwise in another process's memory state; MKL_CBWR=AUTO,STRICT makes
them equal: see `out_of_fold_scores`).

A fingerprint of the jobs (each dataset's content hash, the seeds, the configs and the alternates) is
written with them and copied into the scores; `--scores-from` refuses scores whose fingerprint is not
the warehouse's now, or whose seeds are not the ones the pass asks for.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

FORMAT = "mrqa-af-jobs-1"
SCORES = "scores.json"
PARTIAL = "partial"


class PartialNotWritable(ValueError):
    """The --partial folder cannot be written: refused before any training."""


def fingerprint(datasets: list[tuple[str, str]], seeds: list[int], kw: dict, alternates: dict | None) -> str:
    """sha256 of what a pass's models depend on: the datasets (id, content hash), the models' seeds and
    configs, and each question's alternates (the recipes and vectors follow from these)."""
    alts = sorted([d, q, list(a)] for (d, q), a in (alternates or {}).items())
    key = json.dumps({"datasets": sorted(datasets), "seeds": list(seeds), "kw": kw, "alternates": alts},
                     sort_keys=True, default=list)
    return hashlib.sha256(key.encode()).hexdigest()


def write_jobs(out: Path, write_export: Callable[[Path], None], ids: list[str], recipe_of: dict,
               seeds: list[int], kw: dict, alternates: dict | None, alt_vectors: dict | None, fp: str) -> Path:
    """The jobs folder: export/ (written by `write_export`), jobs.json, alt_vectors.npy. `out` must be new,
    empty or an earlier jobs folder (replaced); anything else is refused, so no other folder is cleared."""
    out = Path(out)
    if out.exists():
        if not out.is_dir() or (any(out.iterdir()) and not (out / "jobs.json").is_file()):
            raise ValueError(f"{out} exists and is not a jobs folder of `mrqa af-pool --jobs-out`: "
                             "give a new or empty folder")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    write_export(out / "export")
    vector_ids = sorted(alt_vectors or {})
    if vector_ids:
        np.save(out / "alt_vectors.npy", np.stack([alt_vectors[i] for i in vector_ids]))
    spec = {"format": FORMAT, "fingerprint": fp, "ids": list(ids), "seeds": list(seeds), "kw": kw,
            "recipe_of": sorted([d, q, r] for (d, q), r in recipe_of.items()),
            "alternates": sorted([d, q, list(a)] for (d, q), a in (alternates or {}).items()),
            "vector_ids": vector_ids}
    (out / "jobs.json").write_text(json.dumps(spec))
    return out


def _spec(job_dir: Path) -> dict:
    path = Path(job_dir) / "jobs.json"
    if not path.is_file():
        raise ValueError(f"{job_dir} holds no jobs.json: write it with `mrqa af-pool ... --jobs-out {job_dir}`")
    try:
        spec = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not readable JSON ({e}): write the jobs again") from None
    if not isinstance(spec, dict) or spec.get("format") != FORMAT:
        raise ValueError(f"{path} is not a jobs file of this version (format "
                         f"{spec.get('format') if isinstance(spec, dict) else None!r}, expected {FORMAT}): "
                         "write the jobs again")
    missing = [p for p in ("export", "alt_vectors.npy" if spec.get("vector_ids") else None)
               if p and not (Path(job_dir) / p).exists()]
    if missing:
        raise ValueError(f"{job_dir} lacks {', '.join(missing)}: copy the whole jobs folder, or write it again")
    return spec


def partial_dir(job_dir: Path, spec: dict, k: int, partial: Path | str | None = None) -> Path:
    """Where seed k's fold logits are kept while it trains: PARTIAL (default JOBS/partial)/<jobs' fingerprint>-
    seed<seed>, so a run stopped part way (a time limit, a lost machine) goes on from its last fold."""
    return Path(partial or Path(job_dir) / PARTIAL) / f"{spec['fingerprint'][:16]}-seed{spec['seeds'][k]}"


def fold_numbers(kw: dict) -> list[int]:
    """The folds a seed's models may have (`out_of_fold_scores`): `folds` of recipes, and with
    fold_by="split" the val and the test split besides; a fold without questions trains nothing."""
    from training.af_pooled import FOLDS
    k = int(kw.get("folds", FOLDS))
    return list(range(k + 2 if kw.get("fold_by") == "split" else k))


def _one(job: tuple[str, int, str | None] | tuple[str, int, str | None, int]) -> dict:
    """Train one seed's models of a jobs folder (or, given a fold as 4th item, that fold's model only,
    its logits kept in the partial folder); its logits as JSON-ready lists (a process pool's unit)."""
    import logging

    import torch

    from training.af_pooled import out_of_fold_scores
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    job_dir, k = Path(job[0]), job[1]
    spec = _spec(job_dir)
    vec = np.load(job_dir / "alt_vectors.npy") if spec["vector_ids"] else np.zeros((0, 0), np.float32)
    alt_vectors = {i: vec[n] for n, i in enumerate(spec["vector_ids"])}
    t0 = time.perf_counter()
    scores = out_of_fold_scores(job_dir / "export", spec["ids"], {(d, q): r for d, q, r in spec["recipe_of"]},
                                seed=spec["seeds"][k], alternates={(d, q): a for d, q, a in spec["alternates"]},
                                alt_vectors=alt_vectors,
                                checkpoint=partial_dir(job_dir, spec, k, job[2]),
                                only_folds=[job[3]] if len(job) > 3 else None,
                                **spec["kw"])
    if len(job) > 3:
        return {"seed": spec["seeds"][k], "fold": job[3], "seconds": round(time.perf_counter() - t0, 1)}
    return {"seed": spec["seeds"][k], "seconds": round(time.perf_counter() - t0, 1),
            "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
            "scores": {d: {q: {"choices": [float(x) for x in s["choices"]], "answer": int(s["answer"]),
                               "alts": [float(x) for x in s["alts"]]} for q, s in qs.items()}
                       for d, qs in scores.items()}}


def run_jobs(job_dir: Path, out: Path | None = None, workers: int | None = None,
             partial: Path | None = None) -> Path:
    """Train every seed's models of the jobs folder (in `workers` spawned processes; default one per
    seed) and write their logits, with the jobs' fingerprint, to `out` (default job_dir/scores.json).
    Each fold's logits are kept under `partial` (see partial_dir) as soon as they exist; a run again
    goes on from them, with the logits of a run in one go. With more workers than seeds, each fold of
    each seed is a job of its own (a GPU host's cores train them side by side) and the seeds' logits are
    then read from the folds kept: the same logits, as each fold's model is seeded by itself (to the last
    float32 bits: see `out_of_fold_scores`)."""
    job_dir = Path(job_dir)
    spec = _spec(job_dir)
    jobs = [(str(job_dir), k, str(partial) if partial else None) for k in range(len(spec["seeds"]))]
    for k in range(len(jobs)):           # refused here, not after the first fold's minutes of training
        where = partial_dir(job_dir, spec, k, partial)
        try:
            where.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise PartialNotWritable(f"cannot keep the folds' logits in {where} ({e.strerror or e}): give --partial "
                             "FOLDER on a writable disk") from None
    n = min(len(jobs), workers or len(jobs))
    t0 = time.perf_counter()
    # spawn_map: one thread a process (OpenMP threads spinning on a shared core cost more than they give);
    # in_turn: in this process on one thread too, so a run's logits do not depend on where it ran
    from training.procs import in_turn, spawn_map, spawn_shares
    if workers and workers > len(jobs):
        units = [(*j, f) for j in jobs for f in fold_numbers(spec["kw"])]
        done = spawn_shares(_one, units, workers)      # shared out before they start: never a matter of timing
        runs = in_turn(_one, jobs)                                      # every fold is kept: read, not trained
        for r in runs:
            r["seconds"] = round(r["seconds"] + sum(u["seconds"] for u in done if u["seed"] == r["seed"]), 1)
    elif n <= 1:
        runs = in_turn(_one, jobs)
    else:
        runs = spawn_map(_one, jobs, n)
    out = Path(out) if out else job_dir / SCORES
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps({"format": FORMAT, "fingerprint": spec["fingerprint"], "seeds": spec["seeds"],
                               "seconds": round(time.perf_counter() - t0, 1), "runs": runs}))
    tmp.replace(out)
    return out


def read_scores(path: Path, fp: str, seeds: list[int]) -> list[dict]:
    """The runs of a scores file as `out_of_fold_scores` returns them (numpy logits), in `seeds` order;
    ValueError when the file is not one, or was made from other jobs than the warehouse's now."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read the scores file {path}: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or "runs" not in doc:
        raise ValueError(f"{path} is not a scores file of `python -m training.af_jobs` ({FORMAT})")
    if doc.get("fingerprint") != fp:
        raise ValueError(f"{path} was made from other jobs than this pass's (the datasets, seeds, options or "
                         "alternates differ from the warehouse's now): write the jobs again with --jobs-out, "
                         "with the same options as this command, and train them")
    got = [r["seed"] for r in doc["runs"]]
    if got != list(seeds):
        raise ValueError(f"{path} holds the models of seeds {got}, this pass asks for {list(seeds)}")
    return [{d: {q: {"choices": np.array(s["choices"], dtype=np.float64), "answer": s["answer"],
                     "alts": np.array(s["alts"], dtype=np.float64)} for q, s in qs.items()}
             for d, qs in r["scores"].items()} for r in doc["runs"]]


def _failed(e: BaseException, a: argparse.Namespace, spec: dict) -> int:
    """What a training that failed part way says: the error in one line, and where the folds it finished
    are kept, so that the same command goes on from them once the cause is fixed."""
    kept = Path(a.partial or Path(a.jobs) / PARTIAL)
    n = sum(len(list(partial_dir(a.jobs, spec, k, a.partial).glob("fold-*.npz"))) for k in range(len(spec["seeds"])))
    msg = " ".join(str(e).split())
    print(f"error: training the jobs failed: {type(e).__name__}: {msg[:300]}; {n} fold(s) done are kept in "
          f"{kept}: fix the cause and run the same command again to go on from them", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.af_jobs", description="Train the pooled adversary's "
                                "models of a jobs folder written by `mrqa af-pool --jobs-out` and write their logits.")
    p.add_argument("jobs", type=Path, help="The jobs folder.")
    p.add_argument("--out", type=Path, default=None, help=f"Scores file (default: JOBS/{SCORES}).")
    p.add_argument("--workers", type=int, default=None, help="Processes (default: one per seed); more than the "
                   "seeds trains each seed's folds side by side.")
    p.add_argument("--partial", type=Path, default=None,
                   help=f"Folder of the folds' logits while the models train (default: JOBS/{PARTIAL}); a run "
                        "stopped part way, given the same folder again, goes on from its last fold.")
    a = p.parse_args(argv)
    if a.workers is not None and a.workers < 1:
        p.error(f"--workers must be at least 1, got {a.workers}")
    try:
        spec = _spec(a.jobs)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        out = run_jobs(a.jobs, a.out, a.workers, a.partial)
    except PartialNotWritable as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - a broken export file, a lost process, a CUDA error: one line
        return _failed(e, a, spec)
    doc = json.loads(out.read_text())
    print(f"{out}: {len(doc['runs'])} run(s) on {doc['runs'][0]['device']}, "
          f"{', '.join(str(r['seconds']) + ' s' for r in doc['runs'])}; then run `mrqa af-pool` with the same "
          f"options and --scores-from {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
