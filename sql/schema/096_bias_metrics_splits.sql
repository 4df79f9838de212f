-- Per-split figures of the bias diagnostics (features/diagnostics/bias.py split_metrics): for the
-- questions of each split (train, val, test) and of all of them, the Hasty Student's, the distance
-- probe's and the learned question-only probe's accuracy with the 95% Wilson score interval (the
-- questions taken as independent draws), and how many questions each figure covers.
ALTER TABLE bias_metrics ADD COLUMN IF NOT EXISTS split_metrics JSON;

COMMENT ON COLUMN bias_metrics.split_metrics IS 'JSON list, one entry per split (train, val, test) and one for all: {split, n, hasty_student_acc/_n/_ci, probe_acc/_n/_ci, qo_acc/_n/_ci}; _ci = [low, high] of the 95% Wilson score interval; null where the diagnostic did not run.';
