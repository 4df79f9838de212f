"""Embed stage: encoders, encoder training, image decoding, embedding into the store, Dask fan-out."""
