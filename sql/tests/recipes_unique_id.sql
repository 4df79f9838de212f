-- recipes.recipe_id is unique and not null
SELECT recipe_id, count(*) AS n FROM recipes GROUP BY recipe_id HAVING n > 1 OR recipe_id IS NULL;
