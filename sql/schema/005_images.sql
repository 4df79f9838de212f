-- image_id follows RecipeQA naming <recipe_id>_<step_idx>_<ord>.jpg.
-- status: ok | missing | broken | pending ; path is relative to MRQA_HOME when local.
CREATE TABLE IF NOT EXISTS images (
    image_id       VARCHAR PRIMARY KEY,
    recipe_id      VARCHAR NOT NULL,
    step_idx       INTEGER NOT NULL,
    ord            INTEGER NOT NULL,
    url            VARCHAR,
    path           VARCHAR,
    sha256         VARCHAR,
    width          INTEGER,
    height         INTEGER,
    status         VARCHAR NOT NULL DEFAULT 'pending',
    status_reason  VARCHAR
);
