-- The tree probe's figure beside GM3C's (features/diagnostics/tree_probe.py): gradient-boosted trees on
-- the choice-set cues, pooled over the task's AF datasets, cross-fitted with the check's seeds and
-- fold_by. A nonlinear model of the cues the linear probe weighs one by one. Rows recorded before this
-- file have none (null).
ALTER TABLE af_checks ADD COLUMN IF NOT EXISTS tree_accuracy DOUBLE;
ALTER TABLE af_checks ADD COLUMN IF NOT EXISTS tree_ci_low DOUBLE;
ALTER TABLE af_checks ADD COLUMN IF NOT EXISTS tree_ci_high DOUBLE;
ALTER TABLE af_checks ADD COLUMN IF NOT EXISTS tree_by_split JSON;

COMMENT ON COLUMN af_checks.tree_accuracy IS 'Mean over the check seeds of the share of questions the out-of-fold tree probe answers; null for rows recorded before 106.';
COMMENT ON COLUMN af_checks.tree_ci_low IS 'Its 95% interval, low end (Wilson widened by the recipe bootstrap).';
COMMENT ON COLUMN af_checks.tree_ci_high IS 'Its 95% interval, high end.';
COMMENT ON COLUMN af_checks.tree_by_split IS 'JSON object: split -> {n, accuracy, ci} of the tree probe.';
