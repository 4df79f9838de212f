"""Train / evaluate GM3C on an exported dataset: one readable loop (nanoGPT style).

    python -m training.train --export DIR --dataset vc-k010-s0-xxxx --scorer transformer --tiny
    main([...]) does the same from Python (tests call it like open_clip's synthetic test).

A run writes MRQA_HOME/models/runs/<run_id>/ckpt.pt (model args + configs + encoder_id + dataset
hash + vocabulary + weights, best validation epoch) and metrics.json, and a row of `runs`.
Model, optimizer and loop are separate functions so a DDP wrapper (torchrun) can reuse them.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import random
import sys
import time
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from training.ablation import foreign_context_rows
from training.config import CLOZE_TASKS, SCORERS, SIZES, TEXT_FEATURES, ModelConfig, TrainConfig, resolve_configs
from training.data import DatasetError, QADataset, load_for_training, load_qa_dataset
from training.ddp import Dist, epoch_order, finish, init_distributed, pick_device
from training.model import ALIGN_WIDTH, GM3C

log = logging.getLogger(__name__)
CKPT_FORMAT = "mrqa-gm3c-1"
RENAMED_SCORERS = {"hasty": "question_only"}      # scorer names in older checkpoints -> today's


class CheckpointError(ValueError):
    """A checkpoint is unreadable, incomplete, or does not fit the dataset it is used with."""


# ----------------------------------------------------------------------------- setup

def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


def build_model(ds: QADataset, model_cfg: ModelConfig) -> GM3C:
    """The network for this dataset: vocabulary / feature sizes filled in from the data."""
    cfg = replace(model_cfg, text_features=ds.text_features, image_dim=ds.image_dim, text_dim=ds.text_dim,
                  vocab_size=len(ds.vocab) if ds.vocab else 0,
                  max_positions=max(model_cfg.max_positions, int(ds.ctx_len.max()) + 2
                                    + max(s.query.shape[2] for s in ds.splits.values())))
    model = GM3C(cfg)
    model.set_input_stats(*input_stats(ds))
    return model


def input_stats(ds: QADataset) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Image vectors of the train questions and the train recipes' step-text vectors (no labels)."""
    sp = ds.splits["train"]
    rows = np.unique(sp.query[sp.query > 0])
    text = None
    if ds.text_features == "vectors":
        recipes = torch.as_tensor(np.unique(sp.recipe_row))
        mask = torch.arange(ds.ctx.shape[1])[None] < ds.ctx_len[recipes][:, None]
        text = ds.ctx[recipes][mask]
    return ds.images[torch.as_tensor(rows)], text


def lr_lambda(cfg: TrainConfig, steps_per_epoch: int):
    """Multiplier of cfg.lr at optimiser step t: linear warm-up, then constant or cosine decay."""
    import math
    if cfg.schedule not in ("constant", "cosine"):
        raise ValueError(f"schedule must be constant or cosine, got {cfg.schedule!r}")
    total = max(cfg.max_epochs * steps_per_epoch, 1)

    def f(t: int) -> float:
        warm = min(1.0, (t + 1) / cfg.warmup_steps) if cfg.warmup_steps else 1.0
        if cfg.schedule == "cosine":
            return warm * 0.5 * (1 + math.cos(math.pi * min(t, total) / total))
        return warm
    return f


def autocast(device: torch.device, amp: bool):
    return torch.autocast("cuda", dtype=torch.float16, enabled=amp and device.type == "cuda")


# ----------------------------------------------------------------------------- loop

