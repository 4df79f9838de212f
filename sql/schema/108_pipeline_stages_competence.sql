-- The pipeline's stages include `competence` (the role layer and the competence families, between
-- generate and report); the column's comment named the stages before it was added.
COMMENT ON COLUMN pipeline_stages.stage IS 'Stage name: ingest | clean | embed | generate | competence | report | train | sweep.';
