-- Analyst view: questions with their dataset's knob settings.
CREATE OR REPLACE VIEW v_questions AS
WITH final AS (
    SELECT d.dataset_id, d.task, d.knob1, d.knob2, d.knob3, d.preset, d.seed, d.encoder_id,
           q.qid, q.recipe_id, q.split, q.question, q.choice_list, q.answer,
           q.question_step_ids, q.provenance
    FROM questions q
    JOIN datasets d USING (dataset_id)
)
SELECT * FROM final;

-- Comments live here, not in a later migration: CREATE OR REPLACE VIEW drops a view's comments.
COMMENT ON VIEW v_questions IS 'Analyst view: questions with their dataset''s task, knob settings, seed and encoder.';
COMMENT ON COLUMN v_questions.dataset_id IS 'The dataset (datasets.dataset_id).';
COMMENT ON COLUMN v_questions.task IS 'visual_cloze | visual_coherence | visual_ordering | textual_cloze.';
COMMENT ON COLUMN v_questions.knob1 IS 'Knob 1: 0 | 1; NULL for presets.';
COMMENT ON COLUMN v_questions.knob2 IS 'Knob 2: 0 | 1; NULL for presets.';
COMMENT ON COLUMN v_questions.knob3 IS 'Knob 3: 0 | 1; NULL for presets (its mode: datasets.k3_mode; the setting name: datasets.setting).';
COMMENT ON COLUMN v_questions.preset IS 'recipeqa for the RecipeQA-style preset, else NULL.';
COMMENT ON COLUMN v_questions.seed IS 'The generation seed.';
COMMENT ON COLUMN v_questions.encoder_id IS 'The feature space of the distances.';
COMMENT ON COLUMN v_questions.qid IS 'Question id within the dataset.';
COMMENT ON COLUMN v_questions.recipe_id IS 'The recipe the question is about.';
COMMENT ON COLUMN v_questions.split IS 'The recipe''s split.';
COMMENT ON COLUMN v_questions.question IS 'What the question shows (image ids with @placeholder, titles, or the ordering instruction).';
COMMENT ON COLUMN v_questions.choice_list IS 'The 4 choices.';
COMMENT ON COLUMN v_questions.answer IS '0-based index of the correct choice.';
COMMENT ON COLUMN v_questions.question_step_ids IS 'step_idx of the steps the question shows.';
COMMENT ON COLUMN v_questions.provenance IS 'JSON: how each distractor was chosen.';
