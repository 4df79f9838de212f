-- Steps of every ok recipe of the exported splits: the raw text as scraped, the cleaned and repaired
-- text (what models read; etl/clean.py), the word tokens per sentence, and the step's ok image ids.
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
step_sentences AS (
    SELECT recipe_id, step_idx,
           list(tokens ORDER BY sentence_idx) FILTER (WHERE field = 'title') AS title_tokens,
           list(tokens ORDER BY sentence_idx) FILTER (WHERE field = 'body') AS body_tokens
    FROM step_tokens GROUP BY recipe_id, step_idx
),
final AS (
    SELECT s.recipe_id, r.split, s.step_idx, s.title, s.body, s.title_raw, s.body_raw,
           coalesce(t.title_tokens, CAST([] AS VARCHAR[][])) AS title_tokens,
           coalesce(t.body_tokens, CAST([] AS VARCHAR[][])) AS body_tokens,
           coalesce(i.image_ids, CAST([] AS VARCHAR[])) AS image_ids
    FROM steps s
    JOIN recipes_used r USING (recipe_id)
    LEFT JOIN step_images i USING (recipe_id, step_idx)
    LEFT JOIN step_sentences t USING (recipe_id, step_idx)
)
SELECT * FROM final ORDER BY recipe_id, step_idx;
