"""A synthetic feature world for generation tests and `mrqa bench generate` (no images, no model).

Writes, in the feature store's shape: recipes/steps/images rows (some images missing, some short
recipes), an `encoders` row, LanceDB `image_vectors` and `step_text_vectors` (title; body: near the
step's photos, as a joint image/text encoder puts a step's text and its photos) with
deterministic hash-derived, clustered vectors (a step "kind" cluster + a per-recipe style + noise, so
distances vary and near neighbours exist), and the `neighbours` table (features.vectors.neighbours).
"""
from __future__ import annotations

import logging

import duckdb
import numpy as np
import pyarrow as pa

from etl.splits import assign_split
from etl.warehouse import utcnow
from features.datasets.knobs import stable_key

log = logging.getLogger(__name__)
KINDS = ["Gather Ingredients", "Chop the Onions", "Mix the Batter", "Melt the Butter", "Bake",
         "Pour the Sauce", "Whisk the Eggs", "Knead the Dough", "Fry", "Season", "Boil Water",
         "Slice the Bread", "Grate the Cheese", "Simmer", "Cool Down", "Serve", "Enjoy!",
         "Prepare the Pan", "Roll Out", "Garnish"]

STYLES = ["", "Carefully", "Quickly", "Again", "Well", "Gently", "Slowly", "for a While", "Thoroughly",
          "Now", "First", "Then", "Twice", "Lightly", "by Hand", "in Batches"]


def _unit(m: np.ndarray) -> np.ndarray:
    return (m / np.linalg.norm(m, axis=1, keepdims=True)).astype(np.float32)


