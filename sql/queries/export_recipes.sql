-- Every ok recipe of the splits the exported datasets use (distractors come from all of them).
WITH used_splits AS (
    SELECT DISTINCT q.split FROM questions q JOIN export_datasets USING (dataset_id)
),
final AS (
    SELECT r.recipe_id, r.source, r.url, r.title, r.category, r.channel, r.split
    FROM recipes r
    JOIN used_splits s USING (split)
    WHERE r.status = 'ok'
)
SELECT * FROM final ORDER BY recipe_id;
