"""The background cue: how much more alike two photos are when they share a recipe, or an author, than
when they do not.

Every photo of a recipe is taken in one kitchen, and on a real site an author's recipes share their
kitchen too. A question-only model can use that look to tell a question's own photos from the photos of
another recipe, whatever the knobs say. This module measures the cue on every photo of the warehouse, in
a feature space given as unit rows (the look probe's pixel statistics, look_probe.py `LookSpace`, or an
encoder's image vectors), for three kinds of pairs of photos:

- **same recipe**: two photos of one recipe from different steps (photos of one step are left out: a
  question never shows two of them);
- **same author**: photos of two different recipes by one author;
- **other authors**: photos of recipes by two different authors.

Two figures per kind:
- `cos_*`: the mean cosine of every such pair (exact, from sums of the rows: no sampling);
- `nn_*`: for every photo, is its nearest other photo (not of its step) of the same recipe, of another
  recipe by the same author, or of another author (or one unknown)? The share of photos of each answer, next to
  `chance_*`, the share that answer would have if the nearest photo were drawn at random from the same
  candidates (the mean over the photos of each kind's share of a photo's candidates).

Photos of a recipe without an author (a RecipeQA import has none) count in the same-recipe mean cosine only
(their other pairs in no mean), and in the nearest-photo figures with no same-author candidate;
`photos_without_author` says how many there were, and with no author at all every author figure is None.
Cosines are summed in float64 and the nearest photos found on one BLAS thread, so the figures are the
same on every run and machine. `mrqa report` stores one row per space in `background_cue`; `mrqa
look-probe` prints the look space's."""
from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

import duckdb
import numpy as np

log = logging.getLogger(__name__)

KINDS = ("same_recipe", "same_author", "other_author")
BLOCK_ROWS = 1024              # photos whose nearest neighbours are found at once (BLOCK_ROWS x photos floats)


@dataclass
class Cue:
    """The background cue in one space (see the module's doc)."""
    space: str                                 # "look" or "encoder"
    encoder_id: str | None                     # the encoder of an "encoder" space
    n_photos: int
    n_recipes: int
    n_authors: int
    photos_without_author: int
    cos_same_recipe: float | None
    cos_same_author: float | None
    cos_other_author: float | None
    nn_same_recipe: float | None
    nn_same_author: float | None
    nn_other_author: float | None
    chance_same_recipe: float | None
    chance_same_author: float | None
    chance_other_author: float | None

    def as_row(self) -> dict:
        return asdict(self)


def _codes(values: list) -> np.ndarray:
    """Each value's index among the sorted distinct values (None and '' -> -1)."""
    known = sorted({v for v in values if v not in (None, "")})
    index = {v: n for n, v in enumerate(known)}
    return np.array([index.get(v, -1) for v in values], dtype=np.int64)