def build_world(con: duckdb.DuckDBPyConnection, lance_uri: str, n_recipes: int = 40, seed: int = 0,
                dim: int = 32, encoder_id: str = "synthetic-enc-0001", k: int = 100,
                images_per_step: tuple[int, int] = (1, 3), stage_cue: float = 0.0) -> dict:
    """Create the world; returns counts. Deterministic in (n_recipes, seed, dim, stage_cue).
    `stage_cue` > 0 plants the recipe's order in its photos: a step's image vectors move along one fixed
    direction by stage_cue times the step's place in its recipe (0 first .. 1 last), as a dish that goes
    from raw to cooked does; 0 (the default) leaves every vector as it was without it."""
    from features.vectors.store import IMAGE_TABLE, TEXT_TABLE, FeatureStore, vector_rows
    rng = np.random.default_rng([seed, 12345])
    centers = _unit(rng.normal(size=(len(KINDS), dim)))
    stage_dir = _unit(np.random.default_rng([seed, 777]).normal(size=(1, dim)))[0] if stage_cue else None
    recipes, steps, images, img_vec_rows, txt_rows, body_rows = [], [], [], [], [], []
    for r in range(n_recipes):
        rid = f"synthetic-recipe-{r:06d}"
        rr = np.random.default_rng([seed, stable_key("recipe", rid)])
        n_steps = int(rr.integers(5, 13)) if r % 10 else int(rr.integers(3, 5))   # some too short
        sd = 1.0 / np.sqrt(dim)                     # noise terms have a norm of about their factor
        style = rr.normal(size=dim) * sd * 0.9
        recipes.append((rid, "sample", f"/{rid}/", f"Recipe {r}", "cooking", f"channel-{r % 5}",
                        assign_split(rid)))
        kinds = rr.choice(len(KINDS), size=n_steps, replace=True)
        for s in range(n_steps):
            title = f"{KINDS[kinds[s]]} {STYLES[int(rr.integers(len(STYLES)))]}".strip() if s else "Intro"
            steps.append((rid, s, title, f"Body of step {s} of {rid}."))
            txt_rows.append((f"{rid}_{s}_title", rid, s, centers[kinds[s]] + style * 0.5
                             + rr.normal(size=dim) * sd * 0.6))
            n_img = int(rr.integers(images_per_step[0], images_per_step[1] + 1))
            base = centers[kinds[s]] + style + rr.normal(size=dim) * sd * 0.7
            if stage_cue:
                base = base + stage_dir * stage_cue * s / max(n_steps - 1, 1)
            # own generator: the other vectors stay as they were without body vectors
            noise = np.random.default_rng([seed, stable_key("body", rid), s]).normal(size=dim)
            body_rows.append((f"{rid}_{s}_body", rid, s, base + noise * sd * 1.5))
            for o in range(n_img):
                iid = f"{rid}_{s}_{o}.jpg"
                ok = rr.random() > 0.03
                images.append((iid, rid, s, o, f"/img/{iid}", f"images/{rid}/{iid}",
                               "ok" if ok else "missing", f"{stable_key(iid):016x}" if ok else None,
                               None if ok else "http_404"))
                if ok:
                    img_vec_rows.append((iid, rid, s, base + rr.normal(size=dim) * sd * 0.4))
    now = utcnow()
    _insert(con, "recipes", ["recipe_id", "source", "url", "title", "category", "channel", "split"],
            recipes, extra="'ok', TIMESTAMP '" + now.isoformat(sep=" ") + "'", extra_cols="status, fetched_at")
    _insert(con, "steps", ["recipe_id", "step_idx", "title_raw", "body_raw"], steps,
            extra="title_raw, body_raw", extra_cols="title, body")
    _insert(con, "images", ["image_id", "recipe_id", "step_idx", "ord", "url", "path", "status", "sha256",
                            "status_reason"], images)
    con.execute("""INSERT OR REPLACE INTO encoders (encoder_id, kind, model_name, weights_sha256,
                   preprocess_sha256, dim, created_at) VALUES (?, 'synthetic', 'synthetic', 'x', 'x', ?, ?)""",
                [encoder_id, dim, utcnow()])
    split_of = {r[0]: r[6] for r in recipes}
    store = FeatureStore(lance_uri)
    img_mat = _unit(np.stack([v for *_, v in img_vec_rows]))
    store.upsert(IMAGE_TABLE, vector_rows(
        [r[0] for r in img_vec_rows], img_mat, recipe_id=[r[1] for r in img_vec_rows],
        step_idx=[r[2] for r in img_vec_rows], split=[split_of[r[1]] for r in img_vec_rows],
        encoder_id=encoder_id, sha256="x"))
    txt_mat = _unit(np.stack([v for *_, v in txt_rows]))
    store.upsert(TEXT_TABLE, vector_rows(
        [r[0] for r in txt_rows], txt_mat, recipe_id=[r[1] for r in txt_rows],
        step_idx=[r[2] for r in txt_rows], field="title", split=[split_of[r[1]] for r in txt_rows],
        encoder_id=encoder_id, text_sha256="x"))
    body_mat = _unit(np.stack([v for *_, v in body_rows]))
    store.upsert(TEXT_TABLE, vector_rows(
        [r[0] for r in body_rows], body_mat, recipe_id=[r[1] for r in body_rows],
        step_idx=[r[2] for r in body_rows], field="body", split=[split_of[r[1]] for r in body_rows],
        encoder_id=encoder_id, text_sha256="x"))
    n_nb = build_neighbours(con, store, encoder_id, k)
    return {"recipes": len(recipes), "steps": len(steps), "images": len(images),
            "image_vectors": len(img_vec_rows), "title_vectors": len(txt_rows), "neighbours": n_nb,
            "encoder_id": encoder_id}


def _insert(con, table: str, cols: list[str], rows: list[tuple], extra: str = "", extra_cols: str = "") -> None:
    """Bulk insert-or-replace through Arrow (executemany is row-at-a-time)."""
    tbl = pa.table({c: [r[i] for r in rows] for i, c in enumerate(cols)})
    con.register("syn_rows", tbl)
    sel = ", ".join(cols) + (f", {extra}" if extra else "")
    names = ", ".join(cols) + (f", {extra_cols}" if extra_cols else "")
    con.execute(f"INSERT OR REPLACE INTO {table} ({names}) SELECT {sel} FROM syn_rows")
    con.unregister("syn_rows")


def build_neighbours(con, store, encoder_id: str, k: int) -> int:
    """The neighbours table of the world's image vectors (features.vectors.neighbours, method auto:
    exact up to EXACT_AUTO_MAX images per split, else the recall-checked IVF build); returns its rows."""
    from features.vectors.neighbours import build_neighbour_table
    build_neighbour_table(con, store, encoder_id, k=k, method="auto")
    return con.execute("SELECT count(*) FROM neighbours WHERE encoder_id = ?", [encoder_id]).fetchall()[0][0]
