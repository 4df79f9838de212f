-- The closest-pair rule per dataset (features/diagnostics/bias.py pair_rule), visual coherence only:
-- of the two images most alike, pick the one less like the other two, without reading the recipe.
-- Knob 2 draws the foreign image from a shown image's nearest neighbours, so it is one of the
-- closest pair of the four far more often than half the time (a random one of the four); the rule
-- then reads the rest by a coin flip. Null for cloze and ordering.
ALTER TABLE bias_metrics ADD COLUMN IF NOT EXISTS pair_rule_acc DOUBLE;

COMMENT ON COLUMN bias_metrics.pair_rule_acc IS 'Visual coherence: accuracy of the closest-pair rule (of the two most alike images, the one less like the other two), the recipe unseen; null for other tasks.';
