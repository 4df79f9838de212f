-- Content hash of each dataset in a Parquet export (temp view export_read: the export's questions files,
-- read with hive_partitioning = false), the same sha256 as questions_content_hash computes in the
-- warehouse: the columns cast back to the warehouse's types (task and split leave their dictionary,
-- provenance its text). An export whose hash of a dataset differs from datasets.content_sha256 holds an
-- older generation of it.
WITH exported AS (
    SELECT dataset_id, qid, CAST(task AS VARCHAR) AS task, recipe_id, CAST(split AS VARCHAR) AS split, question,
           choice_list, answer, question_step_ids, CAST(provenance AS JSON) AS provenance
    FROM export_read
),
row_hashes AS (
    SELECT dataset_id, qid,
           sha256(to_json(struct_pack(qid, task, recipe_id, split, question, choice_list, answer,
                                      question_step_ids, provenance))::VARCHAR) AS h
    FROM exported
),
final AS (
    SELECT dataset_id, sha256(coalesce(string_agg(h, chr(10) ORDER BY qid), '')) AS content_sha256
    FROM row_hashes
    GROUP BY dataset_id
)
SELECT dataset_id, content_sha256 FROM final ORDER BY dataset_id;
