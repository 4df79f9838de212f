-- One row per generated (or imported) benchmark dataset.
CREATE TABLE IF NOT EXISTS datasets (
    dataset_id      VARCHAR PRIMARY KEY,
    task            VARCHAR NOT NULL,
    knob1           INTEGER,
    knob2           INTEGER,
    knob3           VARCHAR,
    preset          VARCHAR,
    seed            BIGINT,
    encoder_id      VARCHAR,
    params          JSON,
    created_at      TIMESTAMP NOT NULL,
    n_questions     INTEGER NOT NULL,
    n_recipes       INTEGER NOT NULL,
    content_sha256  VARCHAR
);
