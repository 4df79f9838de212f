-- Bookkeeping for the migration runner (etl/warehouse.py). Applied first.
CREATE TABLE IF NOT EXISTS schema_version (
    version     INTEGER PRIMARY KEY,
    file_name   VARCHAR NOT NULL,
    sha256      VARCHAR NOT NULL,
    applied_at  TIMESTAMP NOT NULL
);
