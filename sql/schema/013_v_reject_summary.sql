-- Analyst view: how many items each stage rejected, by reason.
CREATE OR REPLACE VIEW v_reject_summary AS
WITH final AS (
    SELECT stage, reason, count(*) AS n_rejects, min("at") AS first_at, max("at") AS last_at
    FROM rejects
    GROUP BY stage, reason
)
SELECT * FROM final ORDER BY stage, n_rejects DESC;

-- Comments live here, not in a later migration: CREATE OR REPLACE VIEW drops a view's comments.
COMMENT ON VIEW v_reject_summary IS 'Analyst view: how many items each stage rejected, by reason.';
COMMENT ON COLUMN v_reject_summary.stage IS 'The rejecting stage.';
COMMENT ON COLUMN v_reject_summary.reason IS 'The reason.';
COMMENT ON COLUMN v_reject_summary.n_rejects IS 'Rejected items.';
COMMENT ON COLUMN v_reject_summary.first_at IS 'Earliest reject, UTC.';
COMMENT ON COLUMN v_reject_summary.last_at IS 'Latest reject, UTC.';