def _pair_sum(m64: np.ndarray, group: np.ndarray) -> tuple[float, int]:
    """Half the sum over the groups of |sum of the group's rows|^2, and the number of unordered pairs within
    the groups. For unit rows that is the sum of the cosines of those pairs plus half the rows' own |row|^2,
    so the difference of two groupings of the same rows is exactly the cosine sum of the pairs one holds and
    the other does not (`pair_means`). `m64`: the rows in float64."""
    if len(group) == 0:
        return 0.0, 0
    _, inv, counts = np.unique(group, return_inverse=True, return_counts=True)
    sums = np.zeros((len(counts), m64.shape[1]), np.float64)
    np.add.at(sums, inv, m64)
    return float((sums ** 2).sum()) / 2.0, int((counts * (counts - 1) // 2).sum())


def _sizes(codes: np.ndarray) -> np.ndarray:
    """Per row, how many rows share its code."""
    _, inv, counts = np.unique(codes, return_inverse=True, return_counts=True)
    return counts[inv]


def _mean(total: float, pairs: int) -> float | None:
    return round(total / pairs, 4) if pairs else None


def pair_means(mat: np.ndarray, recipe: np.ndarray, author: np.ndarray, step: np.ndarray) -> dict[str, float | None]:
    """cos_same_recipe, cos_same_author, cos_other_author (see the module's doc): `recipe`, `author` and
    `step` are integer codes per row (author -1: unknown; `step` unique per (recipe, step))."""
    m64 = np.asarray(mat, dtype=np.float64)            # one float64 copy for every grouping below
    rec, rec_n = _pair_sum(m64, recipe)
    stp, stp_n = _pair_sum(m64, step)
    out = {"cos_same_recipe": _mean(rec - stp, rec_n - stp_n)}
    known = author >= 0
    m = m64[known]
    auth, auth_n = _pair_sum(m, author[known])
    rec_k, rec_k_n = _pair_sum(m, recipe[known])
    every, every_n = _pair_sum(m, np.zeros(int(known.sum()), np.int64))
    out["cos_same_author"] = _mean(auth - rec_k, auth_n - rec_k_n)
    out["cos_other_author"] = _mean(every - auth, every_n - auth_n)
    return out


def nearest_kinds(mat: np.ndarray, recipe: np.ndarray, author: np.ndarray, step: np.ndarray,
                  block: int = BLOCK_ROWS) -> dict[str, float | None]:
    """nn_* and chance_* (see the module's doc) over every photo with at least one candidate, its candidates
    being every other photo but those of its own step; the nearest is the highest cosine, the first row on a
    tie. A photo without an author has no same-author candidate (its other recipes count as other authors);
    with no author at all the same-author figures are None."""
    from features.diagnostics.question_only import one_blas_thread
    n = len(recipe)
    none = {f"{p}_{k}": None for p in ("nn", "chance") for k in KINDS}
    if n < 2:
        return none
    m = np.ascontiguousarray(np.asarray(mat), dtype=np.float32)
    known = author >= 0
    rec_size, step_size = _sizes(recipe), _sizes(step)
    same_a = np.where(known, _sizes(author) - rec_size, 0)   # an author's recipes are all known-author
    cand = n - step_size                                      # every other photo but those of its step
    used = cand > 0
    if not used.any():
        return none
    same_r = rec_size - step_size
    parts = (same_r, same_a, cand - same_r - same_a)
    chance = [float((part[used] / cand[used]).sum()) for part in parts]
    hits = np.zeros(3, np.int64)
    with one_blas_thread():
        for s in range(0, n, block):
            rows = np.arange(s, min(s + block, n))
            sim = m[rows] @ m.T
            sim[step[rows][:, None] == step[None, :]] = -np.inf     # the photo itself and its step's others
            best = sim.argmax(1)
            ok = used[rows]
            kind = np.where(recipe[best] == recipe[rows], 0,
                            np.where(known[rows] & (author[best] == author[rows]), 1, 2))[ok]
            hits += np.bincount(kind, minlength=3)
    total = int(used.sum())
    out = {f"nn_{k}": round(float(hits[i]) / total, 4) for i, k in enumerate(KINDS)}
    out.update({f"chance_{k}": round(chance[i] / total, 4) for i, k in enumerate(KINDS)})
    if not known.any():
        out["nn_same_author"] = out["chance_same_author"] = None
    return out


def photo_groups(con: duckdb.DuckDBPyConnection, ids: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(recipe, author, step) integer codes of the photos `ids` (image ids of the `images` table), in their
    order; a photo not in the table is a ValueError."""
    rows = {i: (r, s, a) for i, r, s, a in con.execute(
        "SELECT i.image_id, i.recipe_id, i.step_idx, r.author FROM images i LEFT JOIN recipes r USING (recipe_id)"
    ).fetchall()}
    missing = [i for i in ids if i not in rows]
    if missing:
        raise ValueError(f"{len(missing)} photos are not in the images table (e.g. {missing[0]})")
    recipes = [rows[i][0] for i in ids]
    steps = [f"{rows[i][0]}\t{rows[i][1]}" for i in ids]
    authors = [(rows[i][2] or "").strip() or None for i in ids]
    return _codes(recipes), _codes(authors), _codes(steps)


def background_cue(con: duckdb.DuckDBPyConnection, ids: list[str], mat: np.ndarray, space: str,
                   encoder_id: str | None = None) -> Cue:
    """The cue of the photos `ids` whose unit rows are `mat`, in `space`."""
    recipe, author, step = photo_groups(con, ids)
    figures = {**pair_means(mat, recipe, author, step), **nearest_kinds(mat, recipe, author, step)}
    return Cue(space=space, encoder_id=encoder_id, n_photos=len(ids), n_recipes=len(set(recipe.tolist())),
               n_authors=len(set(author[author >= 0].tolist())), photos_without_author=int((author < 0).sum()),
               **figures)


def encoder_cue(con: duckdb.DuckDBPyConnection, lance_uri: str, encoder_id: str, lookup=None) -> Cue | None:
    """The cue in an encoder's image space (its vectors in the feature store, or those of `lookup`, a
    bias.VectorLookup of that space the caller loaded already, scaled to unit length); None when it has no
    image vectors."""
    if lookup is not None:
        ids = sorted(lookup.index, key=lookup.index.__getitem__)
        mat = lookup.mat[[lookup.index[i] for i in ids]]
    else:
        from features.datasets.generate import read_store_vectors
        ids, mat = read_store_vectors(lance_uri, encoder_id, "image")
    from etl.records import is_redrawn_image
    own = [k for k, i in enumerate(ids) if not is_redrawn_image(i)]     # a recipe's own photos, never redrawn ones
    ids, mat = [ids[k] for k in own], np.asarray(mat, dtype=np.float32)[own]
    if len(ids) < 2:
        return None
    norm = np.linalg.norm(mat, axis=1, keepdims=True)
    return background_cue(con, list(ids), mat / np.where(norm > 0, norm, 1.0), "encoder", encoder_id)


def report_cues(con: duckdb.DuckDBPyConnection, look, lance_uri: str, encoder_ids: list[str],
                lookups: dict | None = None) -> list[Cue]:
    """The report's cues: the look space's (`look`, a look_probe.LookSpace, or None when no photo was read)
    and each encoder's image space (its vectors from `lookups`, encoder id -> bias.VectorLookup of its image
    space, where the report loaded them already). A space that cannot be measured is logged and left out."""
    import time
    t0, cues = time.perf_counter(), []
    try:
        own_ids, own_mat = look.own_photos() if look is not None else ([], None)
        if len(own_ids) > 1:                                      # the recipes' own photos (not redrawn ones)
            cues.append(background_cue(con, own_ids, own_mat, "look"))
        for enc in encoder_ids:
            c = encoder_cue(con, lance_uri, enc, (lookups or {}).get(enc))
            if c is not None:
                cues.append(c)
    except (ValueError, LookupError, OSError) as e:
        log.warning("background cue not measured: %s", e)
    if cues:
        log.info("background cue: %s measured in %.1f s", ", ".join(c.space for c in cues), time.perf_counter() - t0)
    return cues


def write_background_cue(con: duckdb.DuckDBPyConnection, cues: list[Cue]) -> None:
    """Replace the stored rows of these cues' spaces (one row per space and encoder)."""
    from etl.warehouse import utcnow
    now = utcnow()
    cols = list(Cue.__dataclass_fields__)
    con.execute("BEGIN")
    try:
        for c in cues:
            con.execute("DELETE FROM background_cue WHERE space = ? AND encoder_id IS NOT DISTINCT FROM ?",
                        [c.space, c.encoder_id])
            row = c.as_row()
            con.execute(f"INSERT INTO background_cue ({', '.join(cols)}, computed_at) "
                        f"VALUES ({', '.join('?' for _ in cols)}, ?)", [row[k] for k in cols] + [now])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f}%"


def format_cue(cues: list[dict]) -> list[str]:
    """Printable lines of cue rows (`Cue.as_row`): per space, the mean cosines and the nearest photo's kind
    against chance."""
    out = []
    for c in cues:
        name = c["space"] if not c.get("encoder_id") else f"{c['space']} {c['encoder_id']}"
        cos = ", ".join(f"{k.replace('_', ' ')} {'–' if v is None else f'{v:.3f}'}"
                        for k in KINDS for v in [c.get(f"cos_{k}")])
        nn = ", ".join(f"{k.replace('_', ' ')} {_pct(c.get(f'nn_{k}'))} (chance {_pct(c.get(f'chance_{k}'))})"
                       for k in KINDS)
        out.append(f"background cue, {name} ({c['n_photos']} photos, {c['n_recipes']} recipes, "
                   f"{c['n_authors']} authors"
                   + (f", {c['photos_without_author']} without an author" if c["photos_without_author"] else "")
                   + f"): mean cosine {cos}; nearest photo {nn}")
    return out
