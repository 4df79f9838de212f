-- What every table and column means, as DuckDB comments: `SELECT comment FROM duckdb_tables()` and
-- `SELECT table_name, column_name, comment FROM duckdb_columns()` show them. The same text, with
-- more context, is in docs/data-model.md. Views carry their comments in their own files (011-013):
-- CREATE OR REPLACE VIEW drops a view's comments, and view files are re-applied when they change.

COMMENT ON TABLE schema_version IS 'Migration runner bookkeeping: one row per applied file of sql/schema/ (etl/warehouse.py).';
COMMENT ON COLUMN schema_version.version IS 'Position of the file in sql/migrations.txt (1 = first).';
COMMENT ON COLUMN schema_version.file_name IS 'Name of the applied file under sql/schema/.';
COMMENT ON COLUMN schema_version.sha256 IS 'Checksum of the file''s SQL without comment lines; a non-view file whose SQL changed is refused.';
COMMENT ON COLUMN schema_version.applied_at IS 'When the file was (last) applied, UTC.';

COMMENT ON TABLE recipes IS 'One row per recipe, from a crawl, the RecipeQA importer or the sample kitchen.';
COMMENT ON COLUMN recipes.recipe_id IS 'Page slug (RecipeQA uses the same slug); the natural key.';
COMMENT ON COLUMN recipes.source IS 'Where the recipe came from: instructables | recipeqa | sample.';
COMMENT ON COLUMN recipes.url IS 'The recipe''s page URL (for RecipeQA imports, the instructables URL of its slug).';
COMMENT ON COLUMN recipes.title IS 'Recipe title as published.';
COMMENT ON COLUMN recipes.category IS 'Site category (e.g. cooking).';
COMMENT ON COLUMN recipes.channel IS 'Site channel within the category (e.g. soups-and-stews).';
COMMENT ON COLUMN recipes.author IS 'Author name shown on the page.';
COMMENT ON COLUMN recipes.license IS 'License named on the page, when any.';
COMMENT ON COLUMN recipes.split IS 'train | val | test: RecipeQA''s split for imports, a stable hash of recipe_id otherwise (etl/splits.py).';
COMMENT ON COLUMN recipes.fetched_at IS 'When the page was last fetched, UTC.';
COMMENT ON COLUMN recipes.content_sha256 IS 'Checksum of the parsed recipe content; a re-scrape with the same value changes nothing.';
COMMENT ON COLUMN recipes.status IS 'ok | rejected | partial (steps or images missing).';
COMMENT ON COLUMN recipes.status_reason IS 'Why the recipe is not ok (a reason also recorded in rejects).';

COMMENT ON TABLE steps IS 'Recipe steps; step 0 is the intro, as in RecipeQA.';
COMMENT ON COLUMN steps.recipe_id IS 'The recipe (recipes.recipe_id).';
COMMENT ON COLUMN steps.step_idx IS 'Position in the recipe: 0 = intro, 1.. = steps.';
COMMENT ON COLUMN steps.title_raw IS 'Step title as fetched (source text, never modified).';
COMMENT ON COLUMN steps.body_raw IS 'Step body as fetched (source text, never modified).';
COMMENT ON COLUMN steps.title IS 'Cleaned title (equal to title_raw until `mrqa clean` runs; re-computable from title_raw).';
COMMENT ON COLUMN steps.body IS 'Cleaned and repaired body text (equal to body_raw until `mrqa clean` runs).';
COMMENT ON COLUMN steps.n_videos IS 'Number of videos embedded in the step (videos are counted, not downloaded).';

COMMENT ON TABLE step_tokens IS 'NLTK word tokens of a step''s cleaned text, one row per sentence (written by `mrqa clean`).';
COMMENT ON COLUMN step_tokens.recipe_id IS 'The recipe (recipes.recipe_id).';
COMMENT ON COLUMN step_tokens.step_idx IS 'The step (steps.step_idx).';
COMMENT ON COLUMN step_tokens.field IS 'Which text was tokenized: title | body.';
COMMENT ON COLUMN step_tokens.sentence_idx IS 'Sentence number within the field, from 0 (every line break is a sentence boundary).';
COMMENT ON COLUMN step_tokens.tokens IS 'Word tokens of the sentence after out-of-vocabulary repair.';

