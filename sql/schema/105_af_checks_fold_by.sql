-- How the af-check models were folded, and the figure split by split. With folds of recipes over every
-- split, a held-out question's images have been in training (a distractor comes from another recipe of
-- the same split); `split` holds the val and the test split out whole, so those questions are scored
-- by models that never saw their images. Rows recorded before this file were folded by recipe.
ALTER TABLE af_checks ADD COLUMN IF NOT EXISTS fold_by VARCHAR DEFAULT 'recipe';
ALTER TABLE af_checks ADD COLUMN IF NOT EXISTS by_split JSON;

COMMENT ON COLUMN af_checks.fold_by IS 'How the check models were folded: recipe (folds of recipes over every split) or split (the val and the test split each held out whole, the train split in folds of recipes).';
COMMENT ON COLUMN af_checks.by_split IS 'JSON object: split -> {n, accuracy, ci}: the same figure on each split''s questions; null for rows recorded before 105.';
