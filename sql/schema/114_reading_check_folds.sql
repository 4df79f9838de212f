-- The reading check with every split held out in turn (`mrqa reading-check --folds split`;
-- training/split_folds.py): its figures are over every question of the dataset, each scored by models
-- trained on the other splits. Rows written before this column have the test split only.
ALTER TABLE reading_checks ADD COLUMN IF NOT EXISTS folds VARCHAR;

COMMENT ON COLUMN reading_checks.folds IS 'test: the models trained on the train split, the test split scored (n_test its questions) | split: every split held out in turn, every question scored (n_test all of them); null in rows written before migration 114: test.';
