-- The pixel probe per visual dataset (`mrqa pixel-probe --record`, features/diagnostics/pixel_probe.py; the
-- pipeline's train stage for the visual datasets the reading gate holds back for want of one): a small CNN
-- trained end to end on the photos' pixels, question-only, every question scored by a model that never saw
-- its recipe (the val and test splits held out whole). A row holds while content_sha256 is the dataset's.
CREATE TABLE IF NOT EXISTS pixel_checks (
    dataset_id VARCHAR PRIMARY KEY,
    content_sha256 VARCHAR NOT NULL,
    task VARCHAR NOT NULL,
    n INTEGER NOT NULL,
    accuracy DOUBLE NOT NULL,
    ci_low DOUBLE,
    ci_high DOUBLE,
    test_accuracy DOUBLE,
    n_test INTEGER,
    seed INTEGER NOT NULL,
    side INTEGER NOT NULL,
    epochs INTEGER NOT NULL,
    computed_at TIMESTAMP NOT NULL
);

COMMENT ON TABLE pixel_checks IS 'The pixel probe (a CNN question-only model on the photos) per visual dataset (mrqa pixel-probe --record); valid while content_sha256 is the dataset''s.';
COMMENT ON COLUMN pixel_checks.dataset_id IS 'The dataset (datasets.dataset_id).';
COMMENT ON COLUMN pixel_checks.content_sha256 IS 'datasets.content_sha256 when it was measured; a row whose hash is no longer the dataset''s is stale and not read.';
COMMENT ON COLUMN pixel_checks.task IS 'The dataset''s task (a visual one).';
COMMENT ON COLUMN pixel_checks.n IS 'Questions scored (those whose photos could all be read).';
COMMENT ON COLUMN pixel_checks.accuracy IS 'Share of the scored questions the out-of-fold CNN answers.';
COMMENT ON COLUMN pixel_checks.ci_low IS '95% interval, low end: Wilson over the questions, widened by the recipe bootstrap.';
COMMENT ON COLUMN pixel_checks.ci_high IS '95% interval, high end.';
COMMENT ON COLUMN pixel_checks.test_accuracy IS 'The same on the test split''s questions.';
COMMENT ON COLUMN pixel_checks.n_test IS 'Test split questions scored.';
COMMENT ON COLUMN pixel_checks.seed IS 'Seed of the folds and the models.';
COMMENT ON COLUMN pixel_checks.side IS 'Photos scaled to side x side pixels.';
COMMENT ON COLUMN pixel_checks.epochs IS 'Most epochs per fold''s model (early-stopped).';
COMMENT ON COLUMN pixel_checks.computed_at IS 'When it was measured, UTC.';
