-- The cooking-role layer: per step, its events (actions), participants (ingredients and
-- intermediate mixtures), tools, habitats (vessels, appliances, places), time and temperature
-- modifiers. Each role is explicit (a character span of steps.body) or hidden (implied, no span).
-- source 'rules': etl/roles/extract.py over the cleaned step text (any recipe source);
-- source 'truth': the sample kitchen's plans (ground_truth.jsonl), exact, with the mixtures.
-- Rebuilt per source by `mrqa roles extract` / `mrqa roles truth` (replace, so re-running is safe).
CREATE TABLE IF NOT EXISTS step_roles (
    recipe_id   VARCHAR NOT NULL,
    step_idx    INTEGER NOT NULL,
    source      VARCHAR NOT NULL,
    seq         INTEGER NOT NULL,
    role        VARCHAR NOT NULL,
    value       VARCHAR NOT NULL,
    explicit    BOOLEAN NOT NULL,
    span_start  INTEGER,
    span_end    INTEGER,
    event       INTEGER,
    detail      JSON,
    PRIMARY KEY (recipe_id, step_idx, source, seq)
);

COMMENT ON TABLE step_roles IS 'Cooking roles per step (event, participant, tool, habitat, time, temperature, mixture), explicit with a span of steps.body or hidden; source rules (extractor) or truth (sample kitchen plans).';
COMMENT ON COLUMN step_roles.event IS 'Index (in this step, source) of the event a participant or hidden role belongs to; null for explicit tools, habitats and modifiers.';
COMMENT ON COLUMN step_roles.detail IS 'truth mixtures: {"parts": [...]} (the ingredients it holds at that step).';
COMMENT ON COLUMN step_roles.recipe_id IS 'The recipe (recipes.recipe_id).';
COMMENT ON COLUMN step_roles.step_idx IS 'The step (steps.step_idx).';
COMMENT ON COLUMN step_roles.source IS 'rules (etl/roles/extract.py over steps.body) | truth (sample kitchen plans).';
COMMENT ON COLUMN step_roles.seq IS 'Order of the role within its step and source (0-based).';
COMMENT ON COLUMN step_roles.role IS 'event | participant | tool | habitat | time | temperature | quantity | mixture (truth only).';
COMMENT ON COLUMN step_roles.value IS 'Normalised value: verb lemma, entity or phrase, "20 minutes", "350 degrees F", a count.';
COMMENT ON COLUMN step_roles.explicit IS 'True when the text states it (a span of steps.body); false for a hidden (implied) role.';
COMMENT ON COLUMN step_roles.span_start IS 'Start character offset of the role in steps.body; null when hidden or not located.';
COMMENT ON COLUMN step_roles.span_end IS 'End character offset (exclusive) of the role in steps.body.';
