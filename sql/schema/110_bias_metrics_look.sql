-- The look probe in the report (features/diagnostics/look_probe.py): the learned question-only probe on
-- the photos' pixel statistics (a thumbnail, a colour histogram, the colours of the frame and the centre),
-- outside the encoder's space that the knobs and AF filter in. Visual tasks only; null for textual cloze
-- and where no photo could be read.
ALTER TABLE bias_metrics ADD COLUMN IF NOT EXISTS look_acc DOUBLE;
ALTER TABLE bias_metrics ADD COLUMN IF NOT EXISTS look_ci_low DOUBLE;
ALTER TABLE bias_metrics ADD COLUMN IF NOT EXISTS look_ci_high DOUBLE;
ALTER TABLE bias_metrics ADD COLUMN IF NOT EXISTS look_test_acc DOUBLE;

COMMENT ON COLUMN bias_metrics.look_acc IS 'Visual tasks: the look probe''s cross-fitted accuracy (folds of recipes) on every scored question; null otherwise.';
COMMENT ON COLUMN bias_metrics.look_ci_low IS 'Its 95% interval, low end (Wilson widened by the recipe bootstrap).';
COMMENT ON COLUMN bias_metrics.look_ci_high IS 'Its 95% interval, high end.';
COMMENT ON COLUMN bias_metrics.look_test_acc IS 'The look probe on the test split''s questions.';
