-- For each target item, its K nearest items from OTHER recipes of the SAME split (from the
-- neighbour relation gen_knn), with the EXACT cosine distance recomputed from the vectors, and
-- m_d / s_d (mean and population standard deviation of those K distances) and d_k (the K-th).
-- Lists are aggregated in rank order, so the floating-point sums are deterministic.
-- Parameters: $k.
WITH targets AS (
    SELECT DISTINCT item_id FROM gen_targets
),
knn AS (
    SELECT n.item_id, n.rank, n.cand_id
    FROM gen_knn n
    JOIN targets t USING (item_id)
    WHERE n.rank <= $k
),
with_distance AS (
    SELECT k.item_id, k.rank, k.cand_id, c.recipe_id AS cand_recipe_id,
           array_cosine_distance(a.vec, c.vec) AS distance
    FROM knn k
    JOIN gen_items a ON a.item_id = k.item_id
    JOIN gen_items c ON c.item_id = k.cand_id
    WHERE c.split = a.split AND c.recipe_id <> a.recipe_id
),
stats AS (
    SELECT item_id,
           list_avg(list(distance ORDER BY rank)) AS m_d,
           list_aggregate(list(distance ORDER BY rank), 'stddev_pop') AS s_d,
           max(distance) AS d_k,
           count(*) AS n_knn
    FROM with_distance
    GROUP BY item_id
),
final AS (
    SELECT w.item_id, w.rank, w.cand_id, w.cand_recipe_id, w.distance, s.m_d, s.s_d, s.d_k, s.n_knn
    FROM with_distance w
    JOIN stats s USING (item_id)
)
SELECT * FROM final;