COMMENT ON TABLE images IS 'Step images; image_id follows RecipeQA naming <recipe_id>_<step_idx>_<ord>.jpg.';
COMMENT ON COLUMN images.image_id IS '<recipe_id>_<step_idx>_<ord>.jpg, as in RecipeQA.';
COMMENT ON COLUMN images.recipe_id IS 'The recipe (recipes.recipe_id).';
COMMENT ON COLUMN images.step_idx IS 'The step the image belongs to (steps.step_idx).';
COMMENT ON COLUMN images.ord IS 'Position of the image within its step, from 0.';
COMMENT ON COLUMN images.url IS 'Where the image was (or is to be) downloaded from.';
COMMENT ON COLUMN images.path IS 'Local file, relative to MRQA_HOME when inside it.';
COMMENT ON COLUMN images.sha256 IS 'Checksum of the image bytes (embeddings are redone when it changes).';
COMMENT ON COLUMN images.width IS 'Width in pixels, from decoding the file.';
COMMENT ON COLUMN images.height IS 'Height in pixels, from decoding the file.';
COMMENT ON COLUMN images.status IS 'ok | missing | broken | pending (not downloaded yet).';
COMMENT ON COLUMN images.status_reason IS 'Why the image is missing or broken.';

COMMENT ON TABLE pages IS 'Crawl log and cache index: one row per URL fetched (pages, listings, sitemaps, images, robots.txt).';
COMMENT ON COLUMN pages.url IS 'The fetched URL (after normalisation).';
COMMENT ON COLUMN pages.kind IS 'page | listing | sitemap | image | robots.';
COMMENT ON COLUMN pages.fetched_at IS 'When it was last fetched, UTC.';
COMMENT ON COLUMN pages.http_status IS 'HTTP status of the last fetch (304 = unchanged since the cached copy).';
COMMENT ON COLUMN pages.etag IS 'ETag of the cached copy, sent back as If-None-Match.';
COMMENT ON COLUMN pages.last_modified IS 'Last-Modified of the cached copy, sent back as If-Modified-Since.';
COMMENT ON COLUMN pages.body_sha256 IS 'Names the content-addressed body file under MRQA_HOME/raw/.';
COMMENT ON COLUMN pages.n_bytes IS 'Body size in bytes.';
COMMENT ON COLUMN pages.error IS 'Why the last fetch failed, when it did.';

COMMENT ON TABLE rejects IS 'Every dropped or quarantined item with its reason; (stage, key, reason) is unique, so re-runs do not duplicate.';
COMMENT ON COLUMN rejects.stage IS 'The stage that rejected the item: ingest | images | clean | embed.';
COMMENT ON COLUMN rejects.key IS 'What was rejected: a URL, recipe_id, image_id or record key.';
COMMENT ON COLUMN rejects.reason IS 'Short machine-readable reason (e.g. not_food, broken_image, too_deep).';
COMMENT ON COLUMN rejects.detail IS 'Human-readable detail (at most 2,000 characters).';
COMMENT ON COLUMN rejects."at" IS 'When it was recorded, UTC.';

