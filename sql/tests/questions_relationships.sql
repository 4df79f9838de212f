-- questions belong to a registered dataset and a known recipe; the answer indexes the choice list
SELECT q.dataset_id, q.qid FROM questions q
LEFT JOIN datasets d USING (dataset_id)
LEFT JOIN recipes r ON r.recipe_id = q.recipe_id
WHERE d.dataset_id IS NULL OR r.recipe_id IS NULL
   OR q.answer < 0 OR q.answer >= len(q.choice_list)
   OR q.split NOT IN ('train', 'val', 'test');
