-- Settings of the warehouse itself, one row per key. `split_by` (etl/splits.py): whether a recipe's split is
-- drawn from its id (`recipe`, the default when the row is absent) or from its author (`author`).
CREATE TABLE IF NOT EXISTS settings (
    key     VARCHAR PRIMARY KEY,
    value   VARCHAR NOT NULL,
    set_at  TIMESTAMP NOT NULL
);

COMMENT ON TABLE settings IS 'Settings of the warehouse, one row per key (split_by: recipe or author, etl/splits.py).';
COMMENT ON COLUMN settings.key IS 'The setting''s name.';
COMMENT ON COLUMN settings.value IS 'Its value.';
COMMENT ON COLUMN settings.set_at IS 'When it was last set, UTC.';
