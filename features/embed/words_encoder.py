"""The words encoder: step texts on the principal axes of their TF-IDF (latent semantic analysis).

The default encoder (mrqa-tiny-clip) learns from step photos and texts together, so a home without
photos (RecipeQA imported as text, `mrqa ingest recipeqa FILE` without `--images`) has nothing to train
it on, and real CLIP weights cannot be downloaded everywhere. The words encoder needs neither: it is
fitted on the train split's step titles and bodies, each one document, and maps any text to a unit
vector of `dim` dimensions:

- terms: the lower-cased words of the text and its word pairs (`terms`, as the words probe's), those in at
  least `min_docs` fitted documents, the `max_terms` in most documents;
- TF-IDF: 1 + log(count) per term, times the smoothed inverse document frequency of the fitted
  documents, each text scaled to unit length;
- the vector: that row, centred on the fitted documents' mean, on their first `dim` principal axes
  (each signed so that its largest loading is positive), scaled to unit length.

It has no image tower: `mrqa embed` with it writes step-text vectors only, and only the textual tasks
(textual cloze) can be generated in its space. Fitting is closed-form (one eigendecomposition of the
terms' covariance), so it takes seconds and the same texts give the same encoder id. Weights, vocabulary
and config live in `models/encoders/<encoder_id>/` like a trained CLIP encoder's; `encoders.kind` is
`words`. CLI: `mrqa encoder words`.
"""
from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import duckdb
import numpy as np

from etl.config import Paths

log = logging.getLogger(__name__)

MODEL_NAME = "mrqa-words-lsa"
KIND = "words"


def is_words_encoder(encoder_id: str) -> bool:
    """Whether an encoder id names a words encoder (its model name leads every id, `make_encoder_id`): what a
    trainer reading an export, without the warehouse, needs to know that the encoder has no photos."""
    return encoder_id.startswith(f"{MODEL_NAME}-")


class WordsDataError(ValueError):
    """Too little train-split text to fit the words encoder on (the message says what to do)."""


@dataclass(frozen=True)
class WordsConfig:
    dim: int = 128              # principal axes kept (fewer when the vocabulary is smaller)
    max_terms: int = 4096       # the covariance is max_terms x max_terms
    min_docs: int = 2           # a term in fewer fitted documents carries nothing across steps
    split: str = "train"        # the split whose step titles and bodies it is fitted on

    def validate(self) -> None:
        if self.dim < 1:
            raise ValueError(f"--dim must be at least 1, got {self.dim}")
        if self.max_terms < 2:
            raise ValueError(f"--max-terms must be at least 2, got {self.max_terms}")
        if self.min_docs < 1:
            raise ValueError(f"--min-docs must be at least 1, got {self.min_docs}")


WORD = re.compile(r"[a-z0-9]+")


def terms(text: str) -> list[str]:
    """The lower-cased words of a text and its word pairs (`bake`, `the cake`): the terms of the words
    encoder and of the words probe (features/diagnostics/words_probe.py)."""
    words = WORD.findall(text.lower())
    return words + [f"{a} {b}" for a, b in zip(words, words[1:])]


