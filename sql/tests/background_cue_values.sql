-- the background cue: documented spaces, an encoder only for an encoder space, shares within [0, 1], the
-- three nearest-photo shares (and the three at random) summing to one where the author figures exist
SELECT space, encoder_id FROM background_cue
WHERE space NOT IN ('look', 'encoder')
   OR (space = 'look') <> (encoder_id IS NULL)
   OR photos_without_author > n_photos
   OR least(nn_same_recipe, nn_same_author, nn_other_author,
            chance_same_recipe, chance_same_author, chance_other_author) < 0
   OR greatest(nn_same_recipe, nn_same_author, nn_other_author,
               chance_same_recipe, chance_same_author, chance_other_author) > 1
   OR abs(nn_same_recipe + nn_same_author + nn_other_author - 1) > 0.001
   OR abs(chance_same_recipe + chance_same_author + chance_other_author - 1) > 0.001;
