-- tokens belong to an existing step
SELECT t.recipe_id, t.step_idx FROM step_tokens t
LEFT JOIN steps s USING (recipe_id, step_idx)
WHERE s.recipe_id IS NULL;
