-- Knobs 2 and 3 for visual coherence, set-based: one foreign image per question.
-- Inputs: gen_coherence(qid, qkey, c1, c2, c3 (the coherent item ids), c1v..c3v (their vectors), qsum (sum of their unit
--   vectors), min_pair (smallest pairwise distance among them), cs1..cs3 (c_i . (c_j + c_k)),
--   ss1..ss3 (|c_j + c_k|^2), mode ('none' | 'paper' | 'rank'), target_rank); gen_knn_stats; gen_items.
-- Knob 2: candidates from the union of the three coherent images' K nearest neighbours, m_d and
--   s_d over that union; a candidate's distance is its smallest distance to a coherent image (the
--   anchor, kept for provenance); ball (lo, hi) as for cloze.
-- Knob 3 'paper': the foreign image is closer to the question mean than min_pair.
-- Knob 3 'rank' (balanced): foreign_rank = how many coherent images look MORE out of place than
--   the foreign one (leave-one-out cosine distance to the mean of the other three) equals target_rank.
-- Output: one row per question that has ball candidates: the chosen candidate (is_eligible says
--   whether it meets knob 3) and the counts.
WITH questions AS (
    SELECT * FROM gen_coherence
),
question_meta AS (
    SELECT qid, qkey, mode, target_rank, min_pair FROM gen_coherence
),
anchors AS (
    SELECT qid, unnest([c1, c2, c3]) AS anchor_id FROM gen_coherence
),
union_rows AS (
    SELECT a.qid, a.anchor_id, k.rank, k.cand_id, k.cand_recipe_id, k.distance
    FROM anchors a
    JOIN gen_knn_stats k ON k.item_id = a.anchor_id
),
union_stats AS (
    SELECT qid,
           list_avg(list(distance ORDER BY anchor_id, rank)) AS m_d,
           list_aggregate(list(distance ORDER BY anchor_id, rank), 'stddev_pop') AS s_d
    FROM union_rows
    GROUP BY qid
),
per_candidate AS (
    SELECT qid, cand_id, any_value(cand_recipe_id) AS cand_recipe_id,
           min(struct_pack(d := distance, a := anchor_id)) AS nearest
    FROM union_rows
    GROUP BY qid, cand_id
),
ball AS (
    SELECT p.qid, p.cand_id, p.cand_recipe_id, p.nearest.d AS distance, p.nearest.a AS anchor_id,
           s.m_d, s.s_d,
           CASE WHEN $lo_sd IS NULL THEN 0.0 ELSE s.m_d + $lo_sd * s.s_d END AS ball_lo,
           s.m_d + $hi_sd * s.s_d AS ball_hi
    FROM per_candidate p
    JOIN union_stats s USING (qid)
),
in_ball AS (
    SELECT b.*, q.qkey, q.mode, q.target_rank, q.min_pair, hash(q.qkey, b.cand_id) AS pick_key,
           count(*) OVER (PARTITION BY b.qid) AS n_cands
    FROM ball b
    JOIN question_meta q USING (qid)
    WHERE b.distance > b.ball_lo AND b.distance < b.ball_hi
),
to_score AS (
    -- without a knob-3 rule only the first pick is needed: score just that one
    SELECT * FROM in_ball
    QUALIFY mode <> 'none' OR row_number() OVER (PARTITION BY qid ORDER BY pick_key, cand_id) = 1
),
dots AS (
    SELECT b.*,
           array_cosine_distance(f.vec, q.qsum) AS dist_q,
           array_inner_product(f.vec, q.c1v) AS f1,
           array_inner_product(f.vec, q.c2v) AS f2,
           array_inner_product(f.vec, q.c3v) AS f3,
           q.cs1, q.cs2, q.cs3, q.ss1, q.ss2, q.ss3
    FROM to_score b
    JOIN questions q USING (qid)
    JOIN gen_items f ON f.item_id = b.cand_id
),
scored AS (
    SELECT *,
           CAST(1 - (cs1 + f1) / sqrt(ss1 + 2 * (f2 + f3) + 1) > dist_q AS INTEGER)
         + CAST(1 - (cs2 + f2) / sqrt(ss2 + 2 * (f1 + f3) + 1) > dist_q AS INTEGER)
         + CAST(1 - (cs3 + f3) / sqrt(ss3 + 2 * (f1 + f2) + 1) > dist_q AS INTEGER) AS foreign_rank
    FROM dots
),
eligible AS (
    SELECT *,
           CASE mode WHEN 'paper' THEN dist_q < min_pair
                     WHEN 'rank' THEN foreign_rank = target_rank
                     ELSE true END AS is_eligible
    FROM scored
),
final AS (
    SELECT qid, cand_id, cand_recipe_id, anchor_id, distance, m_d, s_d, ball_lo, ball_hi, dist_q,
           min_pair, foreign_rank, is_eligible, pick_key, n_cands,
           count(*) FILTER (WHERE is_eligible) OVER (PARTITION BY qid) AS n_eligible
    FROM eligible
    QUALIFY row_number() OVER (PARTITION BY qid ORDER BY is_eligible DESC, pick_key, cand_id) = 1
)
SELECT * FROM final ORDER BY qid;
