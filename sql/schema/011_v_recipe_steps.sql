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
