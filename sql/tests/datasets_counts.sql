-- a dataset's registered question count matches its questions
SELECT d.dataset_id FROM datasets d
LEFT JOIN (SELECT dataset_id, count(*) AS n FROM questions GROUP BY dataset_id) q USING (dataset_id)
WHERE d.n_questions <> coalesce(q.n, 0);