COMMENT ON TABLE datasets IS 'One row per generated (or imported) benchmark dataset; its questions are in questions.';
COMMENT ON COLUMN datasets.dataset_id IS 'Deterministic id: <task code>-k<k1><k2><k3>-s<seed>-<encoder hash>[-p<params hash>], or <task code>-recipeqa-...; recipeqa-original-<task> for imports.';
COMMENT ON COLUMN datasets.task IS 'visual_cloze | visual_coherence | visual_ordering | textual_cloze.';
COMMENT ON COLUMN datasets.knob1 IS 'Knob 1 (overlap between a recipe''s questions): 0 | 1; NULL for presets.';
COMMENT ON COLUMN datasets.knob2 IS 'Knob 2 (distractor distance from the answer): 0 | 1; NULL for presets.';
COMMENT ON COLUMN datasets.knob3 IS 'Knob 3 (distractor distance from the question): 0 | 1 (coin flip) | 1:all | 1:balanced; NULL for presets.';
COMMENT ON COLUMN datasets.preset IS 'recipeqa for the RecipeQA-style reference preset, NULL for knob datasets.';
COMMENT ON COLUMN datasets.seed IS 'Seed of every random decision of the generation.';
COMMENT ON COLUMN datasets.encoder_id IS 'Feature space the distances were measured in (encoders.encoder_id).';
COMMENT ON COLUMN datasets.params IS 'JSON: every knob parameter (features/datasets/knobs.py KnobParams), skips by reason, answer positions, distance-probe accuracy.';
COMMENT ON COLUMN datasets.created_at IS 'When the dataset was registered, UTC.';
COMMENT ON COLUMN datasets.n_questions IS 'Number of questions (equals its rows in questions).';
COMMENT ON COLUMN datasets.n_recipes IS 'Number of recipes with at least one question.';
COMMENT ON COLUMN datasets.content_sha256 IS 'sha256 over the questions'' canonical JSON in qid order (sql/queries/questions_content_hash.sql).';

COMMENT ON TABLE questions IS 'Questions of every dataset; (dataset_id, qid) is unique (checked by sql/tests/questions_unique_qid.sql).';
COMMENT ON COLUMN questions.dataset_id IS 'The dataset (datasets.dataset_id).';
COMMENT ON COLUMN questions.qid IS 'Question id within the dataset: <recipe_id>-q<n>.';
COMMENT ON COLUMN questions.task IS 'The dataset''s task.';
COMMENT ON COLUMN questions.recipe_id IS 'The recipe the question is about.';
COMMENT ON COLUMN questions.split IS 'The recipe''s split (train | val | test).';
COMMENT ON COLUMN questions.question IS 'What the question shows: image ids (one is @placeholder for visual cloze), step titles (textual cloze) or the ordering instruction.';
COMMENT ON COLUMN questions.choice_list IS 'The 4 choices: image ids, titles, or (visual ordering) JSON lists of 4 image ids.';
COMMENT ON COLUMN questions.answer IS '0-based index of the correct choice in choice_list.';
COMMENT ON COLUMN questions.question_step_ids IS 'step_idx of the recipe steps the question shows, in recipe order.';
COMMENT ON COLUMN questions.provenance IS 'JSON: seed, encoder_id, knobs, k3_mode and the distances and rules that justified each distractor.';

COMMENT ON TABLE runs IS 'Training and evaluation runs of the GM3C trainer (training/train.py).';
COMMENT ON COLUMN runs.run_id IS 'Run id; its files are under MRQA_HOME/models/runs/<run_id>/.';
COMMENT ON COLUMN runs.dataset_id IS 'The dataset trained and tested on (datasets.dataset_id).';
COMMENT ON COLUMN runs.model IS 'Model family (gm3c).';
COMMENT ON COLUMN runs.scorer IS 'Scoring function: transformer (HTRN) | bidaf | impatient | question_only (hasty in older runs).';
COMMENT ON COLUMN runs.text_features IS 'How step text enters the model: tokens | vectors.';
COMMENT ON COLUMN runs.image_encoder IS 'The encoder whose image vectors the model reads (encoders.encoder_id).';
COMMENT ON COLUMN runs.config IS 'JSON: the model and training configuration.';
COMMENT ON COLUMN runs.metrics IS 'JSON: validation/test accuracy, context ablation, faithfulness and the checkpoint path.';
COMMENT ON COLUMN runs.started_at IS 'When the run started, UTC.';
COMMENT ON COLUMN runs.finished_at IS 'When the run finished, UTC.';

