-- The generated datasets as `mrqa datasets` lists them: knob label (or preset; `-af` appended for an
-- adversarially filtered dataset), counts, skips, hash.
SELECT dataset_id, task, coalesce(preset, concat(knob1, '-', knob2, '-', knob3))
           || CASE WHEN coalesce(TRY_CAST(json_extract_string(params, '$.af_rounds') AS INTEGER), 0) > 0
                   THEN '-af' ELSE '' END AS knobs,
       seed, encoder_id, n_questions, n_recipes,
       json_extract(params, '$.skips') AS skips, content_sha256
FROM datasets
ORDER BY task, dataset_id;
