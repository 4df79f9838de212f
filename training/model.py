"""GM3C: modality encoders + a scoring function, built from a `ModelConfig`. GM3C with the
`transformer` scorer is the paper's HTRN.

Encoders: each context step -> a 2h-d feature (tokens: embeddings + BiLSTM, mean over tokens; or a
projected step-text vector), then a BiLSTM across steps. Query images (frozen vectors) -> projected
-> BiLSTM across the query sequence. One query per choice; the scorer gives each (context, query)
pair a score; cross-entropy over the choices.

Scorers: `transformer` (HTRN: [CLS, steps..., SEP, query...] -> encoder -> CLS -> FC), `bidaf`
(bi-directional attention flow between steps and query items, modelling BiLSTM, pooled -> FC),
`impatient` (Impatient Reader: attention over the steps re-read at every query item with a
recurrent read state, cosine score against the query), `question_only` (context-free, like a
hypothesis-only NLI baseline: the question and choice images alone -> FC; it never sees the recipe).

Step alignment (`ModelConfig.align`, `--align`; step-text vectors of the images' joint space): each
query image gets its cosine profile over the recipe's step texts, where it falls in the recipe, and
its cosine to the steps its place among the other query images allows (the slot; `alignment_features`),
added to its query feature and read out directly into the score. Without it
the readers learn cross-modal matching from a few thousand questions through per-dim standardised,
separately projected inputs, and on the adversarially filtered datasets they did not (the CLS
attention on the placeholder's step stayed uniform, and another recipe's steps cost <= 2.5 points).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from training.config import ModelConfig


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int) -> torch.Tensor:
    m = mask.unsqueeze(-1).to(x.dtype)
    return (x * m).sum(dim) / m.sum(dim).clamp(min=1)


class BiLSTM(nn.Module):
    def __init__(self, d_in: int, hidden: int):
        super().__init__()
        self.rnn = nn.LSTM(d_in, hidden, batch_first=True, bidirectional=True)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        lengths = mask.sum(1).clamp(min=1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.rnn(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
        return out


class StepEncoder(nn.Module):
    """Context: one feature per step, then a BiLSTM across the recipe's steps."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        h2 = 2 * cfg.lstm_hidden
        self.tokens = cfg.text_features == "tokens"
        if self.tokens:
            self.emb = nn.Embedding(cfg.vocab_size, cfg.emb_dim, padding_idx=0)
            self.word_rnn = BiLSTM(cfg.emb_dim, cfg.lstm_hidden)
        else:
            self.proj = nn.Linear(cfg.text_dim, h2)
        self.step_rnn = BiLSTM(h2, cfg.lstm_hidden)

    def forward(self, ctx: torch.Tensor, ctx_mask: torch.Tensor) -> torch.Tensor:
        if self.tokens:
            b, s, t = ctx.shape
            flat = ctx.reshape(b * s, t)
            tok_mask = flat > 0
            tok_mask[:, 0] |= True                            # empty (padding) steps: one pad token
            words = self.word_rnn(self.emb(flat), tok_mask)
            feats = masked_mean(words, tok_mask, 1).reshape(b, s, -1)
        else:
            feats = torch.tanh(self.proj(ctx))
        return self.step_rnn(feats, ctx_mask)


ALIGN_STEPS = 20        # step positions of the alignment profile (training's max_steps_per_recipe)
ALIGN_WIDTH = ALIGN_STEPS + 11
ALIGN_TEMPERATURE = 0.05
SLOT_WEIGHT = 0.5        # the slot prior's weight (log-probability) against the centred cosine (x10)


