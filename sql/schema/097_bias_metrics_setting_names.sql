-- bias_metrics.knobs holds the setting's name (datasets.setting, features/datasets/knobs.py setting_name)
-- since 094; rows computed before it spelled the knob-3 mode as `0-0-1:balanced` and are renamed here.
UPDATE bias_metrics SET knobs = d.setting
FROM datasets d
WHERE bias_metrics.dataset_id = d.dataset_id AND d.setting IS NOT NULL AND bias_metrics.knobs <> d.setting;

COMMENT ON COLUMN bias_metrics.knobs IS 'The setting''s name (datasets.setting): 0-0-1, 0-0-1-balanced, 0-1-1-af, 0-1-1-balanced-af, or the preset name.';
