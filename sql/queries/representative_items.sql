-- One representative item per step: a seeded pick among the step's items (images: its ok images
-- with a vector; titles: the title itself). The pick is min md5("<seed>:<item_id>"), so it is
-- stable across runs, machines and DuckDB versions, and changes with the seed.
-- Parameters: $seed.
WITH items AS (
    SELECT item_id, recipe_id, step_idx FROM gen_items
),
final AS (
    SELECT recipe_id, step_idx, item_id
    FROM items
    QUALIFY row_number() OVER (PARTITION BY recipe_id, step_idx
                               ORDER BY md5(concat(CAST($seed AS VARCHAR), ':', item_id)), item_id) = 1
)
SELECT * FROM final ORDER BY recipe_id, step_idx;
