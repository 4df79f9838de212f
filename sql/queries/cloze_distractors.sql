-- Knobs 2 and 3 for cloze questions (visual and textual), set-based.
-- Inputs: gen_questions(qid, qkey, answer_id, qvec, d_answer_q, n_closer, exact) -- one row per
--   question skeleton; n_closer = distractors that must be closer to the question mean than the
--   answer (knob 3), exact = the other distractors must NOT be closer (balanced mode);
--   gen_knn_stats (knn_stats.sql); gen_items.
-- Knob 2: candidates are the answer's K nearest items with distance inside the ball
--   (lo, hi) = (m_d + $lo_sd * s_d  or 0 when $lo_sd is NULL,  m_d + $hi_sd * s_d), open bounds.
-- One candidate per recipe and per (case-folded) text, never the answer's text; picks are by a
-- seeded hash key, so they are deterministic and independent of row order.
-- Output: the chosen distractors (up to 3 per question) and per-question candidate counts.
WITH questions AS (
    SELECT q.*, lower(trim(a.item_text)) AS answer_text
    FROM gen_questions q
    JOIN gen_items a ON a.item_id = q.answer_id
),
ball AS (
    SELECT q.qid, q.qkey, q.n_closer, q.exact, q.d_answer_q, q.qvec, q.answer_text,
           k.cand_id, k.cand_recipe_id, k.distance, k.m_d, k.s_d,
           CASE WHEN $lo_sd IS NULL THEN 0.0 ELSE k.m_d + $lo_sd * k.s_d END AS ball_lo,
           k.m_d + $hi_sd * k.s_d AS ball_hi
    FROM questions q
    JOIN gen_knn_stats k ON k.item_id = q.answer_id
),
in_ball AS (
    SELECT * FROM ball WHERE distance > ball_lo AND distance < ball_hi
),
scored AS (
    SELECT b.* EXCLUDE (qvec, answer_text),
           lower(trim(c.item_text)) AS cand_text,
           array_cosine_distance(c.vec, b.qvec) AS dist_q,
           array_cosine_distance(c.vec, b.qvec) < b.d_answer_q AS is_closer,
           hash(b.qkey, b.cand_id) AS pick_key
    FROM in_ball b
    JOIN gen_items c ON c.item_id = b.cand_id
    WHERE c.item_text IS NULL OR lower(trim(c.item_text)) <> b.answer_text
),
one_per_recipe AS (
    SELECT * FROM scored
    QUALIFY row_number() OVER (PARTITION BY qid, cand_recipe_id ORDER BY pick_key, cand_id) = 1
),
one_per_text AS (
    SELECT * FROM one_per_recipe
    QUALIFY cand_text IS NULL
         OR row_number() OVER (PARTITION BY qid, cand_text ORDER BY pick_key, cand_id) = 1
),
ranked AS (
    SELECT *,
           row_number() OVER (PARTITION BY qid, is_closer ORDER BY pick_key, cand_id) AS rank_in_group,
           count(*) OVER (PARTITION BY qid) AS n_cands,
           count(*) FILTER (WHERE is_closer) OVER (PARTITION BY qid) AS n_closer_cands
    FROM one_per_text
),
forced AS (
    SELECT * FROM ranked WHERE is_closer AND rank_in_group <= n_closer
),
rest AS (
    -- the first 3 of the rest by key lie within the first 6 rows of each group (n_closer <= 3)
    SELECT *, row_number() OVER (PARTITION BY qid ORDER BY pick_key, cand_id) AS rank_in_rest
    FROM ranked
    WHERE rank_in_group <= 6
      AND NOT (is_closer AND rank_in_group <= n_closer)
      AND NOT (exact AND is_closer)
),
final AS (
    SELECT qid, cand_id, cand_recipe_id, distance, m_d, s_d, ball_lo, ball_hi, dist_q, is_closer,
           pick_key, n_cands, n_closer_cands
    FROM forced
    UNION ALL
    SELECT qid, cand_id, cand_recipe_id, distance, m_d, s_d, ball_lo, ball_hi, dist_q, is_closer,
           pick_key, n_cands, n_closer_cands
    FROM rest
    WHERE rank_in_rest <= 3 - n_closer
)
SELECT * FROM final ORDER BY qid, pick_key, cand_id;