class WordsEncoder:
    """A fitted words encoder: `encode_texts` as the CLIP encoders' (L2-normalised float32 rows); no
    image tower (`encode_image_tensors` refuses)."""

    kind = KIND
    model_name = MODEL_NAME

    def __init__(self, encoder_id: str, vocab: list[str], idf: np.ndarray, mean: np.ndarray,
                 axes: np.ndarray):
        import torch
        self.encoder_id = encoder_id
        self.vocab = {t: i for i, t in enumerate(vocab)}
        self.idf = np.asarray(idf, np.float64)
        self.mean = np.asarray(mean, np.float64)
        self.axes = np.asarray(axes, np.float64)          # (dim, n_terms)
        self.dim = int(self.axes.shape[0])
        self.device = torch.device("cpu")

    def tfidf(self, texts: list[str]):
        """Sparse (texts x terms) unit-length TF-IDF rows of `texts` in the fitted vocabulary."""
        from scipy import sparse
        rows, cols, vals = [], [], []
        for i, text in enumerate(texts):
            for t, c in Counter(x for x in terms(text) if x in self.vocab).items():
                rows.append(i)
                cols.append(self.vocab[t])
                vals.append((1.0 + np.log(c)) * self.idf[self.vocab[t]])
        m = sparse.csr_matrix((np.array(vals, np.float64), (rows, cols)), shape=(len(texts), len(self.vocab)))
        m.sort_indices()
        norm = np.sqrt(np.asarray(m.multiply(m).sum(1))).ravel()
        return sparse.diags(1.0 / np.where(norm > 0, norm, 1.0)) @ m

    def encode_texts(self, texts: list[str], batch_size: int = 256) -> np.ndarray:
        """Texts -> L2-normalised float32 vectors [n, dim]. A text with no fitted term maps to minus the
        mean's projection, scaled (every text gets a unit vector, as with CLIP)."""
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        z = np.asarray(self.tfidf(texts) @ self.axes.T) - self.mean @ self.axes.T
        norm = np.linalg.norm(z, axis=1, keepdims=True)
        return (z / np.where(norm > 0, norm, 1.0)).astype(np.float32)

    def encode_image_tensors(self, batch):
        from features.embed.registry import EncoderUnavailable
        raise EncoderUnavailable(f"encoder {self.encoder_id} is a words encoder: it has no image tower "
                                 "(train the default encoder, `mrqa encoder train`, or add real CLIP weights "
                                 "for the visual tasks)")

    # -------------------------------------------------------------------------------- files

    @classmethod
    def load(cls, encoder_id: str, directory: Path) -> WordsEncoder:
        """The fitted encoder from its folder; EncoderUnavailable (saying to fit it again) when a file is
        missing, cut short or does not match the other."""
        from safetensors.numpy import load_file

        from features.embed.registry import EncoderUnavailable
        try:
            arrays = load_file(str(directory / "words.safetensors"))
            vocab = json.loads((directory / "vocabulary.json").read_text(encoding="utf-8"))
            idf, mean, axes = arrays["idf"], arrays["mean"], arrays["axes"]
            if not (isinstance(vocab, list) and len(vocab) == len(idf) == len(mean) == axes.shape[1]):
                raise ValueError(f"a vocabulary of {len(vocab)} terms against weights for {len(idf)}")
        except Exception as e:  # any unreadable file: one message that says what to do
            raise EncoderUnavailable(f"the words encoder {encoder_id} cannot be read from {directory} "
                                     f"({type(e).__name__}: {str(e)[:200]}); fit it again with `mrqa encoder words` "
                                     "(the same texts and options give the same encoder id)") from e
        return cls(encoder_id, vocab, idf, mean, axes)


