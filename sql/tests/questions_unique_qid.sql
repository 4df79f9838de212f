-- (dataset_id, qid) identifies a question (the table has no key constraint: see 091)
SELECT dataset_id, qid FROM questions GROUP BY dataset_id, qid HAVING count(*) > 1;
