-- The neighbour relation of the question items as integer rows of gen_items (idx): for each target
-- item its K nearest items from OTHER recipes of the SAME split, in rank order. Exact distances,
-- m_d, s_d and d_k are computed from the vectors in features/datasets/distractors.py (DenseKnn).
-- Inputs: gen_knn(item_id, rank, cand_id), gen_targets(item_id), gen_items. Parameters: $k.
WITH targets AS (
    SELECT DISTINCT item_id FROM gen_targets
),
knn AS (
    SELECT n.item_id, n.rank, n.cand_id
    FROM gen_knn n
    JOIN targets t USING (item_id)
    WHERE n.rank <= $k
),
final AS (
    SELECT a.idx AS target_idx, k.rank, c.idx AS cand_idx
    FROM knn k
    JOIN gen_items a ON a.item_id = k.item_id
    JOIN gen_items c ON c.item_id = k.cand_id
    WHERE c.split = a.split AND c.recipe_id <> a.recipe_id
)
SELECT target_idx, cand_idx FROM final ORDER BY target_idx, rank;
