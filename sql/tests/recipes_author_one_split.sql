-- with the warehouse's split_by at 'author' (etl/splits.py), every recipe of an author is in one split (the
-- sources that keep their own splits, RecipeQA imports, aside); an author's name is compared as split_key does
SELECT lower(trim(regexp_replace(author, '\s+', ' ', 'g'))) AS author, count(DISTINCT split) AS n_splits
FROM recipes
WHERE source <> 'recipeqa' AND trim(regexp_replace(coalesce(author, ''), '\s+', ' ', 'g')) <> ''
  AND (SELECT value FROM settings WHERE key = 'split_by') = 'author'
GROUP BY 1
HAVING count(DISTINCT split) > 1;
