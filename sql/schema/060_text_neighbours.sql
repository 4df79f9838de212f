-- For each step title (per encoder), its K nearest titles from OTHER recipes of the SAME split in the
-- text feature space (textual cloze distractors). item ids follow step_text_vectors:
-- "<recipe_id>_<step_idx>_title". distance = cosine distance; rank 1 = nearest.
-- Built by features/datasets/generate.py (exact search) once per encoder; every textual cloze dataset reads it.
CREATE TABLE IF NOT EXISTS text_neighbours (
    encoder_id           VARCHAR NOT NULL,
    field                VARCHAR NOT NULL,
    item_id              VARCHAR NOT NULL,
    rank                 INTEGER NOT NULL,
    neighbour_id         VARCHAR NOT NULL,
    neighbour_recipe_id  VARCHAR NOT NULL,
    distance             DOUBLE NOT NULL,
    PRIMARY KEY (encoder_id, field, item_id, rank)
);
