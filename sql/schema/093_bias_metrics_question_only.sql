-- The learned question-only probe per dataset (features/diagnostics/question_only.py): a conditional
-- logit on the dataset's frozen vectors (question and choices only, never the recipe text), each
-- question scored by a model fitted on other recipes (GroupKFold by recipe). Overall accuracy over
-- every scored question and over the test-split questions, each with a 95% interval: the percentile
-- bootstrap that resamples recipes, widened where needed to the Wilson score interval (with few recipes
-- the bootstrap alone is too narrow), see question_only.accuracy_interval.
ALTER TABLE bias_metrics ADD COLUMN IF NOT EXISTS qo_acc DOUBLE;
ALTER TABLE bias_metrics ADD COLUMN IF NOT EXISTS qo_ci_low DOUBLE;
ALTER TABLE bias_metrics ADD COLUMN IF NOT EXISTS qo_ci_high DOUBLE;
ALTER TABLE bias_metrics ADD COLUMN IF NOT EXISTS qo_n_test INTEGER;
ALTER TABLE bias_metrics ADD COLUMN IF NOT EXISTS qo_test_acc DOUBLE;
ALTER TABLE bias_metrics ADD COLUMN IF NOT EXISTS qo_test_ci_low DOUBLE;
ALTER TABLE bias_metrics ADD COLUMN IF NOT EXISTS qo_test_ci_high DOUBLE;

COMMENT ON COLUMN bias_metrics.qo_acc IS 'Learned question-only probe: accuracy over all scored questions, each scored by a model that never saw its recipe (5-fold GroupKFold by recipe).';
COMMENT ON COLUMN bias_metrics.qo_ci_low IS 'Lower end of the 95% bootstrap-by-recipe interval of qo_acc.';
COMMENT ON COLUMN bias_metrics.qo_ci_high IS 'Upper end of the 95% bootstrap-by-recipe interval of qo_acc.';
COMMENT ON COLUMN bias_metrics.qo_n_test IS 'Scored questions of split = test (the ones qo_test_acc covers).';
COMMENT ON COLUMN bias_metrics.qo_test_acc IS 'Learned question-only probe accuracy on the split = test questions (cross-fitted scores, so never from a model that saw the recipe).';
COMMENT ON COLUMN bias_metrics.qo_test_ci_low IS 'Lower end of the 95% bootstrap-by-recipe interval of qo_test_acc.';
COMMENT ON COLUMN bias_metrics.qo_test_ci_high IS 'Upper end of the 95% bootstrap-by-recipe interval of qo_test_acc.';