def fit_words_encoder(con: duckdb.DuckDBPyConnection, paths: Paths | None = None,
                      cfg: WordsConfig | None = None) -> dict:
    """Fit the words encoder on `cfg.split`'s step titles and bodies (ok recipes), save and register it;
    returns {"encoder_id", "dir", "metrics"}. The same texts and config give the same encoder id (and
    fitting it again replaces its row and files). Raises WordsDataError when the split has fewer than 2
    texts or no term in `min_docs` of them."""
    from safetensors.numpy import save_file

    from features.diagnostics.question_only import one_blas_thread
    from features.embed.registry import _store_path, make_encoder_id, register_encoder
    paths = paths or Paths.from_env()
    cfg = cfg or WordsConfig()
    cfg.validate()
    t0 = time.perf_counter()
    rows = con.execute("""
        SELECT s.title, s.body FROM steps AS s JOIN recipes AS r USING (recipe_id)
        WHERE r.status = 'ok' AND r.split = ? ORDER BY s.recipe_id, s.step_idx""", [cfg.split]).fetchall()
    texts = [t.strip() for pair in rows for t in pair if t and t.strip()]
    docs = [terms(t) for t in texts]
    df = Counter(t for d in docs for t in set(d))
    kept = sorted((t for t, c in df.items() if c >= cfg.min_docs), key=lambda t: (-df[t], t))[:cfg.max_terms]
    if len(texts) < 2 or len(kept) < 2:
        raise WordsDataError(f"the words encoder is fitted on the {cfg.split} split's step titles and bodies, and "
                             f"this home has {len(texts)} such text(s) with {len(kept)} term(s) in at least "
                             f"{cfg.min_docs} of them: ingest recipes with a {cfg.split} split "
                             "(`mrqa ingest recipeqa FILE`, `mrqa demo`), or pick another with --split")
    vocab = sorted(kept)
    n = len(docs)
    dfv = np.array([df[t] for t in vocab], np.float64)
    idf = np.log((1.0 + n) / (1.0 + dfv)) + 1.0
    probe = WordsEncoder("fitting", vocab, idf, np.zeros(len(vocab)), np.zeros((1, len(vocab))))
    m = probe.tfidf(texts)
    mean = np.asarray(m.mean(0)).ravel()
    k = min(cfg.dim, len(vocab))
    with one_blas_thread():      # one thread: the same sums, so the same axes, however many cores
        cov = np.asarray((m.T @ m).todense()) / n - np.outer(mean, mean)
        w, v = np.linalg.eigh(cov)
    axes = v[:, np.argsort(-w, kind="stable")[:k]].T
    axes *= np.where(axes[np.arange(k), np.abs(axes).argmax(1)] < 0, -1.0, 1.0)[:, None]
    explained = float(np.sort(w)[::-1][:k].sum() / max(w.sum(), 1e-12))
    fit_seconds = time.perf_counter() - t0

    tmp = paths.models / "encoders" / f".tmp-{MODEL_NAME}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    arrays = {"idf": idf, "mean": mean, "axes": np.ascontiguousarray(axes)}
    save_file(arrays, str(tmp / "words.safetensors"))
    (tmp / "vocabulary.json").write_text(json.dumps(vocab), encoding="utf-8")
    w_sha = hashlib.sha256((tmp / "words.safetensors").read_bytes()
                           + (tmp / "vocabulary.json").read_bytes()).hexdigest()
    p_sha = hashlib.sha256(json.dumps({"terms": "words and word pairs, lower-cased, [a-z0-9]+",
                                       **asdict(cfg)}, sort_keys=True).encode()).hexdigest()
    encoder_id = make_encoder_id(MODEL_NAME, w_sha, p_sha)
    out = paths.models / "encoders" / encoder_id
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    (out / "config.json").write_text(json.dumps(asdict(cfg), indent=1), encoding="utf-8")
    encoder = WordsEncoder(encoder_id, vocab, idf, mean, axes)
    metrics = {"n_fit_texts": n, "n_terms": len(vocab), "dim": k, "explained_variance": round(explained, 4),
               "fit_seconds": round(fit_seconds, 2)}
    metrics.update(text_retrieval(con, encoder, "val" if cfg.split != "val" else "test"))
    register_encoder(con, {
        "encoder_id": encoder_id, "kind": KIND, "model_name": MODEL_NAME, "pretrained": None,
        "weights_sha256": w_sha, "preprocess_sha256": p_sha, "dim": k,
        "checkpoint_path": _store_path(out / "words.safetensors", paths), "train_split": cfg.split,
        "config": asdict(cfg), "metrics": metrics})
    log.info("words encoder %s fitted on %d %s texts (%d terms, %d axes, %.0f%% of the variance) in %.1f s; %s",
             encoder_id, n, cfg.split, len(vocab), k, 100 * explained, fit_seconds,
             {k_: v_ for k_, v_ in metrics.items() if k_.startswith(("title", "chance"))})
    return {"encoder_id": encoder_id, "dir": str(out), "metrics": metrics}


def text_retrieval(con: duckdb.DuckDBPyConnection, encoder, split: str = "val", max_pairs: int = 1000) -> dict:
    """How well an encoder's text vectors tie a step's title to its own body, on `split`'s steps with both
    (the first `max_pairs` in (recipe, step) order): `title_body_r@1` / `r@10` among all those bodies,
    and `title_body_in_recipe_r@1` among the bodies of the title's own recipe (what a reader must do to
    find the step a title names), each with its chance level. Empty when the split has fewer than 2 pairs."""
    rows = con.execute("""
        SELECT s.recipe_id, s.title, s.body FROM steps AS s JOIN recipes AS r USING (recipe_id)
        WHERE r.status = 'ok' AND r.split = ? AND trim(coalesce(s.title, '')) <> ''
          AND trim(coalesce(s.body, '')) <> ''
        ORDER BY s.recipe_id, s.step_idx LIMIT ?""", [split, max_pairs]).fetchall()
    if len(rows) < 2:
        return {}
    t = encoder.encode_texts([r[1].strip() for r in rows])
    b = encoder.encode_texts([r[2].strip() for r in rows])
    sim = t @ b.T
    own = sim[np.arange(len(rows)), np.arange(len(rows))]
    rank = (sim > own[:, None]).sum(1)
    recipe = np.array([r[0] for r in rows], dtype=object)
    same = recipe[:, None] == recipe[None, :]
    in_rank = ((sim > own[:, None]) & same).sum(1)
    per_recipe = same.sum(1)
    return {"eval_split": split, "n_title_body_pairs": len(rows),
            "title_body_r@1": round(float((rank < 1).mean()), 4),
            "title_body_r@10": round(float((rank < 10).mean()), 4),
            "chance_title_body_r@10": round(min(1.0, 10 / len(rows)), 4),
            "title_body_in_recipe_r@1": round(float((in_rank < 1).mean()), 4),
            "chance_in_recipe_r@1": round(float((1.0 / per_recipe).mean()), 4)}
