-- Content hash of a dataset's questions: sha256 over their canonical JSON, in qid order.
-- Parameters: $dataset_id.
WITH dataset_questions AS (
    SELECT qid, task, recipe_id, split, question, choice_list, answer, question_step_ids, provenance
    FROM questions
    WHERE dataset_id = $dataset_id
),
final AS (
    SELECT sha256(coalesce(string_agg(to_json(struct_pack(qid, task, recipe_id, split, question,
                       choice_list, answer, question_step_ids, provenance))::VARCHAR, chr(10)
                   ORDER BY qid), '')) AS content_sha256
    FROM dataset_questions
)
SELECT content_sha256 FROM final;
