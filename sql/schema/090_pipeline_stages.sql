-- The pipeline flow's record of each stage (flows/pipeline.py): the fingerprint of the stage's
-- inputs (its input tables + parameters) and of its outputs when it last finished. A re-run skips a
-- stage whose inputs and outputs are unchanged. status: completed | failed (error says why).
CREATE TABLE IF NOT EXISTS pipeline_stages (
    stage               VARCHAR PRIMARY KEY,
    status              VARCHAR NOT NULL,
    inputs_fingerprint  VARCHAR,
    outputs_fingerprint VARCHAR,
    params              JSON,
    summary             JSON,
    error               VARCHAR,
    seconds             DOUBLE,
    finished_at         TIMESTAMP NOT NULL
);
