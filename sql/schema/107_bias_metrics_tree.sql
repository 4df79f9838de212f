-- The tree probe in the report (features/diagnostics/tree_probe.py): gradient-boosted trees on the
-- choice-set cues (a choice's distance to the question, its spread among the choices, its similarity to
-- each shown item), which the linear probe weighs one by one. Fitted on a task's AF datasets together
-- (one encoder and seed), the val and the test split each held out whole, so it is null for the other
-- datasets.
ALTER TABLE bias_metrics ADD COLUMN IF NOT EXISTS tree_acc DOUBLE;
ALTER TABLE bias_metrics ADD COLUMN IF NOT EXISTS tree_ci_low DOUBLE;
ALTER TABLE bias_metrics ADD COLUMN IF NOT EXISTS tree_ci_high DOUBLE;
ALTER TABLE bias_metrics ADD COLUMN IF NOT EXISTS tree_test_acc DOUBLE;

COMMENT ON COLUMN bias_metrics.tree_acc IS 'AF datasets: the tree probe''s cross-fitted accuracy on every scored question (pooled over the task''s AF datasets, val and test held out whole); null otherwise.';
COMMENT ON COLUMN bias_metrics.tree_ci_low IS 'Its 95% interval, low end (Wilson widened by the recipe bootstrap).';
COMMENT ON COLUMN bias_metrics.tree_ci_high IS 'Its 95% interval, high end.';
COMMENT ON COLUMN bias_metrics.tree_test_acc IS 'The tree probe on the test split''s questions.';