def slot_log_weights(p: torch.Tensor, valid: torch.Tensor, q_mask: torch.Tensor) -> torch.Tensor:
    """Where each query item's step must lie, given the others: log P(step) (B, C, M, S) over the
    recipe's steps, from the other items' soft positions p (B, C, M, S): every item before it in the
    query sits at an earlier step, every item after it at a later one, and a step another item shows is
    unlikely to be its own."""
    eps = 1e-6
    m_valid = q_mask[..., None].to(p.dtype)
    p = p * m_valid
    cdf = p.cumsum(-1)
    before = torch.log((cdf - p).clamp(min=0) + eps) * m_valid        # log P(step_k < s)
    after = torch.log((1 - cdf).clamp(min=0) + eps) * m_valid          # log P(step_k > s)
    a = before.cumsum(2) - before                                      # sum over k < m
    b = after.flip(2).cumsum(2).flip(2) - after                        # sum over k > m
    others = p.sum(2, keepdim=True) - p
    logw = a + b + torch.log((1 - others).clamp(min=0) + eps)
    return torch.log_softmax(logw.masked_fill(~valid, -1e4), -1)


def alignment_features(q: torch.Tensor, q_mask: torch.Tensor, ctx: torch.Tensor, c_mask: torch.Tensor) -> torch.Tensor:
    """The explicit step alignment a reader needs: per query item (image), its cosine to every step
    text of the recipe in the encoder's joint space. q (B, C, M, d) raw image vectors, ctx (B, S, d) raw
    step-text vectors of the same encoder. Returns (B, C, M, ALIGN_WIDTH): the profile over the first
    ALIGN_STEPS steps (cosine minus its mean over the recipe's steps, x10; 0 past the recipe's end),
    then the best match (same scale, and its raw cosine x10), the expected step position under a
    softmax over the cosines (temperature ALIGN_TEMPERATURE) and the best match's position, both as a
    share of the recipe (0..1), and the steps forward from the previous query item and to the next
    one of both positions (0 at the ends): a photo that fits its slot sits after its predecessor's
    step and before its successor's. Last, the **slot** (`slot_log_weights`): where the item's step must
    lie given the other items' soft positions (after every earlier item's step, before every later one's,
    on no step another item shows), and the item's centred cosine read through it: the best step with
    the slot's log-probability added (x SLOT_WEIGHT), the slot-weighted mean, and the slot's expected
    position. A cloze choice is thus scored against the steps its place in the question allows: on the
    AF datasets the distractors are photos that match other steps of the recipe (or no step), so the
    step's text tells them apart only once the reader knows which step the placeholder stands for.
    With another recipe's steps the profile says nothing about the question: the context ablation."""
    b, c, m, _ = q.shape
    s = ctx.shape[1]
    sims = torch.einsum("bcmd,bsd->bcms", F.normalize(q.float(), dim=-1), F.normalize(ctx.float(), dim=-1))
    valid = c_mask[:, None, None, :].expand_as(sims)
    n = c_mask.sum(1).clamp(min=1).to(sims.dtype)[:, None, None, None]
    mean = sims.masked_fill(~valid, 0).sum(-1, keepdim=True) / n
    centred = ((sims - mean) * 10).masked_fill(~valid, 0)
    prof = centred.new_zeros(b, c, m, ALIGN_STEPS)
    k = min(s, ALIGN_STEPS)
    prof[..., :k] = centred[..., :k]
    where = torch.arange(s, device=q.device, dtype=sims.dtype)[None, None, None, :] / (n - 1).clamp(min=1)
    p = torch.softmax((sims / ALIGN_TEMPERATURE).masked_fill(~valid, -1e4), -1)
    best = centred.masked_fill(~valid, -1e4).max(-1)
    at = torch.gather(where.expand_as(sims), -1, best.indices[..., None])[..., 0]
    pos = torch.stack([(p * where).sum(-1), at], -1) * q_mask[..., None].to(sims.dtype)     # (B, C, M, 2)
    both = q_mask[..., 1:] & q_mask[..., :-1]
    step = (pos[..., 1:, :] - pos[..., :-1, :]) * both[..., None].to(sims.dtype)             # (B, C, M-1, 2)
    zero = step.new_zeros(b, c, 1, 2)
    raw = sims.masked_fill(~valid, -1).max(-1).values * 10
    parts = [prof, best.values[..., None], raw[..., None], pos,
             torch.cat([zero, step], 2), torch.cat([step, zero], 2)]
    logw = slot_log_weights(p, valid, q_mask)              # the item's slot, from the other items
    w = logw.exp()
    slot_max = (centred + SLOT_WEIGHT * logw).masked_fill(~valid, -1e4).max(-1).values
    parts += [slot_max[..., None], (w * centred).sum(-1)[..., None], (w * where).sum(-1)[..., None]]
    out = torch.cat(parts, -1)
    return out * q_mask[..., None].to(out.dtype)


