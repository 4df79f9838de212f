-- Vocabulary quality of the tokenized corpus, before and after out-of-vocabulary repair
-- (written by `mrqa clean` and `mrqa vocab-report`; one row per scope and phase, latest wins).
-- Word tokens = tokens with a letter, lower-cased; dictionary = wordfreq's English 'large' list.
CREATE TABLE IF NOT EXISTS vocab_stats (
    scope                 VARCHAR NOT NULL,   -- clean | report
    phase                 VARCHAR NOT NULL,   -- before_repair | after_repair
    dictionary            VARCHAR NOT NULL,
    n_word_types          INTEGER NOT NULL,
    n_word_tokens         BIGINT NOT NULL,
    types_in_dict_share   DOUBLE,
    tokens_in_dict_share  DOUBLE,
    top_oov               JSON,
    computed_at           TIMESTAMP NOT NULL,
    PRIMARY KEY (scope, phase)
);
