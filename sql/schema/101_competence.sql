-- Competence questions (R2VQ-style families) generated from step_roles: open-text answers scored
-- by exact match and token F1. One dataset per family, registered in competence_datasets (their
-- questions are open text, not the choice lists of the questions table); unanswerable questions have
-- answer 'N/A' and answerable = false.
CREATE TABLE IF NOT EXISTS competence_datasets (
    dataset_id      VARCHAR PRIMARY KEY,
    family          VARCHAR NOT NULL,
    source          VARCHAR NOT NULL,
    seed            BIGINT NOT NULL,
    params          JSON,
    created_at      TIMESTAMP NOT NULL,
    n_questions     INTEGER NOT NULL,
    n_recipes       INTEGER NOT NULL,
    content_sha256  VARCHAR NOT NULL
);

CREATE TABLE IF NOT EXISTS competence_questions (
    dataset_id   VARCHAR NOT NULL,
    qid          VARCHAR NOT NULL,
    family       VARCHAR NOT NULL,
    template     VARCHAR NOT NULL,
    recipe_id    VARCHAR NOT NULL,
    split        VARCHAR NOT NULL,
    question     VARCHAR NOT NULL,
    answer       VARCHAR NOT NULL,
    answerable   BOOLEAN NOT NULL,
    step_idx     INTEGER,
    provenance   JSON NOT NULL,
    PRIMARY KEY (dataset_id, qid)
);

-- EM / F1 of each baseline and reader per family, on the test split (features/competence/evaluate.py).
CREATE TABLE IF NOT EXISTS competence_metrics (
    dataset_id   VARCHAR NOT NULL,
    family       VARCHAR NOT NULL,
    method       VARCHAR NOT NULL,
    split        VARCHAR NOT NULL,
    n            INTEGER NOT NULL,
    em           DOUBLE NOT NULL,
    f1           DOUBLE NOT NULL,
    computed_at  TIMESTAMP NOT NULL,
    PRIMARY KEY (dataset_id, method, split)
);

COMMENT ON TABLE competence_datasets IS 'Competence datasets, one per family: competence-<family>-s<seed>; source = the role layer they were made from (truth | rules).';
COMMENT ON TABLE competence_questions IS 'R2VQ-style competence questions (families cardinality, elision, implicit, lifespan, modifier, unanswerable) with open-text answers and the roles that justify them (provenance).';
COMMENT ON TABLE competence_metrics IS 'Exact match and token F1 (SQuAD normalisation) per competence dataset and method: answer_prior, question_only, context_only, reader, reader_other_recipe.';
COMMENT ON COLUMN competence_datasets.dataset_id IS 'competence-<family>-s<seed>.';
COMMENT ON COLUMN competence_datasets.family IS 'cardinality | elision | implicit | lifespan | modifier | unanswerable.';
COMMENT ON COLUMN competence_datasets.source IS 'The step_roles source the questions were asked from: truth | rules.';
COMMENT ON COLUMN competence_datasets.seed IS 'Seed of the unanswerable draws and the balancing.';
COMMENT ON COLUMN competence_datasets.params IS 'JSON: source, prior_cap, dropped_by_prior_cap.';
COMMENT ON COLUMN competence_datasets.created_at IS 'When the dataset was (re)generated (UTC).';
COMMENT ON COLUMN competence_datasets.n_questions IS 'Number of questions (rows of competence_questions).';
COMMENT ON COLUMN competence_datasets.n_recipes IS 'Number of recipes with at least one question.';
COMMENT ON COLUMN competence_datasets.content_sha256 IS 'sha256 over the questions in qid order: equal for equal inputs and seed.';
COMMENT ON COLUMN competence_questions.dataset_id IS 'The dataset (competence_datasets.dataset_id).';
COMMENT ON COLUMN competence_questions.qid IS 'sha256(recipe, family, template, question)[:16].';
COMMENT ON COLUMN competence_questions.family IS 'The competence family.';
COMMENT ON COLUMN competence_questions.template IS 'The question template within the family (e.g. time, temperature, tool, habitat, contents, quantity).';
COMMENT ON COLUMN competence_questions.recipe_id IS 'The recipe the question is about.';
COMMENT ON COLUMN competence_questions.split IS 'The recipe''s split (train | val | test).';
COMMENT ON COLUMN competence_questions.question IS 'The question text.';
COMMENT ON COLUMN competence_questions.answer IS 'The gold answer (open text, scored by EM / token F1 after SQuAD normalisation); N/A when unanswerable.';
COMMENT ON COLUMN competence_questions.answerable IS 'False for the N/A questions of the unanswerable family.';
COMMENT ON COLUMN competence_questions.step_idx IS 'The step whose roles justify the answer; null for recipe-wide questions.';
COMMENT ON COLUMN competence_questions.provenance IS 'JSON: why (the rule), roles (the step_roles rows that justify the answer), source.';
COMMENT ON COLUMN competence_metrics.dataset_id IS 'The dataset scored.';
COMMENT ON COLUMN competence_metrics.family IS 'Its family.';
COMMENT ON COLUMN competence_metrics.method IS 'answer_prior | question_only | context_only | reader | reader_other_recipe.';
COMMENT ON COLUMN competence_metrics.split IS 'The split scored (baselines fit on train).';
COMMENT ON COLUMN competence_metrics.n IS 'Questions scored.';
COMMENT ON COLUMN competence_metrics.em IS 'Exact match, %.';
COMMENT ON COLUMN competence_metrics.f1 IS 'Token F1, %.';
COMMENT ON COLUMN competence_metrics.computed_at IS 'When it was computed (UTC).';
