-- source, status and split take only documented values
SELECT recipe_id, source, status, split FROM recipes
WHERE source NOT IN ('instructables', 'recipeqa', 'sample')
   OR status NOT IN ('ok', 'partial', 'rejected')
   OR (split IS NOT NULL AND split NOT IN ('train', 'val', 'test'))
   OR (status <> 'ok' AND status_reason IS NULL);