class QueryEncoder(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.proj = nn.Linear(cfg.image_dim, 2 * cfg.lstm_hidden)
        self.align = nn.Linear(ALIGN_WIDTH, 2 * cfg.lstm_hidden) if cfg.align else None
        self.rnn = BiLSTM(2 * cfg.lstm_hidden, cfg.lstm_hidden)

    def forward(self, q: torch.Tensor, q_mask: torch.Tensor, align: torch.Tensor | None = None) -> torch.Tensor:
        x = self.proj(q)
        if self.align is not None:
            x = x + self.align(align)
        return self.rnn(torch.tanh(x), q_mask)


# ----------------------------------------------------------------------------- scorers

class Block(nn.Module):
    """Pre-LN transformer block that can return its attention weights (mean over heads)."""

    def __init__(self, d: int, heads: int, dropout: float):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, dropout=dropout, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d), nn.Dropout(dropout))

    def forward(self, x, pad_mask, need_weights: bool = False):
        h = self.ln1(x)
        a, w = self.attn(h, h, h, key_padding_mask=pad_mask, need_weights=need_weights,
                         average_attn_weights=True)
        x = x + a
        return x + self.mlp(self.ln2(x)), w


class TransformerScorer(nn.Module):
    """HTRN: [CLS, step_1..step_S, SEP, q_1..q_M] -> n_layers encoder -> CLS -> FC -> score."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        h2, d = 2 * cfg.lstm_hidden, cfg.d_model
        self.inp = nn.Linear(h2, d)
        self.cls, self.sep = nn.Parameter(torch.randn(d) * 0.02), nn.Parameter(torch.randn(d) * 0.02)
        self.pos = nn.Embedding(cfg.max_positions, d)
        self.seg = nn.Embedding(2, d)                      # 0: CLS + context + SEP, 1: query
        # BERT's init (std 0.02) for the position and segment tables: nn.Embedding's default N(0, 1)
        # is ~3x the projected step/query features, so at init attention saw positions, not content
        nn.init.normal_(self.pos.weight, std=0.02)
        nn.init.normal_(self.seg.weight, std=0.02)
        self.blocks = nn.ModuleList(Block(d, cfg.n_heads, cfg.dropout) for _ in range(cfg.n_layers))
        self.ln = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 1)
        self.max_positions = cfg.max_positions

    def forward(self, c, c_mask, q, q_mask, return_attention: bool = False):
        n, s, _ = c.shape
        m = q.shape[1]
        if 2 + s + m > self.max_positions:
            raise ValueError(f"sequence of {2 + s + m} items exceeds max_positions={self.max_positions}")
        x = torch.cat([self.cls.expand(n, 1, -1), self.inp(c), self.sep.expand(n, 1, -1), self.inp(q)], 1)
        seg = torch.cat([torch.zeros(n, s + 2, dtype=torch.long, device=x.device),
                         torch.ones(n, m, dtype=torch.long, device=x.device)], 1)
        x = x + self.pos(torch.arange(x.shape[1], device=x.device))[None] + self.seg(seg)
        ones = torch.ones(n, 1, dtype=torch.bool, device=x.device)
        pad = ~torch.cat([ones, c_mask, ones, q_mask], 1)
        ws = []
        for blk in self.blocks:
            x, w = blk(x, pad, need_weights=return_attention)
            ws.append(w)
        score = self.fc(self.ln(x[:, 0])).squeeze(-1)
        if return_attention:                               # CLS -> context steps
            return score, {"last": ws[-1][:, 0, 1:s + 1], "rollout": attention_rollout(ws)[:, 0, 1:s + 1]}
        return score


def attention_rollout(weights: list[torch.Tensor]) -> torch.Tensor:
    """Attention rollout (Abnar & Zuidema, 2020): each layer's head-mean attention with the residual
    as 0.5 W + 0.5 I, multiplied from the first layer up; row i = how much of position i's output
    flows from each input position through all layers (rows sum to 1)."""
    eye = torch.eye(weights[0].shape[-1], device=weights[0].device, dtype=weights[0].dtype)
    r = None
    for w in weights:
        a = 0.5 * w + 0.5 * eye
        r = a if r is None else a @ r
    return r


class BiDAFScorer(nn.Module):
    """BiDAF adapted to steps x query items: similarity S_ij = w.[c_i; q_j; c_i*q_j], context-to-query
    and query-to-context attention, G = [c; c2q; c*c2q; c*q2c] -> modelling BiLSTM -> pooled -> FC."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        h2 = 2 * cfg.lstm_hidden
        self.w = nn.Linear(3 * h2, 1)
        self.model_rnn = BiLSTM(4 * h2, cfg.lstm_hidden)
        self.fc = nn.Sequential(nn.Linear(2 * h2, h2), nn.ReLU(), nn.Linear(h2, 1))

    def forward(self, c, c_mask, q, q_mask):
        s, m = c.shape[1], q.shape[1]
        ce, qe = c.unsqueeze(2).expand(-1, -1, m, -1), q.unsqueeze(1).expand(-1, s, -1, -1)
        sim = self.w(torch.cat([ce, qe, ce * qe], -1)).squeeze(-1)                 # (N, S, M)
        sim = sim.masked_fill(~q_mask[:, None, :], -1e4)
        c2q = torch.softmax(sim, 2) @ q                                             # (N, S, h2)
        b = torch.softmax(sim.max(2).values.masked_fill(~c_mask, -1e4), 1)          # (N, S)
        q2c = (b.unsqueeze(-1) * c).sum(1, keepdim=True).expand(-1, s, -1)
        g = self.model_rnn(torch.cat([c, c2q, c * c2q, c * q2c], -1), c_mask)
        pooled = torch.cat([masked_mean(g, c_mask, 1), g.masked_fill(~c_mask[..., None], -1e4).max(1).values], -1)
        return self.fc(pooled).squeeze(-1)