def train_epoch(model, opt, scaler, sched, ds: QADataset, cfg: TrainConfig, device, order: np.ndarray,
                d: Dist = Dist()) -> dict:
    """One pass over `order` (this rank's questions) in batches of batch_size / world (the global
    batch stays cfg.batch_size; DDP averages the ranks' gradients)."""
    model.train()
    bs = max(1, cfg.batch_size // d.world)
    total_loss, correct, t0 = 0.0, 0, time.perf_counter()
    for start in range(0, len(order), bs):
        batch = ds.batch("train", order[start:start + bs], device)
        with autocast(device, cfg.amp):
            logits = model(batch)
            loss = F.cross_entropy(logits.float(), batch["answer"])
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        scaler.step(opt)
        scaler.update()
        sched.step()
        total_loss += float(loss.detach()) * len(batch["answer"])
        correct += int((logits.argmax(1) == batch["answer"]).sum())
    secs = time.perf_counter() - t0
    total_loss, correct, n = d.sum(total_loss, correct, len(order))
    return {"loss": total_loss / max(n, 1), "train_acc": correct / max(n, 1),
            "examples_per_s": n / max(secs, 1e-9)}


@torch.no_grad()
def sharded_accuracy(model, ds: QADataset, split: str, device, d: Dist, batch_size: int = 64,
                     amp: bool = True) -> float:
    """Accuracy on `split`, each rank scoring every world-th question, counts summed over ranks."""
    model.eval()
    sp = ds.splits[split]
    idx = np.arange(d.rank, len(sp), d.world)
    correct = 0
    for start in range(0, len(idx), batch_size):
        batch = ds.batch(split, idx[start:start + batch_size], device)
        with autocast(device, amp):
            correct += int((model(batch).float().argmax(1) == batch["answer"]).sum())
    correct, n = d.sum(correct, len(idx))
    return correct / n if n else float("nan")


def accuracy_with_foreign_context(model, ds: QADataset, split: str, device, batch_size: int = 64,
                                  amp: bool = True) -> dict:
    """Context ablation: accuracy when every question is given another recipe's steps
    (`foreign_context_rows`). A model that reads the recipe loses accuracy; one that answers from the
    question images alone (the `question_only` scorer) keeps it."""
    rows, own = foreign_context_rows(ds.splits[split].recipe_row)
    res = evaluate(model, ds, split, device, batch_size, amp, ctx_rows=rows)
    return {"accuracy": res["accuracy"], "n": res["n"], "kept_own_context": own, "predictions": res["predictions"]}


def context_ablation(model, ds: QADataset, split: str, device, accuracy: float, amp: bool = True,
                     with_predictions: bool = False) -> dict:
    """The `context_ablation` metrics of a run: `accuracy` (own recipes) vs another recipe's steps; with
    `with_predictions` also the choices made with another recipe's steps (qid order), as `predictions`."""
    foreign = accuracy_with_foreign_context(model, ds, split, device, amp=amp)
    out = {"foreign_context_acc": foreign["accuracy"], "drop": round(accuracy - foreign["accuracy"], 4),
           "kept_own_context": foreign["kept_own_context"]}
    return {**out, "predictions": foreign["predictions"]} if with_predictions else out


@torch.no_grad()
def evaluate(model, ds: QADataset, split: str, device, batch_size: int = 64, amp: bool = True,
             attention: bool = False, ctx_rows: np.ndarray | None = None) -> dict:
    """Accuracy and predictions on `split`; with attention (transformer, cloze) the faithfulness
    figures: the mean share of CLS attention on the placeholder's step (last layer, head mean; and
    attention rollout through all layers) vs a uniform share (1 / #steps). `ctx_rows` replaces
    each question's context row (`QADataset.batch`)."""
    model.eval()
    sp = ds.splits[split]
    preds, uniform = [], []
    shares: dict[str, list] = {"last": [], "rollout": []}
    for start in range(0, len(sp), batch_size):
        idx = np.arange(start, min(start + batch_size, len(sp)))
        batch = ds.batch(split, idx, device, ctx_rows=ctx_rows)
        with autocast(device, amp):
            if attention:
                logits, att = model(batch, return_attention=True)
            else:
                logits = model(batch)
        preds.append(logits.float().argmax(1).cpu())
        if attention:
            tgt = batch["target_ctx"]
            ok = tgt >= 0
            if ok.any():
                for kind, a in att.items():
                    a = a.float()[torch.arange(len(idx)), batch["answer"]]     # correct choice's query
                    ctx_total = (a * batch["ctx_mask"]).sum(1).clamp(min=1e-12)
                    shares[kind].append((a[ok, tgt[ok]] / ctx_total[ok]).cpu())
                uniform.append(1.0 / batch["ctx_mask"][ok].sum(1).float().cpu())
    pred = torch.cat(preds).numpy() if preds else np.zeros(0, dtype=np.int64)
    out = {"accuracy": float((pred == sp.answer).mean()) if len(pred) else float("nan"),
           "n": int(len(sp)), "predictions": pred.tolist()}
    if uniform:
        s, r, u = torch.cat(shares["last"]), torch.cat(shares["rollout"]), torch.cat(uniform)
        out["faithfulness"] = {"attention_on_placeholder_step": round(float(s.mean()), 4),
                               "uniform_share": round(float(u.mean()), 4),
                               "ratio_vs_uniform": round(float(s.mean() / u.mean()), 3),
                               "rollout_on_placeholder_step": round(float(r.mean()), 4),
                               "rollout_ratio_vs_uniform": round(float(r.mean() / u.mean()), 3),
                               "n_questions": int(len(s))}
    return out


def fit(model: GM3C, ds: QADataset, cfg: TrainConfig, device, ckpt_path: Path | None = None,
        meta: dict | None = None, d: Dist = Dist()) -> dict:
    """Train with early stopping on validation accuracy; the best epoch's weights are kept (and
    saved to ckpt_path by rank 0). Under torchrun (d.world > 1) the model is wrapped in DDP; every
    rank takes the same early-stopping decision from the all-reduced validation accuracy."""
    if "train" not in ds.splits or "val" not in ds.splits:
        raise ValueError(f"{ds.dataset_id} needs train and val questions (has {sorted(ds.splits)})")
    if cfg.max_epochs < 1 or cfg.batch_size < 1:      # resolve_configs refuses these; a TrainConfig built directly
        raise ValueError(f"max_epochs and batch_size must be >= 1, got {cfg.max_epochs} and {cfg.batch_size}")
    model.to(device)
    net = model
    if d.world > 1:
        from torch.nn.parallel import DistributedDataParallel
        net = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, foreach=True)   # CPU too: the same bytes, 2x faster steps
    n = len(ds.splits["train"])
    steps = -(-len(epoch_order(n, cfg, 0, d)) // max(1, cfg.batch_size // d.world))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg, steps))
    scaler = torch.amp.GradScaler("cuda", enabled=cfg.amp and device.type == "cuda")
    best, best_state, since, history = -1.0, None, 0, []
    for epoch in range(cfg.max_epochs):
        stats = train_epoch(net, opt, scaler, sched, ds, cfg, device, epoch_order(n, cfg, epoch, d), d)
        stats.update(epoch=epoch, val_acc=sharded_accuracy(model, ds, "val", device, d, amp=cfg.amp))
        history.append({k: round(v, 5) if isinstance(v, float) else v for k, v in stats.items()})
        if d.is_main:
            log.info("epoch %d loss %.4f train %.3f val %.3f (%.0f ex/s)", epoch, stats["loss"],
                     stats["train_acc"], stats["val_acc"], stats["examples_per_s"])
        if stats["val_acc"] > best:
            best, since = stats["val_acc"], 0
            best_state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
            if ckpt_path is not None and d.is_main:
                save_checkpoint(ckpt_path, model, cfg, meta or {}, epoch)
        else:
            since += 1
            if since >= cfg.patience and epoch + 1 >= cfg.min_epochs:
                if d.is_main:
                    log.info("early stop after epoch %d (best val %.3f)", epoch, best)
                break
    model.load_state_dict(best_state)
    return {"history": history, "best_val_acc": best,
            "best_epoch": max(range(len(history)), key=lambda i: (history[i]["val_acc"], -i)),
            "epochs_run": len(history)}


# ----------------------------------------------------------------------------- checkpoints

def data_meta(ds: QADataset) -> dict:
    return {"dataset_id": ds.dataset_id, "task": ds.task, "encoder_id": ds.encoder_id,
            "dataset_hash": ds.dataset_hash, "text_features": ds.text_features, "knobs": ds.knobs,
            "text_source": ds.text_source}


def save_checkpoint(path: Path, model: GM3C, cfg: TrainConfig, meta: dict, epoch: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save({"format": CKPT_FORMAT, "model_args": asdict(model.cfg), "train_config": asdict(cfg),
                "meta": meta, "epoch": epoch, "state_dict": model.state_dict()}, tmp)
    tmp.replace(path)


def load_checkpoint(path: Path) -> tuple[GM3C, dict]:
    """(model on CPU in eval mode, checkpoint dict without weights); CheckpointError when unusable."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}")
    try:
        ck = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - torch.load raises many types for a broken file
        raise CheckpointError(f"{path} is not a readable checkpoint (corrupted or truncated?): "
                              f"{type(e).__name__}: {str(e)[:200]}") from None
    if not isinstance(ck, dict) or ck.get("format") != CKPT_FORMAT:
        fmt = ck.get("format") if isinstance(ck, dict) else type(ck).__name__
        raise CheckpointError(f"{path} is not a GM3C checkpoint (format {fmt!r}, expected {CKPT_FORMAT})")
    missing = [k for k in ("model_args", "train_config", "meta", "state_dict") if k not in ck]
    if missing:
        raise CheckpointError(f"{path} lacks {', '.join(missing)}")
    args = dict(ck["model_args"])
    args["scorer"] = RENAMED_SCORERS.get(args.get("scorer"), args.get("scorer"))
    model = GM3C(ModelConfig(**args))
    stored = ck["state_dict"].get("align_head.0.weight")
    if stored is not None and stored.shape[-1] != ALIGN_WIDTH:
        raise CheckpointError(f"{path} was trained with {stored.shape[-1]} step-alignment features per photo; "
                              f"this version gives the readers {ALIGN_WIDTH} (the slot: the steps a photo's "
                              "place allows, training/model.py), so its weights cannot read them: train the "
                              "run again (`mrqa train`)")
    try:
        model.load_state_dict(ck["state_dict"])
    except RuntimeError as e:
        raise CheckpointError(f"{path}: weights do not match the stored model args: {str(e)[:300]}") from None
    model.eval()
    return model, {k: v for k, v in ck.items() if k != "state_dict"}


def check_compatible(meta: dict, ds: QADataset, allow_other_dataset: bool = False) -> None:
    """Clear errors when a checkpoint meets a dataset it cannot score."""
    if meta["encoder_id"] != ds.encoder_id:
        raise CheckpointError(f"checkpoint was trained on image features of encoder {meta['encoder_id']}, "
                              f"dataset {ds.dataset_id} uses encoder {ds.encoder_id}: the vectors are not "
                              "comparable; evaluate a run trained on this encoder or regenerate the dataset")
    if meta["task"] != ds.task:
        raise CheckpointError(f"checkpoint is for task {meta['task']}, dataset {ds.dataset_id} is {ds.task}")
    if meta["dataset_id"] == ds.dataset_id and meta["dataset_hash"] != ds.dataset_hash:
        raise CheckpointError(f"dataset {ds.dataset_id} changed since this run was trained (hash "
                              f"{meta['dataset_hash'][:12]} vs {ds.dataset_hash[:12]} now); retrain on it")
    if meta["dataset_id"] != ds.dataset_id and not allow_other_dataset:
        raise CheckpointError(f"checkpoint was trained on {meta['dataset_id']}, not {ds.dataset_id}; "
                              "pass --cross-dataset to evaluate it on another dataset of the same task")


# ----------------------------------------------------------------------------- runs

def run_id_for(meta: dict, model_cfg: ModelConfig, cfg: TrainConfig, world: int = 1) -> str:
    """Content id of a run: dataset, configs (and the DDP world size when > 1)."""
    key = [meta["dataset_hash"], asdict(model_cfg), asdict(cfg)] + ([world] if world > 1 else [])
    h = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:8]
    ddp = f"-ddp{world}" if world > 1 else ""
    return f"{meta['dataset_id']}-{model_cfg.scorer}-{model_cfg.text_features}{ddp}-{h}"


def record_run(row: dict, home: Path | None = None, attempts: int = 10) -> bool:
    """Upsert the `runs` row; DuckDB allows one writer, so a locked warehouse is retried with
    backoff, then logged (metrics.json still holds the run) instead of failing the trained run."""
    from etl.config import Paths
    from etl.warehouse import SchemaError, connect, upsert
    for attempt in range(attempts):
        try:
            con = connect(Paths.from_env(home).ensure())
        except SchemaError as e:
            if "another process" not in str(e) or attempt == attempts - 1:
                log.error("run %s not recorded in `runs`: %s", row["run_id"], e)
                return False
            time.sleep(min(0.5 * 2 ** attempt, 8.0))
            continue
        try:
            upsert(con, "runs", [row])
            return True
        finally:
            con.close()
    return False


def train_run(export_dir: Path, dataset_id: str, model_cfg: ModelConfig, cfg: TrainConfig,
              runs_dir: Path | None = None, record: bool = True, ds: QADataset | None = None) -> dict:
    """Load, train, test, save: the whole run. Returns the metrics dict (also in metrics.json)."""
    started = datetime.now(UTC).replace(tzinfo=None)
    set_seed(cfg.seed)
    threads_before = torch.get_num_threads()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    try:
        return _train_run(export_dir, dataset_id, model_cfg, cfg, runs_dir, record, ds, started)
    finally:
        torch.set_num_threads(threads_before)


def _train_run(export_dir, dataset_id, model_cfg, cfg, runs_dir, record, ds, started) -> dict:
    from etl.config import Paths
    from training.baselines import hasty_student_accuracy
    if ds is None:
        ds = load_for_training(export_dir, dataset_id, model_cfg.text_features, cfg)
    d, device = init_distributed(cfg)
    model = build_model(ds, model_cfg)
    meta = {**data_meta(ds), "vocab": ds.vocab, "world_size": d.world}
    run_id = run_id_for(meta, model.cfg, cfg, d.world)
    run_dir = (runs_dir or Paths.from_env().models / "runs") / run_id
    ckpt = run_dir / "ckpt.pt"
    t0 = time.perf_counter()
    res = fit(model, ds, cfg, device, ckpt, meta, d)
    train_s = time.perf_counter() - t0
    if not d.is_main:                  # rank 0 tests, writes the checkpoint, metrics and `runs` row
        return {"run_id": run_id, "rank": d.rank, "world_size": d.world, "val_acc": res["best_val_acc"]}
    test_split = "test" if "test" in ds.splits else "val"
    test = evaluate(model, ds, test_split, device, amp=cfg.amp,
                    attention=model.cfg.scorer == "transformer" and ds.task in CLOZE_TASKS)
    ablation = context_ablation(model, ds, test_split, device, test["accuracy"], amp=cfg.amp)
    hasty = hasty_student_accuracy(ds, test_split)
    metrics = {"run_id": run_id, **data_meta(ds), "scorer": model.cfg.scorer, "device": str(device),
               "world_size": d.world,
               "amp": bool(cfg.amp and device.type == "cuda"),
               "n_questions": {k: len(v) for k, v in ds.splits.items()}, "dropped": ds.dropped,
               "chance": 1 / ds.splits[test_split].query.shape[1], "test_split": test_split,
               "test_acc": test["accuracy"], "val_acc": res["best_val_acc"], "best_epoch": res["best_epoch"],
               "epochs_run": res["epochs_run"], "train_seconds": round(train_s, 2),
               "examples_per_s": round(float(np.mean([h["examples_per_s"] for h in res["history"]])), 1),
               "hasty_student_acc": hasty,
               "n_params": sum(p.numel() for p in model.parameters()),
               "faithfulness": test.get("faithfulness"),
               "context_ablation": ablation,
               "history": res["history"],
               "checkpoint": str(ckpt), "model_args": asdict(model.cfg), "train_config": asdict(cfg)}
    run_dir.mkdir(parents=True, exist_ok=True)
    metrics["recorded_in_runs"] = False
    if record:
        metrics["recorded_in_runs"] = record_run({
                    "run_id": run_id, "dataset_id": ds.dataset_id, "model": "gm3c", "scorer": model.cfg.scorer,
                    "text_features": ds.text_features, "image_encoder": ds.encoder_id,
                    "config": json.dumps({"model": asdict(model.cfg), "train": asdict(cfg)}),
                    "metrics": json.dumps({k: v for k, v in metrics.items()
                                           if k not in ("history", "model_args", "train_config")}),
                    "started_at": started, "finished_at": datetime.now(UTC).replace(tzinfo=None)})
    (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True))
    return metrics


def find_checkpoint(run: str, runs_dir: Path | None = None) -> Path:
    """A run id (under MRQA_HOME/models/runs), a run directory, or a ckpt.pt path."""
    from etl.config import Paths
    p = Path(run)
    for cand in (p, p / "ckpt.pt", (runs_dir or Paths.from_env().models / "runs") / run / "ckpt.pt"):
        if cand.is_file():
            return cand
    raise CheckpointError(f"no run {run!r}: give a run id (see `mrqa query \"SELECT run_id FROM runs\"`), "
                          "a run directory or a ckpt.pt path")


def evaluate_run(run: str, export_dir: Path, dataset_id: str, split: str = "test",
                 cross_dataset: bool = False, device: str = "auto") -> dict:
    """Load a run's checkpoint, check it fits the dataset, and score `split`."""
    from etl.config import Paths
    model, ck = load_checkpoint(find_checkpoint(run))
    meta, tc = ck["meta"], ck["train_config"]
    ds = load_qa_dataset(export_dir, dataset_id, meta["text_features"], vocab=meta.get("vocab"),
                         max_steps=tc["max_steps_per_recipe"], max_tokens=tc["max_tokens_per_step"],
                         lance_uri=Paths.from_env().lance)
    check_compatible(meta, ds, cross_dataset)
    if split not in ds.splits:
        raise ValueError(f"{dataset_id} has no {split} questions (has {sorted(ds.splits)})")
    dev = pick_device(TrainConfig(device=device))
    model.to(dev)
    res = evaluate(model, ds, split, dev, amp=tc.get("amp", True),
                   attention=model.cfg.scorer == "transformer" and ds.task in CLOZE_TASKS)
    abl = context_ablation(model, ds, split, dev, res["accuracy"], amp=tc.get("amp", True), with_predictions=True)
    res["ablation_predictions"] = abl.pop("predictions")
    res["context_ablation"] = abl
    return {"run": run, "dataset_id": dataset_id, "task": ds.task, "split": split,
            "qids": ds.splits[split].qids, **res}


# ----------------------------------------------------------------------------- entry point

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="training.train", description=__doc__.splitlines()[0])
    p.add_argument("--export", required=True, help="Parquet export directory (mrqa export)")
    p.add_argument("--dataset", required=True, help="dataset_id inside the export")
    p.add_argument("--scorer", default="transformer", choices=SCORERS)
    p.add_argument("--text-features", default="tokens", choices=TEXT_FEATURES)
    p.add_argument("--tiny", action="store_true", help="tiny model + short training (tests, CPU demos)")
    p.add_argument("--size", choices=SIZES, help="config size (default paper; --tiny = tiny)")
    p.add_argument("--layers", type=int, help="transformer scorer layers (default: the size's)")
    p.add_argument("--width", type=int, help="transformer scorer width d_model (default: the size's)")
    p.add_argument("--align", action=argparse.BooleanOptionalAction, default=None,
                   help="the readers' step alignment (default: on with --text-features vectors)")
    p.add_argument("--warmup-steps", type=int)
    p.add_argument("--schedule", choices=["constant", "cosine"])
    p.add_argument("--metrics-json", type=Path, help="also write rank 0's metrics here (launchers)")
    p.add_argument("--max-epochs", type=int)
    p.add_argument("--patience", type=int)
    p.add_argument("--batch-size", type=int)
    p.add_argument("--lr", type=float)
    p.add_argument("--seed", type=int)
    p.add_argument("--device", default=None, help="auto | cpu | cuda")
    p.add_argument("--no-amp", action="store_true")
    p.add_argument("--threads", type=int, help="CPU threads (1 is fastest on a busy machine)")
    p.add_argument("--max-train-questions", type=int)
    p.add_argument("--runs-dir", type=Path, help="default MRQA_HOME/models/runs")
    p.add_argument("--no-record", action="store_true", help="do not write the runs table")
    return p.parse_args(argv)


def configs_from_args(a) -> tuple[ModelConfig, TrainConfig]:
    """The configs the parsed arguments ask for (training.config.resolve_configs, like `mrqa train`)."""
    return resolve_configs(a.size, tiny=a.tiny, scorer=a.scorer, text_features=a.text_features, layers=a.layers,
                           width=a.width, align=a.align, max_epochs=a.max_epochs, patience=a.patience,
                           batch_size=a.batch_size, lr=a.lr, seed=a.seed, device=a.device,
                           max_train_questions=a.max_train_questions, threads=a.threads,
                           warmup_steps=a.warmup_steps, schedule=a.schedule, amp=False if a.no_amp else None)


def main(argv: list[str] | None = None) -> dict:
    """Train from command-line arguments; under torchrun every rank runs this (rank 0 reports).
    A bad value or an unusable export raises (ValueError, DatasetError); `cli` turns that into one line."""
    a = parse_args(argv)
    mc, tc = configs_from_args(a)
    return _train_from_args(a, mc, tc)


def _train_from_args(a: argparse.Namespace, mc: ModelConfig, tc: TrainConfig, ds: QADataset | None = None) -> dict:
    m = train_run(Path(a.export), a.dataset, mc, tc, runs_dir=a.runs_dir, record=not a.no_record, ds=ds)
    finish(Dist(int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))))
    if a.metrics_json and "rank" not in m:
        a.metrics_json.write_text(json.dumps(m, sort_keys=True))
    return m


def cli(argv: list[str] | None = None) -> int:
    """`python -m training.train ...` (torchrun runs it on every rank): the bad values resolve_configs
    refuses (--max-epochs 0, --seed -1, ...) and an export or dataset that cannot be used (DatasetError)
    end with one `error: ...` line on stderr and exit status 2, like `mrqa train`, before any training.
    What fails once training has started is not caught here: it keeps its traceback."""
    a = parse_args(argv)
    try:
        mc, tc = configs_from_args(a)
        ds = load_for_training(Path(a.export), a.dataset, mc.text_features, tc)
    except (ValueError, DatasetError) as e:    # resolve_configs's refusals; a missing or unusable export
        print(f"error: {e}", file=sys.stderr)
        return 2
    m = _train_from_args(a, mc, tc, ds)
    if "rank" not in m:
        print(json.dumps({k: v for k, v in m.items() if k not in ("history", "model_args", "train_config")}, indent=2))
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sys.exit(cli())
