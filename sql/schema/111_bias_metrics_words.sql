-- The words probe in the report (features/diagnostics/words_probe.py): the learned question-only probe on
-- the step titles' own words (TF-IDF of words and word pairs, on its principal axes), outside the encoder's
-- space that the knobs and AF filter in, and the tree probe in that space. Textual cloze only; null for the
-- visual tasks.
ALTER TABLE bias_metrics ADD COLUMN IF NOT EXISTS words_acc DOUBLE;
ALTER TABLE bias_metrics ADD COLUMN IF NOT EXISTS words_ci_low DOUBLE;
ALTER TABLE bias_metrics ADD COLUMN IF NOT EXISTS words_ci_high DOUBLE;
ALTER TABLE bias_metrics ADD COLUMN IF NOT EXISTS words_test_acc DOUBLE;
ALTER TABLE bias_metrics ADD COLUMN IF NOT EXISTS words_tree_acc DOUBLE;
ALTER TABLE bias_metrics ADD COLUMN IF NOT EXISTS words_tree_ci_low DOUBLE;
ALTER TABLE bias_metrics ADD COLUMN IF NOT EXISTS words_tree_ci_high DOUBLE;
ALTER TABLE bias_metrics ADD COLUMN IF NOT EXISTS words_tree_test_acc DOUBLE;

COMMENT ON COLUMN bias_metrics.words_acc IS 'Textual cloze: the words probe''s cross-fitted accuracy (folds of recipes) on every scored question; null otherwise.';
COMMENT ON COLUMN bias_metrics.words_ci_low IS 'Its 95% interval, low end (Wilson widened by the recipe bootstrap).';
COMMENT ON COLUMN bias_metrics.words_ci_high IS 'Its 95% interval, high end.';
COMMENT ON COLUMN bias_metrics.words_test_acc IS 'The words probe on the test split''s questions.';
COMMENT ON COLUMN bias_metrics.words_tree_acc IS 'Textual cloze: the tree probe (gradient-boosted trees on the choice-set cues) in the words space, cross-fitted, on every scored question; null otherwise.';
COMMENT ON COLUMN bias_metrics.words_tree_ci_low IS 'Its 95% interval, low end.';
COMMENT ON COLUMN bias_metrics.words_tree_ci_high IS 'Its 95% interval, high end.';
COMMENT ON COLUMN bias_metrics.words_tree_test_acc IS 'The words trees on the test split''s questions.';