COMMENT ON TABLE vocab_stats IS 'Vocabulary quality of the tokenized corpus before and after out-of-vocabulary repair; one row per (scope, phase), latest wins.';
COMMENT ON COLUMN vocab_stats.scope IS 'Who wrote the row: clean (`mrqa clean`) | report (`mrqa vocab-report`).';
COMMENT ON COLUMN vocab_stats.phase IS 'before_repair | after_repair.';
COMMENT ON COLUMN vocab_stats.dictionary IS 'The word list the shares are measured against (wordfreq English large).';
COMMENT ON COLUMN vocab_stats.n_word_types IS 'Distinct word tokens (tokens with a letter, lower-cased).';
COMMENT ON COLUMN vocab_stats.n_word_tokens IS 'Word token occurrences.';
COMMENT ON COLUMN vocab_stats.types_in_dict_share IS 'Share of word types found in the dictionary.';
COMMENT ON COLUMN vocab_stats.tokens_in_dict_share IS 'Share of word occurrences found in the dictionary.';
COMMENT ON COLUMN vocab_stats.top_oov IS 'JSON: the most frequent out-of-vocabulary types with their counts.';
COMMENT ON COLUMN vocab_stats.computed_at IS 'When the figures were computed, UTC.';

COMMENT ON TABLE encoders IS 'One row per image/text encoder (feature space); every vector and neighbour row carries its encoder_id.';
COMMENT ON COLUMN encoders.encoder_id IS '<model_name>-<weights sha256[:12]>-<preprocess sha256[:8]>.';
COMMENT ON COLUMN encoders.kind IS 'trained (the small open_clip model trained on the train split) | pretrained (open_clip weights).';
COMMENT ON COLUMN encoders.model_name IS 'open_clip model name (e.g. mrqa-tiny-clip, ViT-B-32).';
COMMENT ON COLUMN encoders.pretrained IS 'open_clip weights tag or file, for pretrained encoders.';
COMMENT ON COLUMN encoders.weights_sha256 IS 'Checksum of the weights.';
COMMENT ON COLUMN encoders.preprocess_sha256 IS 'Checksum of the image preprocessing description.';
COMMENT ON COLUMN encoders.dim IS 'Vector dimension.';
COMMENT ON COLUMN encoders.checkpoint_path IS 'Weights file, relative to MRQA_HOME when inside it.';
COMMENT ON COLUMN encoders.train_split IS 'The split a trained encoder was trained on (train).';
COMMENT ON COLUMN encoders.config IS 'JSON: model and training configuration.';
COMMENT ON COLUMN encoders.metrics IS 'JSON: training loss and validation retrieval figures.';
COMMENT ON COLUMN encoders.created_at IS 'When the encoder was registered, UTC.';

COMMENT ON TABLE neighbours IS 'For each image (per encoder) its K nearest images from OTHER recipes of the SAME split (features/vectors/neighbours.py).';
COMMENT ON COLUMN neighbours.encoder_id IS 'The feature space (encoders.encoder_id).';
COMMENT ON COLUMN neighbours.image_id IS 'The image whose neighbours these are.';
COMMENT ON COLUMN neighbours.rank IS '1 = nearest.';
COMMENT ON COLUMN neighbours.neighbour_id IS 'The neighbouring image (images.image_id).';
COMMENT ON COLUMN neighbours.neighbour_recipe_id IS 'The neighbour''s recipe (never the image''s own).';
COMMENT ON COLUMN neighbours.distance IS 'Cosine distance (1 - cos) of the L2-normalised vectors.';

COMMENT ON TABLE text_neighbours IS 'For each step title (per encoder) its K nearest titles from OTHER recipes of the SAME split (textual cloze distractors).';
COMMENT ON COLUMN text_neighbours.encoder_id IS 'The feature space (encoders.encoder_id).';
COMMENT ON COLUMN text_neighbours.field IS 'The text field (title).';
COMMENT ON COLUMN text_neighbours.item_id IS '<recipe_id>_<step_idx>_title, as in the step_text_vectors LanceDB table.';
COMMENT ON COLUMN text_neighbours.rank IS '1 = nearest.';
COMMENT ON COLUMN text_neighbours.neighbour_id IS 'The neighbouring title''s item id.';
COMMENT ON COLUMN text_neighbours.neighbour_recipe_id IS 'The neighbour''s recipe (never the item''s own).';
COMMENT ON COLUMN text_neighbours.distance IS 'Cosine distance (1 - cos).';

