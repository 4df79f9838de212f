-- Training / evaluation runs of the GM3C trainer.
CREATE TABLE IF NOT EXISTS runs (
    run_id          VARCHAR PRIMARY KEY,
    dataset_id      VARCHAR,
    model           VARCHAR,
    scorer          VARCHAR,
    text_features   VARCHAR,
    image_encoder   VARCHAR,
    config          JSON,
    metrics         JSON,
    started_at      TIMESTAMP,
    finished_at     TIMESTAMP
);
