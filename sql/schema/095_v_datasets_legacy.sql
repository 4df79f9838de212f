-- The datasets table as queries written before 094 saw it: knob3 as VARCHAR '0' | '1' | '1:all' |
-- '1:balanced' (value and mode in one string). New queries use datasets.knob3 (INTEGER), k3_mode and setting.
CREATE OR REPLACE VIEW v_datasets_legacy AS
WITH final AS (
    SELECT dataset_id, task, knob1, knob2,
           CASE WHEN knob3 IS NULL THEN NULL
                WHEN k3_mode IN ('all', 'balanced') THEN concat(knob3, ':', k3_mode)
                ELSE CAST(knob3 AS VARCHAR) END AS knob3,
           preset, seed, encoder_id, params, created_at, n_questions, n_recipes, content_sha256
    FROM datasets
)
SELECT * FROM final;

COMMENT ON VIEW v_datasets_legacy IS 'datasets with the pre-094 knob3 VARCHAR (0 | 1 | 1:all | 1:balanced), for queries written against it; new queries use datasets.knob3, k3_mode and setting.';
COMMENT ON COLUMN v_datasets_legacy.dataset_id IS 'The dataset (datasets.dataset_id).';
COMMENT ON COLUMN v_datasets_legacy.task IS 'visual_cloze | visual_coherence | visual_ordering | textual_cloze.';
COMMENT ON COLUMN v_datasets_legacy.knob1 IS 'Knob 1: 0 | 1; NULL for presets.';
COMMENT ON COLUMN v_datasets_legacy.knob2 IS 'Knob 2: 0 | 1; NULL for presets.';
COMMENT ON COLUMN v_datasets_legacy.knob3 IS 'Knob 3 with its mode, as before 094: 0 | 1 (coin flip) | 1:all | 1:balanced; NULL for presets.';
COMMENT ON COLUMN v_datasets_legacy.preset IS 'recipeqa for the RecipeQA-style preset, else NULL.';
COMMENT ON COLUMN v_datasets_legacy.seed IS 'The generation seed.';
COMMENT ON COLUMN v_datasets_legacy.encoder_id IS 'The feature space of the distances.';
COMMENT ON COLUMN v_datasets_legacy.params IS 'JSON: every knob parameter, skips, answer positions, distance-probe accuracy.';
COMMENT ON COLUMN v_datasets_legacy.created_at IS 'When the dataset was registered, UTC.';
COMMENT ON COLUMN v_datasets_legacy.n_questions IS 'Number of questions.';
COMMENT ON COLUMN v_datasets_legacy.n_recipes IS 'Number of recipes with at least one question.';
COMMENT ON COLUMN v_datasets_legacy.content_sha256 IS 'sha256 over the questions'' canonical JSON in qid order.';
