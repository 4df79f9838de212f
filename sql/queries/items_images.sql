-- Image items of a feature space: every ok image of an ok recipe that has a vector.
-- Inputs: store_vectors(item_id, vec) registered from LanceDB by features/datasets/generate.py.
-- The split comes from recipes (authoritative, stable per recipe), not from the vector rows.
WITH store_vectors AS (
    SELECT item_id, vec FROM gen_store_vectors
),
ok_images AS (
    SELECT i.image_id, i.recipe_id, i.step_idx, r.split
    FROM images i
    JOIN recipes r USING (recipe_id)
    WHERE i.status = 'ok' AND r.status = 'ok' AND r.split IN ('train', 'val', 'test')
),
final AS (
    SELECT o.image_id AS item_id, o.recipe_id, o.step_idx, o.split,
           CAST(NULL AS VARCHAR) AS item_text, v.vec
    FROM ok_images o
    JOIN store_vectors v ON v.item_id = o.image_id
)
SELECT * FROM final ORDER BY item_id;
