-- The reading check per dataset (`mrqa reading-check --record`, the demo's train stage; flows/train.py
-- reading_check): a recipe reader and a learned question-only model trained on the checked datasets' train
-- questions together, each scored on a dataset's test split, and the reader again with another recipe's
-- steps. `mrqa export --reading-only` (features/datasets/card.py reading_gate) needs the reader to lead
-- question-only and to lose with another recipe's steps. A row holds for the dataset's content when it
-- was measured (content_sha256): a dataset generated or filtered again no longer matches it and is skipped.
CREATE TABLE IF NOT EXISTS reading_checks (
    dataset_id VARCHAR PRIMARY KEY,
    content_sha256 VARCHAR NOT NULL,
    task VARCHAR NOT NULL,
    seed INTEGER NOT NULL,
    n_test INTEGER NOT NULL,
    reader_acc DOUBLE NOT NULL,
    question_only_acc DOUBLE NOT NULL,
    reader_other_recipe_acc DOUBLE NOT NULL,
    pooled_with VARCHAR[],
    reader JSON,
    question_only JSON,
    computed_at TIMESTAMP NOT NULL
);

COMMENT ON TABLE reading_checks IS 'The reading check per dataset (mrqa reading-check --record): a reader and a learned question-only model on its test split, and the reader with another recipe''s steps; valid while content_sha256 is the dataset''s.';
COMMENT ON COLUMN reading_checks.dataset_id IS 'The dataset (datasets.dataset_id).';
COMMENT ON COLUMN reading_checks.content_sha256 IS 'datasets.content_sha256 when it was measured; a row whose hash is no longer the dataset''s is stale and not read.';
COMMENT ON COLUMN reading_checks.task IS 'The dataset''s task.';
COMMENT ON COLUMN reading_checks.seed IS 'The models'' seed.';
COMMENT ON COLUMN reading_checks.n_test IS 'Questions of the test split scored.';
COMMENT ON COLUMN reading_checks.reader_acc IS 'The reader''s accuracy on the test split, with the question''s own recipe.';
COMMENT ON COLUMN reading_checks.question_only_acc IS 'The learned question-only model''s accuracy on the test split (it never sees the recipe).';
COMMENT ON COLUMN reading_checks.reader_other_recipe_acc IS 'The reader''s accuracy on the test split given another recipe''s steps (the context ablation).';
COMMENT ON COLUMN reading_checks.pooled_with IS 'The datasets whose train questions the two models trained on together (this one among them).';
COMMENT ON COLUMN reading_checks.reader IS 'JSON object: the reader''s configuration (scorer, size, layers, epochs, ...).';
COMMENT ON COLUMN reading_checks.question_only IS 'JSON object: the question-only model''s configuration.';
COMMENT ON COLUMN reading_checks.computed_at IS 'When it was measured, UTC.';
