-- The background cue (features/diagnostics/background_cue.py, written by `mrqa report`): how much more alike
-- two photos are when they share a recipe or an author than when they do not, in one feature space: the
-- look probe's pixel statistics ("look") or an encoder's image vectors ("encoder"). One row per space and
-- encoder, replaced by each report.
CREATE TABLE IF NOT EXISTS background_cue (
    space VARCHAR NOT NULL,
    encoder_id VARCHAR,
    n_photos INTEGER NOT NULL,
    n_recipes INTEGER NOT NULL,
    n_authors INTEGER NOT NULL,
    photos_without_author INTEGER NOT NULL,
    cos_same_recipe DOUBLE,
    cos_same_author DOUBLE,
    cos_other_author DOUBLE,
    nn_same_recipe DOUBLE,
    nn_same_author DOUBLE,
    nn_other_author DOUBLE,
    chance_same_recipe DOUBLE,
    chance_same_author DOUBLE,
    chance_other_author DOUBLE,
    computed_at TIMESTAMP NOT NULL
);

COMMENT ON TABLE background_cue IS 'The background cue per feature space (mrqa report): mean cosine of photo pairs of one recipe, of one author''s other recipes and of other authors, and the kind of each photo''s nearest neighbour against chance.';
COMMENT ON COLUMN background_cue.space IS 'look (the look probe''s pixel statistics on their principal axes) | encoder (an encoder''s image vectors).';
COMMENT ON COLUMN background_cue.encoder_id IS 'The encoder of an encoder space (encoders.encoder_id); null for look.';
COMMENT ON COLUMN background_cue.n_photos IS 'Photos measured (readable photos with a row in the space).';
COMMENT ON COLUMN background_cue.n_recipes IS 'Their recipes.';
COMMENT ON COLUMN background_cue.n_authors IS 'Their distinct authors (recipes.author).';
COMMENT ON COLUMN background_cue.photos_without_author IS 'Photos of recipes without an author: counted in the same-recipe figures only.';
COMMENT ON COLUMN background_cue.cos_same_recipe IS 'Mean cosine of every pair of photos of one recipe from different steps.';
COMMENT ON COLUMN background_cue.cos_same_author IS 'Mean cosine of every pair of photos of two different recipes by one author; null without such pairs.';
COMMENT ON COLUMN background_cue.cos_other_author IS 'Mean cosine of every pair of photos of recipes by two different authors; null without such pairs.';
COMMENT ON COLUMN background_cue.nn_same_recipe IS 'Share of the photos (with an author) whose nearest other photo, not of its step, is of the same recipe.';
COMMENT ON COLUMN background_cue.nn_same_author IS 'Share whose nearest other photo is of another recipe by the same author.';
COMMENT ON COLUMN background_cue.nn_other_author IS 'Share whose nearest other photo is of another author.';
COMMENT ON COLUMN background_cue.chance_same_recipe IS 'The same-recipe share if the nearest photo were drawn at random from the same candidates.';
COMMENT ON COLUMN background_cue.chance_same_author IS 'The same-author share at random.';
COMMENT ON COLUMN background_cue.chance_other_author IS 'The other-author share at random.';
COMMENT ON COLUMN background_cue.computed_at IS 'When it was measured, UTC.';
