"""Vector layer: the LanceDB feature store, exact and IVF kNN, and the `neighbours` table."""
