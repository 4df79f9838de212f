-- The pixel probe's folds of the train split (features/diagnostics/pixel_probe.py `train_fold_count`): as many
-- as it takes for every fold's model to train on at least as many questions as the test split's model. Rows
-- written before these columns had 2 folds of the train split, whose models trained on far fewer questions
-- and read less; the reading gate does not read them (the pixel probe is run again).
ALTER TABLE pixel_checks ADD COLUMN IF NOT EXISTS train_folds INTEGER;
ALTER TABLE pixel_checks ADD COLUMN IF NOT EXISTS fewest_trained INTEGER;

COMMENT ON COLUMN pixel_checks.train_folds IS 'Folds the train split''s recipes were cut in (the val and test splits are one fold each); null in rows written before migration 119 (2 folds, not read by the reading gate).';
COMMENT ON COLUMN pixel_checks.fewest_trained IS 'Questions the fold model that trained on the fewest trained on (early-stopping questions aside).';
