-- Photos drawn again by the sample kitchen's renderer (`mrqa redraw`, features/datasets/redraw.py): the content
-- of a source photo (its step's ground truth) drawn in the kitchen of another recipe, the one a question is
-- about. Kept apart from `images` on purpose: no stage takes them for a recipe's own photos (generation,
-- encoder training, the neighbour table and re-crawls read `images` only); the datasets that show them name
-- them in their questions, and their vectors are in the feature store's `redrawn_image_vectors`.
CREATE TABLE IF NOT EXISTS redrawn_images (
    image_id           VARCHAR PRIMARY KEY,
    source_image_id    VARCHAR NOT NULL,
    recipe_id          VARCHAR NOT NULL,
    step_idx           INTEGER NOT NULL,
    kitchen_recipe_id  VARCHAR NOT NULL,
    jitter             JSON NOT NULL,
    seed               BIGINT NOT NULL,
    path               VARCHAR NOT NULL,
    sha256             VARCHAR NOT NULL,
    created_at         TIMESTAMP NOT NULL
);

COMMENT ON TABLE redrawn_images IS 'Photos drawn again in another recipe''s kitchen by the sample kitchen''s renderer (mrqa redraw); never a recipe''s own photos.';
COMMENT ON COLUMN redrawn_images.image_id IS '<recipe_id>_<step_idx>_<ord>.jpg of the source photo''s step with ord >= 1,000,000,000 (redraw.REDRAWN_ORD), a function of the seed, question and source photo.';
COMMENT ON COLUMN redrawn_images.source_image_id IS 'The photo (images.image_id) whose content it shows.';
COMMENT ON COLUMN redrawn_images.recipe_id IS 'The source photo''s recipe: the content is a step of it.';
COMMENT ON COLUMN redrawn_images.step_idx IS 'The source photo''s step.';
COMMENT ON COLUMN redrawn_images.kitchen_recipe_id IS 'The recipe whose kitchen (counter, light, framing) it is drawn in: the question''s.';
COMMENT ON COLUMN redrawn_images.jitter IS 'Its own small shift, scale and brightness ({dx, dy, scale, brightness}), drawn as the sample kitchen draws a photo''s.';
COMMENT ON COLUMN redrawn_images.seed IS 'The redraw''s seed (the dataset''s).';
COMMENT ON COLUMN redrawn_images.path IS 'The JPEG file, relative to MRQA_HOME (images/redrawn/<kitchen recipe>/<image_id>).';
COMMENT ON COLUMN redrawn_images.sha256 IS 'sha256 of the file''s bytes.';
COMMENT ON COLUMN redrawn_images.created_at IS 'When it was drawn, UTC.';
