-- Questions of a dataset; choice_list holds image ids (visual tasks) or texts (textual cloze);
-- for visual ordering each choice is a JSON list of image ids. answer is the 0-based choice index.
CREATE TABLE IF NOT EXISTS questions (
    dataset_id         VARCHAR NOT NULL,
    qid                VARCHAR NOT NULL,
    task               VARCHAR NOT NULL,
    recipe_id          VARCHAR NOT NULL,
    split              VARCHAR NOT NULL,
    question           VARCHAR[] NOT NULL,
    choice_list        VARCHAR[] NOT NULL,
    answer             INTEGER NOT NULL,
    question_step_ids  INTEGER[],
    provenance         JSON,
    PRIMARY KEY (dataset_id, qid)
);
