-- Neighbours must come from OTHER recipes of the SAME split, with ranks 1..K and sorted distances.
WITH nb AS (
    SELECT n.*, i.recipe_id AS image_recipe_id,
           lag(n.distance) OVER (PARTITION BY n.encoder_id, n.image_id ORDER BY n.rank) AS prev_distance
    FROM neighbours AS n JOIN images AS i USING (image_id)
),
final AS (
    SELECT nb.* FROM nb
    JOIN recipes AS r1 ON r1.recipe_id = nb.image_recipe_id
    JOIN recipes AS r2 ON r2.recipe_id = nb.neighbour_recipe_id
    WHERE nb.neighbour_recipe_id = nb.image_recipe_id
       OR r1.split IS DISTINCT FROM r2.split
       OR nb.rank < 1
       OR nb.distance < nb.prev_distance - 1e-6
)
SELECT * FROM final
