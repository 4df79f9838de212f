"""Image/text encoders behind one interface, identified by `encoder_id`.

An encoder is an open_clip model (image tower + text tower) plus its preprocessing. Its id is
`<model_name>-<weights sha256[:12]>-<preprocess sha256[:8]>`, so two feature spaces never share an
id: other weights or another preprocessing (image size, mean/std, resize mode) give another id.

Three kinds are registered in the DuckDB `encoders` table (sql/schema/050_encoders.sql):
- `trained`: the default, our small `mrqa-tiny-clip` architecture (features/embed/mrqa-tiny-clip.json,
  registered with `open_clip.add_model_config`) trained by features/embed/train_encoder.py on the train
  split's (step image, step text) pairs;
- `pretrained`: any open_clip architecture with real weights from a local file or a pretrained tag
  (tags resolve through the Hugging Face cache; `HF_HUB_OFFLINE=1` makes a missing tag fail at once);
- `words`: a text-only encoder, the principal axes of the train split's step texts' TF-IDF
  (features/embed/words_encoder.py), for homes without photos; no image tower.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import torch

from etl.config import Paths
from features.embed.decode import split_preprocess, to_model_input
from features.embed.registry import (
    EncoderUnavailable,
    _store_path,
    encoder_row,
    make_encoder_id,
    parse_json_columns,
    register_encoder,
    resolve_stored_path,
)

log = logging.getLogger(__name__)

TINY_MODEL = "mrqa-tiny-clip"
TINY_CONFIG = Path(__file__).with_name(f"{TINY_MODEL}.json")


def register_tiny_config() -> None:
    """Make `mrqa-tiny-clip` known to open_clip (idempotent)."""
    import open_clip
    if TINY_MODEL not in open_clip.list_models():
        open_clip.add_model_config(TINY_CONFIG)


def pick_device(device: str | torch.device | None = None) -> torch.device:
    """CUDA when available (or asked for), CPU otherwise."""
    if device is not None:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def file_sha256(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def preprocess_sha256(model: torch.nn.Module) -> str:
    """Hash of the image preprocessing (size, mean, std, interpolation, resize mode)."""
    from open_clip.model import get_model_preprocess_cfg
    cfg = get_model_preprocess_cfg(model)
    return hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode()).hexdigest()


# ----------------------------------------------------------------------------- the interface

@dataclass
class Encoder:
    encoder_id: str
    model_name: str
    model: torch.nn.Module
    preprocess: Callable[[Any], torch.Tensor]     # PIL image -> float tensor [3, H, W]
    tokenizer: Callable[[list[str]], torch.Tensor]
    device: torch.device
    dim: int

    @property
    def use_amp(self) -> bool:
        return self.device.type == "cuda"

    @cached_property
    def pixel_norm(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, std) of the preprocess's Normalize on the model's device (ValueError when the
        preprocess does not split into PIL steps + ToTensor + Normalize)."""
        _, mean, std, _ = split_preprocess(self.preprocess)
        return mean.to(self.device), std.to(self.device)

    @torch.no_grad()
    def encode_image_tensors(self, batch: torch.Tensor) -> np.ndarray:
        """Images [n, 3, H, W] -> L2-normalised float32 vectors [n, dim]. Float input is preprocessed;
        uint8 input is pixels from the PIL part of the preprocess (`image_data.image_dataset`), copied
        to the device as uint8 and normalised there (`to_model_input`: float32, as ToTensor +
        Normalize; the model then runs under autocast on CUDA)."""
        batch = batch.to(self.device, non_blocking=True)
        if batch.dtype == torch.uint8:
            batch = to_model_input(batch, *self.pixel_norm)
        with torch.autocast(self.device.type, enabled=self.use_amp):
            feats = self.model.encode_image(batch, normalize=True)
        return feats.float().cpu().numpy()

    @torch.no_grad()
    def encode_texts(self, texts: list[str], batch_size: int = 256) -> np.ndarray:
        """Texts -> L2-normalised float32 vectors [n, dim] (truncated to the context length)."""
        out = [np.zeros((0, self.dim), np.float32)]
        for i in range(0, len(texts), batch_size):
            tokens = self.tokenizer(texts[i:i + batch_size]).to(self.device)
            with torch.autocast(self.device.type, enabled=self.use_amp):
                feats = self.model.encode_text(tokens, normalize=True)
            out.append(feats.float().cpu().numpy())
        return np.concatenate(out)


def build_model(model_name: str, checkpoint: str | None, device: torch.device,
                image_size: int | None = None):
    """(model in eval mode, preprocess_val, tokenizer) for an open_clip architecture."""
    import open_clip
    register_tiny_config()
    if model_name not in open_clip.list_models():
        raise EncoderUnavailable(f"unknown open_clip architecture {model_name!r}; "
                                 f"see open_clip.list_models() (e.g. ViT-B-32, RN50, {TINY_MODEL})")
    model, _, preprocess = open_clip.create_model_and_transforms(
        model_name, pretrained=checkpoint, device=device, force_image_size=image_size)
    model.eval()
    tokenizer = open_clip.get_tokenizer(model_name)
    return model, preprocess, tokenizer


