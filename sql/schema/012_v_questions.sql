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
