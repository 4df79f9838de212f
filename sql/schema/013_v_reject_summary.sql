-- Analyst view: how many items each stage rejected, by reason.
CREATE OR REPLACE VIEW v_reject_summary AS
WITH final AS (
    SELECT stage, reason, count(*) AS n_rejects, min("at") AS first_at, max("at") AS last_at
    FROM rejects
    GROUP BY stage, reason
)
SELECT * FROM final ORDER BY stage, n_rejects DESC;
