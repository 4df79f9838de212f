-- One row per image/text encoder (feature space). Every vector in LanceDB and every neighbour row
-- carries encoder_id = <model_name>-<weights sha256[:12]>-<preprocess sha256[:8]>.
-- kind: trained (our small open_clip model trained on the train split) | pretrained (open_clip weights).
-- checkpoint_path is relative to MRQA_HOME when inside it.
CREATE TABLE IF NOT EXISTS encoders (
    encoder_id         VARCHAR PRIMARY KEY,
    kind               VARCHAR NOT NULL,
    model_name         VARCHAR NOT NULL,
    pretrained         VARCHAR,
    weights_sha256     VARCHAR NOT NULL,
    preprocess_sha256  VARCHAR NOT NULL,
    dim                INTEGER NOT NULL,
    checkpoint_path    VARCHAR,
    train_split        VARCHAR,
    config             JSON,
    metrics            JSON,
    created_at         TIMESTAMP NOT NULL
);