class ImpatientScorer(nn.Module):
    """Impatient Reader: for each query item j, attention over the steps conditioned on q_j and the
    previous read r_{j-1}; r_j = attended context + tanh(W r_{j-1}); g = tanh(W_r r_M + W_u u);
    score = scale * cos(g, u), u = mean query representation."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        h2 = 2 * cfg.lstm_hidden
        self.wc, self.wq, self.wr = nn.Linear(h2, h2), nn.Linear(h2, h2), nn.Linear(h2, h2)
        self.v = nn.Linear(h2, 1)
        self.wrr = nn.Linear(h2, h2)
        self.wgr, self.wgu = nn.Linear(h2, h2), nn.Linear(h2, h2)
        self.scale = nn.Parameter(torch.tensor(5.0))

    def forward(self, c, c_mask, q, q_mask):
        r = torch.zeros_like(q[:, 0])
        cc = self.wc(c)
        for j in range(q.shape[1]):
            a = self.v(torch.tanh(cc + (self.wq(q[:, j]) + self.wr(r))[:, None])).squeeze(-1)
            a = torch.softmax(a.masked_fill(~c_mask, -1e4), 1)
            r_new = (a.unsqueeze(-1) * c).sum(1) + torch.tanh(self.wrr(r))
            r = torch.where(q_mask[:, j, None], r_new, r)
        u = masked_mean(q, q_mask, 1)
        g = torch.tanh(self.wgr(r) + self.wgu(u))
        return self.scale * F.cosine_similarity(g, u, dim=-1)


class QuestionOnlyScorer(nn.Module):
    """Context-free learned baseline: the query alone (question + choice images) -> FC, i.e. what the
    question and choices give away without the recipe."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        h2 = 2 * cfg.lstm_hidden
        self.fc = nn.Sequential(nn.Linear(2 * h2, h2), nn.ReLU(), nn.Linear(h2, 1))

    def forward(self, c, c_mask, q, q_mask):
        return self.fc(torch.cat([masked_mean(q, q_mask, 1),
                                  q.masked_fill(~q_mask[..., None], -1e4).max(1).values], -1)).squeeze(-1)


