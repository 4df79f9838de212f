-- Coherence's matched foreign images (features/datasets/matched.py, beyond the paper) have a setting
-- name of their own, K1-0-0-matched[-af] (features/datasets/knobs.py setting_name), so they never share a
-- Parquet partition, card config or report row with the paper setting K1-0-0[-af]. Datasets made before
-- it carried the paper setting's name (their ids end in -p<params hash>; generating them again replaces
-- them under the new id): their names are corrected here, in datasets and bias_metrics.
UPDATE datasets SET setting = regexp_replace(setting, '(-af)?$', '-matched\1')
WHERE json_extract_string(params, '$.distractors') = 'matched' AND setting IS NOT NULL
  AND setting NOT LIKE '%-matched%';

UPDATE bias_metrics SET knobs = d.setting
FROM datasets d
WHERE bias_metrics.dataset_id = d.dataset_id AND d.setting IS NOT NULL AND bias_metrics.knobs <> d.setting;

COMMENT ON COLUMN datasets.setting IS 'The setting''s one name (features/datasets/knobs.py setting_name): k1-k2-k3, then -all or -balanced (knob-3 mode), then -matched (visual coherence''s matched foreign images, knobs 2 and 3 = 0), then -af; or the preset name (recipeqa).';
COMMENT ON COLUMN bias_metrics.knobs IS 'The setting''s name (datasets.setting): 0-0-1, 0-0-1-balanced, 0-1-1-af, 0-1-1-balanced-af, 0-0-0-matched-af, or the preset name.';
