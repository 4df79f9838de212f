-- Per split, the accepted recipes, their authors, and the recipes with another accepted recipe of their
-- author in the same split (the pool of the author coherence settings; `mrqa splits`)
WITH r AS (
    SELECT split, lower(trim(regexp_replace(author, '\s+', ' ', 'g'))) AS author
    FROM recipes WHERE status = 'ok'
), a AS (
    SELECT split, author, count(*) AS n FROM r GROUP BY ALL
)
SELECT split, sum(n)::BIGINT AS recipes, count(author) FILTER (WHERE author <> '') AS authors,
       coalesce(sum(n) FILTER (WHERE n > 1 AND author <> ''), 0)::BIGINT AS with_mate
FROM a
GROUP BY split
ORDER BY CASE split WHEN 'train' THEN 0 WHEN 'val' THEN 1 WHEN 'test' THEN 2 ELSE 3 END, split;
