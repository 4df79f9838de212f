-- Analyst view: one row per step with its recipe's metadata and image count.
CREATE OR REPLACE VIEW v_recipe_steps AS
WITH image_counts AS (
    SELECT recipe_id, step_idx,
           count(*) FILTER (WHERE status = 'ok') AS n_images_ok,
           count(*) AS n_images
    FROM images
    GROUP BY recipe_id, step_idx
),
final AS (
    SELECT r.recipe_id, r.source, r.title AS recipe_title, r.category, r.channel, r.split,
           r.status AS recipe_status,
           s.step_idx, s.title AS step_title, s.body AS step_body, s.n_videos,
           coalesce(ic.n_images_ok, 0) AS n_images_ok,
           coalesce(ic.n_images, 0) AS n_images
    FROM recipes r
    JOIN steps s USING (recipe_id)
    LEFT JOIN image_counts ic USING (recipe_id, step_idx)
)
SELECT * FROM final;

-- Comments live here, not in a later migration: CREATE OR REPLACE VIEW drops a view's comments.
COMMENT ON VIEW v_recipe_steps IS 'Analyst view: one row per step with its recipe''s metadata and image counts.';
COMMENT ON COLUMN v_recipe_steps.recipe_id IS 'The recipe (recipes.recipe_id).';
COMMENT ON COLUMN v_recipe_steps.source IS 'instructables | recipeqa | sample.';
COMMENT ON COLUMN v_recipe_steps.recipe_title IS 'The recipe''s title.';
COMMENT ON COLUMN v_recipe_steps.category IS 'The recipe''s site category.';
COMMENT ON COLUMN v_recipe_steps.channel IS 'The recipe''s site channel.';
COMMENT ON COLUMN v_recipe_steps.split IS 'train | val | test.';
COMMENT ON COLUMN v_recipe_steps.recipe_status IS 'ok | rejected | partial.';
COMMENT ON COLUMN v_recipe_steps.step_idx IS '0 = intro, 1.. = steps.';
COMMENT ON COLUMN v_recipe_steps.step_title IS 'Cleaned step title.';
COMMENT ON COLUMN v_recipe_steps.step_body IS 'Cleaned step body.';
COMMENT ON COLUMN v_recipe_steps.n_videos IS 'Videos embedded in the step.';
COMMENT ON COLUMN v_recipe_steps.n_images_ok IS 'Images of the step with status ok.';
COMMENT ON COLUMN v_recipe_steps.n_images IS 'Images of the step, any status.';
