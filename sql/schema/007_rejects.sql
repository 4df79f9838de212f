-- Every dropped or quarantined item, with a reason. Nothing is dropped silently.
-- (stage, key, reason) is unique so re-running a stage does not duplicate rejects.
CREATE TABLE IF NOT EXISTS rejects (
    stage   VARCHAR NOT NULL,
    key     VARCHAR NOT NULL,
    reason  VARCHAR NOT NULL,
    detail  VARCHAR,
    "at"    TIMESTAMP NOT NULL,  -- quoted: AT is a keyword in DuckDB 2.0
    PRIMARY KEY (stage, key, reason)
);