COMMENT ON TABLE generation_skips IS 'Questions (or recipes) a dataset generation skipped, counted by reason; constraints are never relaxed.';
COMMENT ON COLUMN generation_skips.dataset_id IS 'The dataset (datasets.dataset_id).';
COMMENT ON COLUMN generation_skips.reason IS 'Why, e.g. recipe_too_few_steps, too_few_ball_candidates, too_few_closer_candidates (docs/knobs.md).';
COMMENT ON COLUMN generation_skips.n_skipped IS 'How many were skipped for that reason.';

COMMENT ON TABLE bias_metrics IS 'Bias diagnostics per dataset (features/diagnostics/bias.py), replaced per dataset by `mrqa report`.';
COMMENT ON COLUMN bias_metrics.dataset_id IS 'The dataset (datasets.dataset_id).';
COMMENT ON COLUMN bias_metrics.task IS 'The dataset''s task.';
COMMENT ON COLUMN bias_metrics.knobs IS 'k1-k2-k3 (knob 3 may carry its mode, e.g. 1:balanced) or the preset name.';
COMMENT ON COLUMN bias_metrics.encoder_id IS 'The feature space the distances were measured in.';
COMMENT ON COLUMN bias_metrics.seed IS 'Seed of the probe''s cross-validation folds.';
COMMENT ON COLUMN bias_metrics.n_questions IS 'Questions in the dataset.';
COMMENT ON COLUMN bias_metrics.n_scored IS 'Questions whose items all have vectors (the ones measured).';
COMMENT ON COLUMN bias_metrics.n_recipes IS 'Recipes with at least one question.';
COMMENT ON COLUMN bias_metrics.chance IS 'Accuracy of a random choice (0.25).';
COMMENT ON COLUMN bias_metrics.hasty_student_acc IS 'Accuracy of the context-free Hasty Student rule (features/diagnostics/hasty.py).';
COMMENT ON COLUMN bias_metrics.probe_acc IS 'Cross-validated accuracy of a probe that sees only each choice''s distances from the question.';
COMMENT ON COLUMN bias_metrics.probe_model IS 'The probe''s model (logreg).';
COMMENT ON COLUMN bias_metrics.probe_folds IS 'Cross-validation folds, grouped by recipe.';
COMMENT ON COLUMN bias_metrics.recipe_coverage IS 'Mean share of a recipe''s steps its questions show.';
COMMENT ON COLUMN bias_metrics.question_overlap IS 'Mean pairwise Jaccard overlap of the step sets of a recipe''s questions.';
COMMENT ON COLUMN bias_metrics.answer_rank_share IS 'JSON list: share of questions whose answer has distance rank 0..3 among its choices (0 = nearest to the question).';
COMMENT ON COLUMN bias_metrics.computed_at IS 'When the row was computed, UTC.';

COMMENT ON TABLE pipeline_stages IS 'The pipeline flow''s record of each stage (flows/pipeline.py); a re-run skips a stage whose inputs and outputs are unchanged.';
COMMENT ON COLUMN pipeline_stages.stage IS 'Stage name: ingest | clean | embed | generate | report | train | sweep.';
COMMENT ON COLUMN pipeline_stages.status IS 'completed | failed.';
COMMENT ON COLUMN pipeline_stages.inputs_fingerprint IS 'Hash of the stage''s input tables and parameters when it last ran.';
COMMENT ON COLUMN pipeline_stages.outputs_fingerprint IS 'Hash of the stage''s outputs when it last completed.';
COMMENT ON COLUMN pipeline_stages.params IS 'JSON: the stage''s parameters.';
COMMENT ON COLUMN pipeline_stages.summary IS 'JSON: the stage''s summary (counts, timings).';
COMMENT ON COLUMN pipeline_stages.error IS 'Why the stage failed, when it did.';
COMMENT ON COLUMN pipeline_stages.seconds IS 'Wall seconds of the last run.';
COMMENT ON COLUMN pipeline_stages.finished_at IS 'When the last run ended, UTC.';
