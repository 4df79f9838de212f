-- The generated datasets as `mrqa datasets` lists them: knob label (or preset), counts, skips, hash.
SELECT dataset_id, task, coalesce(preset, concat(knob1, '-', knob2, '-', knob3)) AS knobs,
       seed, encoder_id, n_questions, n_recipes,
       json_extract(params, '$.skips') AS skips, content_sha256
FROM datasets
ORDER BY task, dataset_id;
