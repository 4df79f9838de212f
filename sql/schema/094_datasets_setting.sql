-- One name per knob setting (features/datasets/knobs.py setting_name, docs/knobs.md): knob3 becomes the
-- INTEGER 0 | 1 next to knob1/knob2, its mode moves to k3_mode, adversarial filtering gets a column of its
-- own, and `setting` holds the setting's name (0-0-1, 0-0-1-balanced, 0-1-1-af, 0-1-1-balanced-af,
-- recipeqa), the value of the export's knobs= partition, the report's rows and `mrqa datasets`.
-- Queries written against the old VARCHAR knob3 ('1:balanced') read v_datasets_legacy (095).
ALTER TABLE datasets ADD COLUMN IF NOT EXISTS k3_mode VARCHAR;
ALTER TABLE datasets ADD COLUMN IF NOT EXISTS adversarial BOOLEAN;
ALTER TABLE datasets ADD COLUMN IF NOT EXISTS setting VARCHAR;

UPDATE datasets SET
    k3_mode = CASE WHEN preset IS NOT NULL OR knob3 IS NULL THEN coalesce(json_extract_string(params, '$.k3_mode'), 'off')
                   WHEN knob3 = '0' THEN 'off'
                   WHEN knob3 = '1' THEN 'coin'
                   ELSE split_part(knob3, ':', 2) END,
    adversarial = coalesce(TRY_CAST(json_extract_string(params, '$.af_rounds') AS INTEGER), 0) > 0;

ALTER TABLE datasets ALTER COLUMN knob3 SET DATA TYPE INTEGER USING TRY_CAST(split_part(knob3, ':', 1) AS INTEGER);

-- the same grammar as setting_name (tests/sql/test_setting_migration.py checks they agree)
UPDATE datasets SET setting = coalesce(
    preset,
    concat_ws('-', knob1, knob2, knob3,
              CASE WHEN knob3 = 1 AND k3_mode IN ('all', 'balanced') THEN k3_mode END,
              CASE WHEN adversarial THEN 'af' END));

COMMENT ON COLUMN datasets.dataset_id IS 'Deterministic id: <task code>-<setting>-s<seed>-<encoder hash>[-p<params hash>] (e.g. vc-0-0-1-balanced-s0-1a2b3c4d); ids made before setting names read <task code>-k<k1><k2><k3>-...; recipeqa-original-<task> for imports.';
COMMENT ON COLUMN datasets.knob3 IS 'Knob 3 (distractor distance from the question): 0 | 1; NULL for presets. Its mode is k3_mode.';
COMMENT ON COLUMN datasets.k3_mode IS 'Knob-3 mode: off (knob3 = 0) | coin (the paper''s per-question coin flip) | all | balanced; off for presets.';
COMMENT ON COLUMN datasets.adversarial IS 'True for an adversarially filtered dataset (params.af_rounds > 0).';
COMMENT ON COLUMN datasets.setting IS 'The setting''s one name (features/datasets/knobs.py setting_name): k1-k2-k3, then -all or -balanced (knob-3 mode), then -af; or the preset name (recipeqa).';
