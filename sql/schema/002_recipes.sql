-- One row per recipe. recipe_id is the page slug (RecipeQA uses the same slug).
-- status: ok | rejected | partial ; status_reason says why when not ok.
-- split: train | val | test (RecipeQA's split for imported recipes, stable hash otherwise).
CREATE TABLE IF NOT EXISTS recipes (
    recipe_id       VARCHAR PRIMARY KEY,
    source          VARCHAR NOT NULL,          -- instructables | recipeqa | sample
    url             VARCHAR,
    title           VARCHAR,
    category        VARCHAR,
    channel         VARCHAR,
    author          VARCHAR,
    license         VARCHAR,
    split           VARCHAR,
    fetched_at      TIMESTAMP,
    content_sha256  VARCHAR,
    status          VARCHAR NOT NULL DEFAULT 'ok',
    status_reason   VARCHAR
);