def embed_dim(model: torch.nn.Module) -> int:
    return int(model.text_projection.shape[1]) if getattr(model, "text_projection", None) is not None \
        else int(model.visual.output_dim)


# ----------------------------------------------------------------------------- registry

def list_encoders(con: duckdb.DuckDBPyConnection) -> list[dict]:
    rel = con.sql("SELECT * FROM encoders ORDER BY created_at, encoder_id")
    return [parse_json_columns(dict(zip(rel.columns, r))) for r in rel.fetchall()]


def latest_encoder_id(con: duckdb.DuckDBPyConnection) -> str | None:
    """The default encoder: the most recently registered one with an image tower, else the most recent
    words encoder (text only), so a words encoder fitted beside a CLIP one is used only when asked for by
    id (None when there is none)."""
    rows = con.execute("SELECT encoder_id FROM encoders ORDER BY kind = 'words', created_at DESC, "
                       "encoder_id DESC LIMIT 1").fetchall()
    return rows[0][0] if rows else None


def load_encoder(con: duckdb.DuckDBPyConnection, encoder_id: str | None = None,
                 device: str | torch.device | None = None, paths: Paths | None = None) -> Encoder:
    """Load a registered encoder (the latest when encoder_id is None)."""
    paths = paths or Paths.from_env()
    encoder_id = encoder_id or latest_encoder_id(con)
    if encoder_id is None:
        raise EncoderUnavailable("no encoder registered; run `mrqa encoder train` (the default) or "
                                 "`mrqa encoder add --clip-model ViT-B-32 --pretrained FILE_OR_TAG`")
    row = encoder_row(con, encoder_id)
    if row is None:
        known = [r["encoder_id"] for r in list_encoders(con)]
        raise EncoderUnavailable(f"encoder {encoder_id!r} is not registered (known: {known})")
    ckpt = resolve_stored_path(row["checkpoint_path"], paths)
    if not ckpt.is_file():
        raise EncoderUnavailable(f"weights of encoder {encoder_id} not found at {ckpt}")
    if row["kind"] == "words":
        from features.embed.words_encoder import WordsEncoder
        return WordsEncoder.load(encoder_id, ckpt.parent)
    dev = pick_device(device)
    model, preprocess, tokenizer = build_model(row["model_name"], str(ckpt), dev,
                                               row["config"].get("image_size"))
    return Encoder(encoder_id, row["model_name"], model, preprocess, tokenizer, dev, row["dim"])


# ----------------------------------------------------------------------------- real weights

def resolve_pretrained(model_name: str, pretrained: str) -> Path:
    """A local weights file for `pretrained` (a file path, or a tag resolved via open_clip's cache).

    Raises EncoderUnavailable with what to do when the weights cannot be had (no download here).
    """
    import open_clip
    from open_clip.pretrained import download_pretrained, get_pretrained_cfg
    if os.path.isfile(pretrained):
        return Path(pretrained).resolve()
    cfg = get_pretrained_cfg(model_name, pretrained)
    if not cfg:
        tags = open_clip.list_pretrained_tags_by_model(model_name)
        raise EncoderUnavailable(
            f"--pretrained {pretrained!r} is neither an existing file nor a known tag of {model_name} "
            f"(tags: {tags}); pass the path of a weights file (.safetensors/.bin/.pt)")
    offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0", "false", "False")
    try:
        path = download_pretrained(cfg)
    except Exception as e:
        raise EncoderUnavailable(
            f"weights for {model_name}/{pretrained} are not available"
            f"{' (HF_HUB_OFFLINE is set and they are not in the cache)' if offline else ''}: "
            f"{type(e).__name__}: {str(e)[:300]}. Download them on a machine with internet and pass "
            f"the file: --pretrained /path/to/open_clip_model.safetensors") from e
    if not path or not os.path.isfile(path):
        raise EncoderUnavailable(f"weights for {model_name}/{pretrained} resolved to no file ({path!r})")
    return Path(path)


def register_pretrained_encoder(con: duckdb.DuckDBPyConnection, model_name: str, pretrained: str,
                                image_size: int | None = None, paths: Paths | None = None) -> str:
    """Register open_clip `model_name` with real weights (file or tag); returns its encoder_id."""
    paths = paths or Paths.from_env()
    weights = resolve_pretrained(model_name, pretrained)
    try:
        model, _, _ = build_model(model_name, str(weights), torch.device("cpu"), image_size)
    except EncoderUnavailable:
        raise
    except Exception as e:
        raise EncoderUnavailable(f"could not load {weights} into {model_name}: "
                                 f"{type(e).__name__}: {str(e)[:300]}") from e
    w_sha, p_sha = file_sha256(weights), preprocess_sha256(model)
    encoder_id = make_encoder_id(model_name, w_sha, p_sha)
    register_encoder(con, {
        "encoder_id": encoder_id, "kind": "pretrained", "model_name": model_name,
        "pretrained": pretrained, "weights_sha256": w_sha, "preprocess_sha256": p_sha,
        "dim": embed_dim(model), "checkpoint_path": _store_path(weights, paths),
        "train_split": None, "config": {"image_size": image_size}, "metrics": {}})
    log.info("registered encoder %s (%s, weights %s)", encoder_id, model_name, weights)
    return encoder_id