SCORER_CLASSES = {"transformer": TransformerScorer, "bidaf": BiDAFScorer, "impatient": ImpatientScorer,
                  "question_only": QuestionOnlyScorer}


class GM3C(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg.validate()
        if cfg.align and cfg.text_dim != cfg.image_dim:
            raise ValueError(f"the step alignment needs step-text and image vectors of one joint space; got "
                             f"text {cfg.text_dim}-d, images {cfg.image_dim}-d (use --no-align)")
        self.cfg = cfg
        # frozen input vectors are unit-norm (per-dim std ~ 1/sqrt(d)): standardise them per dim with
        # train-split statistics (set by `set_input_stats`, saved with the weights)
        self.register_buffer("img_mean", torch.zeros(cfg.image_dim))
        self.register_buffer("img_std", torch.ones(cfg.image_dim))
        self.register_buffer("text_mean", torch.zeros(cfg.text_dim))
        self.register_buffer("text_std", torch.ones(cfg.text_dim))
        self.context = StepEncoder(cfg) if cfg.scorer != "question_only" else None
        self.query = QueryEncoder(cfg)
        self.scorer = SCORER_CLASSES[cfg.scorer](cfg)
        # the step alignment's direct read-out (per query item, summed): the other items are the same in
        # every choice's query, so the score moves with how the placeholder's photo aligns with the steps
        self.align_head = nn.Sequential(nn.Linear(ALIGN_WIDTH, 16), nn.ReLU(), nn.Linear(16, 1)) if cfg.align else None

    @torch.no_grad()
    def set_input_stats(self, images: torch.Tensor, text: torch.Tensor | None = None) -> None:
        """Per-dim mean/std of the (train-split) image vectors and step-text vectors."""
        if not self.cfg.input_norm:
            return
        self.img_mean.copy_(images.mean(0))
        self.img_std.copy_(images.std(0).clamp(min=1e-6))
        if text is not None and self.cfg.text_dim:
            self.text_mean.copy_(text.mean(0))
            self.text_std.copy_(text.std(0).clamp(min=1e-6))

    def forward(self, batch: dict, return_attention: bool = False):
        """Logits (B, C) over the choices; with return_attention (transformer only) also the CLS
        attention over the context steps (B, C, S): {"last": the last layer's, head mean, "rollout":
        through all layers (`attention_rollout`)}."""
        q_mask = batch["query_mask"]
        q = ((batch["query"] - self.img_mean) / self.img_std) * q_mask.unsqueeze(-1)
        b, n_c, m, _ = q.shape
        c_mask = batch["ctx_mask"]
        align, read = None, 0.0
        if self.cfg.align:            # and a direct read-out of the alignment, summed over the query items
            align = alignment_features(batch["query"], q_mask, batch["ctx"], c_mask).reshape(b * n_c, m, -1)
            read = (self.align_head(align).squeeze(-1) * q_mask.reshape(b * n_c, m)).sum(-1).reshape(b, n_c)
        qe = self.query(q.reshape(b * n_c, m, -1), q_mask.reshape(b * n_c, m), align)
        if self.context is not None:
            ctx = batch["ctx"]
            if self.cfg.text_features == "vectors":
                ctx = ((ctx - self.text_mean) / self.text_std) * c_mask.unsqueeze(-1)
            ce = self.context(ctx, c_mask)
            ce = ce.unsqueeze(1).expand(-1, n_c, -1, -1).reshape(b * n_c, ce.shape[1], -1)
        else:
            ce = qe.new_zeros(b * n_c, 1, qe.shape[-1])
        cm = c_mask.unsqueeze(1).expand(-1, n_c, -1).reshape(b * n_c, -1)
        qm = q_mask.reshape(b * n_c, m)
        if return_attention:
            if self.cfg.scorer != "transformer":
                raise ValueError("attention is only defined for the transformer scorer")
            score, att = self.scorer(ce, cm, qe, qm, return_attention=True)
            return score.reshape(b, n_c) + read, {k: v.reshape(b, n_c, -1) for k, v in att.items()}
        return self.scorer(ce, cm, qe, qm).reshape(b, n_c) + read
