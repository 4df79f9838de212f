-- The words encoder (features/embed/words_encoder.py): a third kind of encoder, text only.
COMMENT ON COLUMN encoders.kind IS 'trained (the small open_clip model trained on the train split) | pretrained (open_clip weights) | words (the principal axes of the train split''s step texts'' TF-IDF; text only, no image tower).';
