"""Feature layer: embeddings, the vector store, dataset generation and bias diagnostics.

- `features.embed`: encoders (open_clip), encoder training, image decoding, embedding, Dask fan-out
- `features.vectors`: the LanceDB store, exact and IVF kNN, the `neighbours` table
- `features.datasets`: knobs, question families, distractors, generation, synthetic world, export
- `features.diagnostics`: Hasty Student, the probes, bias metrics and the HTML report
"""
