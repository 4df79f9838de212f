-- Crawl log and cache index: one row per URL fetched (pages and images).
-- body_sha256 names the content-addressed file under MRQA_HOME/raw/.
CREATE TABLE IF NOT EXISTS pages (
    url            VARCHAR PRIMARY KEY,
    kind           VARCHAR NOT NULL DEFAULT 'page',   -- page | listing | sitemap | image | robots
    fetched_at     TIMESTAMP,
    http_status    INTEGER,
    etag           VARCHAR,
    last_modified  VARCHAR,
    body_sha256    VARCHAR,
    n_bytes        BIGINT,
    error          VARCHAR
);
