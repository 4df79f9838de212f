-- The order probe in the report (features/diagnostics/order_probe.py): the learned question-only probe on
-- what a reader of many recipes knows of step titles without reading the question's recipe: over the train
-- split's recipes, which titles come before which and where in a recipe each stands (the question's and each
-- choice's own recipe left out). Textual cloze only; null for the visual tasks.
ALTER TABLE bias_metrics ADD COLUMN IF NOT EXISTS order_acc DOUBLE;
ALTER TABLE bias_metrics ADD COLUMN IF NOT EXISTS order_ci_low DOUBLE;
ALTER TABLE bias_metrics ADD COLUMN IF NOT EXISTS order_ci_high DOUBLE;
ALTER TABLE bias_metrics ADD COLUMN IF NOT EXISTS order_test_acc DOUBLE;

COMMENT ON COLUMN bias_metrics.order_acc IS 'Textual cloze: the order probe''s cross-fitted accuracy (folds of recipes) on every scored question; null otherwise.';
COMMENT ON COLUMN bias_metrics.order_ci_low IS 'Its 95% interval, low end (Wilson widened by the recipe bootstrap).';
COMMENT ON COLUMN bias_metrics.order_ci_high IS 'Its 95% interval, high end.';
COMMENT ON COLUMN bias_metrics.order_test_acc IS 'The order probe on the test split''s questions.';
