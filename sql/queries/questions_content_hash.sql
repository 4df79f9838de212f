-- Content hash of a dataset's questions: sha256 over the per-question sha256 of their canonical
-- JSON, in qid order (the per-row hashes run in parallel; the result is order independent of the
-- table's physical layout). Parameters: $dataset_id.
WITH dataset_questions AS (
    SELECT qid, task, recipe_id, split, question, choice_list, answer, question_step_ids, provenance
    FROM questions
    WHERE dataset_id = $dataset_id
),
row_hashes AS (
    SELECT qid, sha256(to_json(struct_pack(qid, task, recipe_id, split, question, choice_list, answer,
                                           question_step_ids, provenance))::VARCHAR) AS h
    FROM dataset_questions
),
final AS (
    SELECT sha256(coalesce(string_agg(h, chr(10) ORDER BY qid), '')) AS content_sha256
    FROM row_hashes
)
SELECT content_sha256 FROM final;
