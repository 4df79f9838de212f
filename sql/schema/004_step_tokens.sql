-- NLTK tokens per sentence of a step's cleaned text (field: title | body).
CREATE TABLE IF NOT EXISTS step_tokens (
    recipe_id     VARCHAR NOT NULL,
    step_idx      INTEGER NOT NULL,
    field         VARCHAR NOT NULL,
    sentence_idx  INTEGER NOT NULL,
    tokens        VARCHAR[] NOT NULL,
    PRIMARY KEY (recipe_id, step_idx, field, sentence_idx)
);
