"""Configuration dataclasses of the GM3C trainer, with the paper's appendix defaults.

`ModelConfig` is what a checkpoint needs to rebuild the network (nanoGPT's model args);
`TrainConfig` is how it was trained. `tiny()` variants are for tests and CPU demos.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from etl.config import SEED_MAX

SCORERS = ("transformer", "bidaf", "impatient", "question_only")   # the allowed `ModelConfig.scorer` names
TEXT_FEATURES = ("tokens", "vectors")
VISUAL_TASKS = ("visual_cloze", "visual_coherence", "visual_ordering")
# the tasks the trainer reads: the visual ones (items = images, context = the step texts) and textual cloze
# (items = step titles, context = the steps' images: RecipeQA's textual cloze, training/data.py)
READER_TASKS = (*VISUAL_TASKS, "textual_cloze")
CLOZE_TASKS = ("visual_cloze", "textual_cloze")


@dataclass
class ModelConfig:
    """GM3C: modality encoders (BiLSTM hidden 256 -> 512-d features) + a scoring function."""
    scorer: str = "transformer"        # one of SCORERS (training/model.py)
    text_features: str = "tokens"      # tokens (learned embeddings + BiLSTM per step) | vectors
    vocab_size: int = 0                # tokens: filled from the dataset's vocabulary
    text_dim: int = 0                  # vectors: dimension of the precomputed step-text vectors
    image_dim: int = 0                 # dimension of the frozen image vectors
    emb_dim: int = 100                 # word embeddings (tokens)
    lstm_hidden: int = 256             # paper: BiLSTM hidden 256 (features are 2 x 256 = 512 wide)
    n_layers: int = 4                  # transformer scorer: 4 layers, 512 wide, 8 heads
    d_model: int = 512
    n_heads: int = 8
    dropout: float = 0.1
    max_positions: int = 64            # CLS + steps + SEP + query items
    input_norm: bool = True            # standardise frozen input vectors per dim (train-split statistics)
    align: bool = False                # explicit step alignment: each query image's cosine profile over
                                       # the step texts (model.alignment_features); needs text vectors

    def validate(self) -> None:
        if self.scorer not in SCORERS:
            raise ValueError(f"scorer must be one of {', '.join(SCORERS)}, got {self.scorer!r}")
        if self.text_features not in TEXT_FEATURES:
            raise ValueError(f"text features must be tokens or vectors, got {self.text_features!r}")
        if self.align and (self.text_features != "vectors" or self.scorer == "question_only"):
            raise ValueError("the step alignment (align) needs step-text vectors (--text-features vectors) "
                             "and a scorer that reads the recipe")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} must be a multiple of n_heads {self.n_heads}")

    @classmethod
    def tiny(cls, **kw) -> ModelConfig:
        return replace(cls(emb_dim=16, lstm_hidden=16, n_layers=1, d_model=32, n_heads=2, dropout=0.0), **kw)

    @classmethod
    def small(cls, **kw) -> ModelConfig:
        return replace(cls(emb_dim=32, lstm_hidden=32, n_layers=2, d_model=64, n_heads=4, dropout=0.1), **kw)


@dataclass
class TrainConfig:
    """Adam 5e-4, cross-entropy over the choices, early stopping on validation accuracy."""
    lr: float = 5e-4
    batch_size: int = 32
    max_epochs: int = 30
    patience: int = 4                  # epochs without a better val accuracy before stopping
    min_epochs: int = 8                # no early stop before this many epochs: the from-scratch
                                       # transformer sat at chance for ~4-5 epochs before it learned
                                       # (sample kitchen, before the position-table init fix in
                                       # training/model.py; patience 3 stopped it there)
    max_steps_per_recipe: int = 20     # context steps kept (the first N)
    max_tokens_per_step: int = 60      # tokens kept per step (title + body)
    min_token_freq: int = 2            # vocabulary: train-split tokens seen at least this often
    max_vocab: int = 20000
    seed: int = 0
    device: str = "auto"               # auto: cuda when available, else cpu
    amp: bool = True                   # fp16 autocast + GradScaler on CUDA (ignored on CPU)
    grad_clip: float = 5.0
    warmup_steps: int = 100            # linear LR warm-up over the first N optimiser steps
    schedule: str = "constant"         # constant | cosine (decay to 0 at max_epochs)
    max_train_questions: int | None = None   # cap (tiny runs / benchmarks)
    threads: int = 0                   # CPU threads for torch (0: torch's default)

    @classmethod
    def tiny(cls, **kw) -> TrainConfig:
        return replace(cls(batch_size=16, max_epochs=3, patience=2, min_epochs=0, warmup_steps=0,
                           max_steps_per_recipe=12,
                           max_tokens_per_step=16, min_token_freq=1, lr=3e-3, threads=1), **kw)

    @classmethod
    def small(cls, **kw) -> TrainConfig:
        return replace(cls(max_epochs=12, patience=4, min_epochs=4, warmup_steps=50, max_steps_per_recipe=12,
                           max_tokens_per_step=24, min_token_freq=1, lr=1e-3, threads=1), **kw)


SIZES = ("paper", "small", "tiny")


def configs_for(size: str = "paper", **model_kw) -> tuple[ModelConfig, TrainConfig]:
    """(ModelConfig, TrainConfig) of a named size: `paper` = the appendix defaults, `small` = a
    CPU sweep configuration, `tiny` = tests and demos."""
    if size not in SIZES:
        raise ValueError(f"size must be one of {', '.join(SIZES)}, got {size!r}")
    if size == "tiny":
        return ModelConfig.tiny(**model_kw), TrainConfig.tiny()
    if size == "small":
        return ModelConfig.small(**model_kw), TrainConfig.small()
    return ModelConfig(**model_kw), TrainConfig()


def align_for(scorer: str, text_features: str, align: bool | None = None) -> bool:
    """Whether a scorer gets the step alignment: as asked (`align`), by default with step-text vectors;
    never for question_only, which does not read the recipe."""
    return (text_features == "vectors" if align is None else bool(align)) and scorer != "question_only"


def resolve_configs(size: str | None = None, *, tiny: bool = False, scorer: str = "transformer",
                    text_features: str = "tokens", layers: int | None = None, width: int | None = None,
                    align: bool | None = None, **train_overrides) -> tuple[ModelConfig, TrainConfig]:
    """The one place a model size is resolved, for `mrqa train|sweep|bench train`, `python -m
    training.train` (torchrun) and the training flows: the named `size` (default paper, or tiny with
    `tiny`), the transformer scorer's `layers` / `width` over the size's, the step alignment `align`
    (default: on for a recipe-reading scorer on step-text vectors, off otherwise), and the TrainConfig fields
    given in `train_overrides` (None keeps the size's value, e.g. lr, max_epochs, seed).

    Raises ValueError naming the command-line option at fault and what it allows."""
    size = size or ("tiny" if tiny else "paper")
    for flag, value, allowed in (("--size", size, SIZES), ("--scorer", scorer, SCORERS),
                                 ("--text-features", text_features, TEXT_FEATURES)):
        if value not in allowed:
            raise ValueError(f"{flag} must be one of {', '.join(allowed)}, got {value!r}")
    for flag, v in (("--layers", layers), ("--width", width)):
        if v is not None and v < 1:
            raise ValueError(f"{flag} must be >= 1, got {v}")
    lr = train_overrides.get("lr")
    if lr is not None and not (lr > 0 and math.isfinite(lr)):
        raise ValueError(f"--lr must be > 0 and finite, got {lr}")
    for field, flag, low in (("max_epochs", "--max-epochs", 1), ("batch_size", "--batch-size", 1),
                             ("max_train_questions", "--max-train-questions", 1), ("patience", "--patience", 0),
                             ("warmup_steps", "--warmup-steps", 0), ("threads", "--threads", 0)):
        v = train_overrides.get(field)
        if v is not None and v < low:
            raise ValueError(f"{flag} must be >= {low}, got {v}")
    seed = train_overrides.get("seed")
    if seed is not None and not 0 <= seed <= SEED_MAX:
        raise ValueError(f"--seed must be in [0, {SEED_MAX}], got {seed}")
    unknown = sorted(set(train_overrides) - set(TrainConfig.__dataclass_fields__))
    if unknown:
        raise TypeError(f"not TrainConfig fields: {', '.join(unknown)}")
    model_kw = {k: v for k, v in (("n_layers", layers), ("d_model", width)) if v is not None}
    if align and text_features != "vectors":
        raise ValueError("--align needs --text-features vectors (the step texts in the images' joint space)")
    model_kw["align"] = align_for(scorer, text_features, align)
    mc, tc = configs_for(size, scorer=scorer, text_features=text_features, **model_kw)
    try:
        mc.validate()
    except ValueError as e:                       # e.g. a width that is not a multiple of the heads
        raise ValueError(f"{e} (--width must be a multiple of the size's heads)") from None
    return mc, replace(tc, **{k: v for k, v in train_overrides.items() if v is not None})
