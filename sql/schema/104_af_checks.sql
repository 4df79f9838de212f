-- GM3C question-only accuracy on every question of an AF dataset, cross-fitted by recipe
-- (`mrqa af-check --record`, flows/af_pool.py af_check_flow): the stronger check beside bias_metrics'
-- linear probe. A row holds for the dataset's content when it was measured (content_sha256): a dataset
-- generated or filtered again no longer matches it, and its readers (features/datasets/card.py) skip it.
CREATE TABLE IF NOT EXISTS af_checks (
    dataset_id VARCHAR PRIMARY KEY,
    content_sha256 VARCHAR NOT NULL,
    task VARCHAR NOT NULL,
    n INTEGER NOT NULL,
    accuracy DOUBLE NOT NULL,
    ci_low DOUBLE,
    ci_high DOUBLE,
    by_seed JSON,
    seeds INTEGER[],
    folds INTEGER,
    size VARCHAR,
    computed_at TIMESTAMP NOT NULL
);

COMMENT ON TABLE af_checks IS 'GM3C question-only accuracy on every question of an AF dataset, cross-fitted by recipe (mrqa af-check --record); valid while content_sha256 is the dataset''s.';
COMMENT ON COLUMN af_checks.dataset_id IS 'The dataset (datasets.dataset_id).';
COMMENT ON COLUMN af_checks.content_sha256 IS 'datasets.content_sha256 when it was measured; a row whose hash is no longer the dataset''s is stale and not read.';
COMMENT ON COLUMN af_checks.task IS 'The dataset''s task.';
COMMENT ON COLUMN af_checks.n IS 'Questions scored (every question of the dataset).';
COMMENT ON COLUMN af_checks.accuracy IS 'Mean over the check seeds of the share of questions the out-of-fold GM3C question-only model answers.';
COMMENT ON COLUMN af_checks.ci_low IS '95% interval, low end: Wilson over the questions, widened by the recipe bootstrap.';
COMMENT ON COLUMN af_checks.ci_high IS '95% interval, high end.';
COMMENT ON COLUMN af_checks.by_seed IS 'JSON object: check seed -> accuracy.';
COMMENT ON COLUMN af_checks.seeds IS 'The check seeds (each its own fold split, apart from the adversary''s).';
COMMENT ON COLUMN af_checks.folds IS 'Folds of recipes.';
COMMENT ON COLUMN af_checks.size IS 'The GM3C model size (small).';
COMMENT ON COLUMN af_checks.computed_at IS 'When it was measured, UTC.';
