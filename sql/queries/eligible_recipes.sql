-- Per recipe: its split and the steps that may appear in a question (step 0, the intro, never does;
-- a step needs a representative item). Knob 1's minimum step count is applied in features/datasets/tasks.py
-- so that recipes below it are counted as skips.
WITH reps AS (
    SELECT recipe_id, step_idx FROM gen_reps WHERE step_idx >= 1
),
recipe_split AS (
    SELECT recipe_id, split FROM recipes WHERE status = 'ok' AND split IN ('train', 'val', 'test')
),
final AS (
    SELECT r.recipe_id, s.split, list(r.step_idx ORDER BY r.step_idx) AS step_ids
    FROM reps r
    JOIN recipe_split s USING (recipe_id)
    GROUP BY r.recipe_id, s.split
)
SELECT * FROM final ORDER BY recipe_id;
