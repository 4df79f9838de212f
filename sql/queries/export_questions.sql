-- Questions of the exported datasets (temp view export_datasets(dataset_id)), one row per question,
-- with the hive partition columns task / knobs (k1-k2-k3 or the preset name; `-af` appended for an
-- adversarially filtered dataset) / split.
WITH chosen AS (
    SELECT dataset_id FROM export_datasets
),
final AS (
    SELECT q.recipe_id, q.dataset_id, q.qid, q.split, q.question, q.choice_list, q.answer,
           q.question_step_ids, d.encoder_id, d.seed, d.knob1, d.knob2, d.knob3, d.preset,
           CAST(q.provenance AS VARCHAR) AS provenance,
           q.task,
           coalesce(d.preset, concat(d.knob1, '-', d.knob2, '-', replace(d.knob3, ':', '')))
               || CASE WHEN coalesce(TRY_CAST(json_extract_string(d.params, '$.af_rounds') AS INTEGER), 0) > 0
                       THEN '-af' ELSE '' END AS knobs
    FROM questions q
    JOIN datasets d USING (dataset_id)
    JOIN chosen c USING (dataset_id)
)
SELECT * FROM final ORDER BY task, knobs, split, dataset_id, qid;
