-- The centre-of-the-choices rule per dataset (features/diagnostics/bias.py centre_rule): pick the
-- choice with the highest mean cosine to the other choices, without looking at the question. When
-- distractors are drawn around the answer (knob 2 picks them close to it), the answer is the centre
-- of its choice set far more often than 1 in 4; RecipeQA's own distractors show no such cue. Visual
-- and textual cloze and visual coherence; null for ordering (its choices are orders of the same images).
ALTER TABLE bias_metrics ADD COLUMN IF NOT EXISTS centre_rule_acc DOUBLE;

COMMENT ON COLUMN bias_metrics.centre_rule_acc IS 'Accuracy of the centre-of-the-choices rule: the choice with the highest mean cosine to the other choices, the question unseen; null for ordering.';
