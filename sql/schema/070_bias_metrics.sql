-- Bias diagnostics per dataset (features/diagnostics/bias.py): context-free Hasty Student accuracy,
-- cross-validated distance-probe accuracy (answer picked from choice distances alone), share of the
-- answer's distance rank among its choices (0 = nearest), and overlap between a recipe's questions
-- (coverage = share of the recipe's steps its questions show; question_overlap = mean pairwise
-- Jaccard of their step sets). Replaced per dataset by `mrqa report`.
CREATE TABLE IF NOT EXISTS bias_metrics (
    dataset_id         VARCHAR PRIMARY KEY,
    task               VARCHAR NOT NULL,
    knobs              VARCHAR NOT NULL,
    encoder_id         VARCHAR,
    seed               BIGINT,
    n_questions        INTEGER NOT NULL,
    n_scored           INTEGER NOT NULL,
    n_recipes          INTEGER,
    chance             DOUBLE NOT NULL,
    hasty_student_acc  DOUBLE,
    probe_acc          DOUBLE,
    probe_model        VARCHAR NOT NULL,
    probe_folds        INTEGER NOT NULL,
    recipe_coverage    DOUBLE,
    question_overlap   DOUBLE,
    answer_rank_share  JSON,
    computed_at        TIMESTAMP NOT NULL
);
