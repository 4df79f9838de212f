-- For each image (per encoder) its K nearest images from OTHER recipes of the SAME split.
-- distance = cosine distance (1 - cos) of L2-normalised vectors; rank 1 = nearest.
-- Built by features/vectors/neighbours.py (batched ANN queries on LanceDB, or exact search); the knob SQL reads it.
CREATE TABLE IF NOT EXISTS neighbours (
    encoder_id           VARCHAR NOT NULL,
    image_id             VARCHAR NOT NULL,
    rank                 INTEGER NOT NULL,
    neighbour_id         VARCHAR NOT NULL,
    neighbour_recipe_id  VARCHAR NOT NULL,
    distance             DOUBLE NOT NULL,
    PRIMARY KEY (encoder_id, image_id, rank)
);
