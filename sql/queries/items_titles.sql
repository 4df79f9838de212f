-- Title items of the text feature space: step titles (non-empty, cleaned) of ok recipes with a
-- vector; item_id = "<recipe_id>_<step_idx>_title" as in LanceDB step_text_vectors.
WITH store_vectors AS (
    SELECT item_id, vec FROM gen_store_vectors
),
titled_steps AS (
    SELECT s.recipe_id, s.step_idx, r.split, trim(s.title) AS title
    FROM steps s
    JOIN recipes r USING (recipe_id)
    WHERE r.status = 'ok' AND r.split IN ('train', 'val', 'test')
      AND s.title IS NOT NULL AND trim(s.title) <> ''
),
final AS (
    SELECT concat(t.recipe_id, '_', t.step_idx, '_title') AS item_id, t.recipe_id, t.step_idx,
           t.split, t.title AS item_text, v.vec
    FROM titled_steps t
    JOIN store_vectors v ON v.item_id = concat(t.recipe_id, '_', t.step_idx, '_title')
)
SELECT * FROM final ORDER BY item_id;
