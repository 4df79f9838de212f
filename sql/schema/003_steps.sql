-- Step 0 is the intro, as in RecipeQA. *_raw keep the source text; title/body are the cleaned text
-- (equal to raw until `mrqa clean` runs; cleaning is re-runnable from raw).
CREATE TABLE IF NOT EXISTS steps (
    recipe_id   VARCHAR NOT NULL,
    step_idx    INTEGER NOT NULL,
    title_raw   VARCHAR,
    body_raw    VARCHAR,
    title       VARCHAR,
    body        VARCHAR,
    n_videos    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (recipe_id, step_idx)
);
