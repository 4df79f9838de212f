-- Questions (or recipes) a dataset generation skipped, counted by reason: constraints are never
-- relaxed silently. Replaced with the dataset on re-generation.
-- reason examples: recipe_too_few_steps, too_few_ball_candidates, too_few_closer_candidates,
-- too_few_farther_candidates, no_candidate_meets_knob3, no_far_random_candidate.
CREATE TABLE IF NOT EXISTS generation_skips (
    dataset_id  VARCHAR NOT NULL,
    reason      VARCHAR NOT NULL,
    n_skipped   INTEGER NOT NULL,
    PRIMARY KEY (dataset_id, reason)
);
