-- every image belongs to a known recipe, follows RecipeQA naming, and has a known status
SELECT i.image_id FROM images i
LEFT JOIN recipes r USING (recipe_id)
WHERE r.recipe_id IS NULL
   OR i.image_id <> i.recipe_id || '_' || i.step_idx || '_' || i.ord || '.jpg'
   OR i.status NOT IN ('ok', 'missing', 'broken', 'pending')
   OR (i.status = 'ok' AND (i.sha256 IS NULL OR i.path IS NULL))
   OR (i.status IN ('missing', 'broken') AND i.status_reason IS NULL);
