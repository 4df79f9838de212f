-- every step belongs to a known recipe; step indices are non-negative
SELECT s.recipe_id, s.step_idx FROM steps s
LEFT JOIN recipes r USING (recipe_id)
WHERE r.recipe_id IS NULL OR s.step_idx < 0;
