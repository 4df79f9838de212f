-- Steps (cleaned text) of every ok recipe of the exported splits, with their ok image ids.
WITH used_splits AS (
    SELECT DISTINCT q.split FROM questions q JOIN export_datasets USING (dataset_id)
),
recipes_used AS (
    SELECT r.recipe_id, r.split FROM recipes r JOIN used_splits USING (split) WHERE r.status = 'ok'
),
step_images AS (
    SELECT recipe_id, step_idx, list(image_id ORDER BY ord) AS image_ids
    FROM images WHERE status = 'ok' GROUP BY recipe_id, step_idx
),
final AS (
    SELECT s.recipe_id, r.split, s.step_idx, s.title, s.body,
           coalesce(i.image_ids, CAST([] AS VARCHAR[])) AS image_ids
    FROM steps s
    JOIN recipes_used r USING (recipe_id)
    LEFT JOIN step_images i USING (recipe_id, step_idx)
)
SELECT * FROM final ORDER BY recipe_id, step_idx;
