-- The generated datasets as `mrqa datasets` lists them: the setting's name (datasets.setting, from
-- features/datasets/knobs.py setting_name: 0-0-1, 0-0-1-balanced, 0-1-1-af, recipeqa), counts, skips, hash.
SELECT dataset_id, task, setting AS knobs,
       seed, encoder_id, n_questions, n_recipes,
       json_extract(params, '$.skips') AS skips, content_sha256
FROM datasets
ORDER BY task, dataset_id;
