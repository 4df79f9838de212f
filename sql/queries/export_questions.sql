-- Questions of the exported datasets (temp view export_datasets(dataset_id)), one row per question, typed
-- for the Parquet export: the hive partition columns task / knobs (the setting's name, datasets.setting,
-- written by features/datasets/knobs.py setting_name: 0-0-1, 0-0-1-balanced, 0-1-1-af, recipeqa) / split
-- are columns of the files too; k1 / k2 / k3 are small integers (NULL for a preset), k3_mode and
-- adversarial say the knob-3 mode and adversarial filtering; visual ordering's choices are also given as
-- lists of image ids (choice_orderings; choice_list keeps the JSON text of each ordering).
-- One knobs= value holds one dataset: where the export holds several datasets of one task and setting
-- (another seed, another encoder, or other parameters: a `-p` dataset), the one with the setting's own
-- parameters and the lowest seed (then the smallest id) keeps the setting's name, so adding a twin does
-- not rename it, and each other one's value is the setting's name followed by the rest of its id,
-- `s<seed>-<enc8>[-p<hash6>]` (0-1-1-s0-1a2b3c4d-p5e6f7a).
WITH chosen AS (
    SELECT dataset_id FROM export_datasets
),
config AS (
    SELECT d.dataset_id,
           CASE WHEN count(*) OVER (PARTITION BY d.task, d.setting) = 1
                  OR (NOT regexp_matches(d.dataset_id, '-p[0-9a-f]{6}$')
                      AND row_number() OVER (PARTITION BY d.task, d.setting
                                             ORDER BY regexp_matches(d.dataset_id, '-p[0-9a-f]{6}$'), d.seed,
                                                      d.dataset_id) = 1) THEN d.setting
                ELSE d.setting || '-' || coalesce(nullif(regexp_extract(d.dataset_id, '-(s[0-9]+-[0-9a-f]{8}.*)$', 1),
                                                         ''), d.dataset_id) END AS knobs
    FROM datasets d JOIN chosen c USING (dataset_id)
),
final AS (
    SELECT q.dataset_id, q.qid, q.recipe_id,
           q.task, g.knobs, q.split,
           CAST(d.knob1 AS TINYINT) AS k1,
           CAST(d.knob2 AS TINYINT) AS k2,
           CAST(d.knob3 AS TINYINT) AS k3,
           coalesce(d.k3_mode, 'off') AS k3_mode,
           coalesce(d.adversarial, false) AS adversarial,
           d.preset, d.seed, d.encoder_id,
           q.question, q.choice_list,
           CASE WHEN q.task = 'visual_ordering'
                THEN list_transform(q.choice_list, lambda c: from_json(c, '["VARCHAR"]')) END AS choice_orderings,
           q.answer, q.question_step_ids,
           CAST(q.provenance AS VARCHAR) AS provenance
    FROM questions q
    JOIN datasets d USING (dataset_id)
    JOIN config g USING (dataset_id)
)
SELECT * FROM final ORDER BY task, knobs, split, dataset_id, qid;
