"""`mrqa redraw`: visual cloze AF datasets whose distractors (visual coherence: foreign photos) are drawn again in
the question's kitchen by the sample kitchen's renderer (features/datasets/redraw.py, redraw_coherence.py;
docs/knobs.md, "Redrawn distractors")."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from flows.cli.common import echo_json, fail, require_warehouse, wait_option

app = typer.Typer()


@app.command("redraw")
def redraw_cmd(task: str = typer.Option("visual_cloze", "--task", help="visual_cloze (the distractors are drawn "
                                        "again) or visual_coherence (the foreign photo)."),
               knobs: Optional[list[str]] = typer.Option(None, "--knobs", help="An AF setting of --task to draw "
                                                          "again (repeat for more), e.g. 0-1-1-af; its result is "
                                                          "0-1-1-redrawn-af. Default: every AF setting of the knobs "
                                                          "of --task registered for --seed."),
               seed: int = typer.Option(0, "--seed", help="The source datasets' seed; it seeds the new photos' "
                                        "jitter too."),
               encoder: Optional[str] = typer.Option(None, "--encoder", help="encoder_id of the source dataset "
                                                     "(needed only where several encoders made one)."),
               sample: Optional[Path] = typer.Option(None, "--sample", help="The sample kitchen build whose ground "
                                                     "truth draws the photos (default: the one under "
                                                     "MRQA_HOME/sample/ that knows the recipes)."),
               items: bool = typer.Option(False, "--items-rule/--no-items-rule", help="visual_coherence: leave "
                                          "out a foreign photo that is the odd one out by its ingredients alone "
                                          "(its step's ground truth)."),
               foreign_pool: str = typer.Option("af", "--foreign-pool", help="visual_coherence: af (the source's "
                                                "foreign photo and alternates) or steps (other recipes' photos "
                                                "that show what a held-out step of the recipe does)."),
               twin_rule: str = typer.Option("words", "--twin-rule", help="--foreign-pool steps: leave out a text "
                                             "twin of a step of the recipe by its words (AF's rule) or by its "
                                             "ground truth (items: a step of the recipe does the same to an item "
                                             "the photo shows)."),
               unremarkable: bool = typer.Option(False, "--unremarkable", help="visual_coherence: leave out a "
                                                 "foreign photo that a rule on the 4 photos' distances singles "
                                                 "out (the closest pair, the centre, the farthest)."),
               ball_candidates: Optional[bool] = typer.Option(None, "--ball-candidates/--no-ball-candidates",
                                                              help="visual_cloze: the ball sample's own photos "
                                                              "inside the ball are candidates too, after the "
                                                              "source's (default: at knob 2 = 0)."),
               candidate_sample: Optional[int] = typer.Option(None, "--candidate-sample", help="visual_cloze "
                                                              "with the ball sample's photos as candidates: that "
                                                              "many of the answer's neighbours drawn as candidates, "
                                                              "the first 16 still measuring the ball (default 16)."),
               as_json: bool = typer.Option(False, "--json", help="Print the summaries as JSON."),
               wait: Optional[float] = wait_option()):
    """Draw the distractors and alternates of visual cloze AF datasets (visual coherence: the foreign photo and
    its alternates) again in each question's kitchen, embed them, check the knobs again on the new photos and
    register the result as its own setting (`K1-K2-K3[-mode]-redrawn-af`); then `mrqa af-pool --task T
    --distractors redrawn` and `mrqa reading-check`."""
    from etl.config import Paths
    from etl.warehouse import connect
    from features.datasets.knobs import check_seed
    from features.datasets.redraw import TASKS, redraw
    from features.datasets.redraw_coherence import POOLS, redraw_coherence
    from features.datasets.step_matched import TWIN_RULES
    require_warehouse()
    try:
        check_seed(seed)
    except ValueError as e:
        fail(str(e))
    if task not in TASKS:
        fail(f"--task {task}: redraw draws visual cloze distractors or visual coherence foreign photos again "
             f"(one of {', '.join(TASKS)})")
    if ball_candidates is not None and task != "visual_cloze":
        fail("--ball-candidates is a visual_cloze rule (the distractors); leave it out for --task " + task)
    if candidate_sample is not None and (task != "visual_cloze" or ball_candidates is False):
        fail("--candidate-sample is a visual_cloze rule with the ball sample's photos as candidates; leave it out "
             "for --task visual_coherence and with --no-ball-candidates")
    if (items or unremarkable or foreign_pool != "af") and task != "visual_coherence":
        fail("--items-rule, --unremarkable and --foreign-pool are visual_coherence rules (the foreign photo); add "
             "--task visual_coherence or leave them out")
    if foreign_pool not in POOLS:
        fail(f"--foreign-pool {foreign_pool}: one of {', '.join(POOLS)}")
    if twin_rule not in TWIN_RULES:
        fail(f"--twin-rule {twin_rule}: one of {', '.join(TWIN_RULES)}")
    if twin_rule != "words" and foreign_pool != "steps":
        fail(f"--twin-rule {twin_rule} chooses the step pool's twin rule; add --foreign-pool steps or leave it out")

    def make(*args):
        return redraw_coherence(*args, items=items, pool=foreign_pool, twin_rule=twin_rule,
                                unremarkable=unremarkable) \
            if task == "visual_coherence" \
            else redraw(*args, ball_candidates=ball_candidates,
                        **({"candidate_sample": candidate_sample} if candidate_sample is not None else {}))
    paths = Paths.from_env()
    con = connect(paths, wait=wait)
    try:
        settings = knobs or [s for (s,) in con.execute(
            "SELECT DISTINCT setting FROM datasets WHERE task = ? AND seed = ? AND coalesce(adversarial, false) "
            "AND coalesce(json_extract_string(params, '$.distractors'), 'ball') = 'ball' ORDER BY 1",
            [task, seed]).fetchall()]
        if not settings:
            fail(f"no {task} AF dataset of seed {seed} to draw again: run `mrqa generate --task {task} "
                 "--knobs 0-1-1-af` (or `--all`) first")
        out = []
        for s in settings:
            try:
                out.append(make(con, s, seed, encoder, paths, sample))
            except (ValueError, LookupError) as e:
                fail(f"redraw {s}: {e}")
    finally:
        con.close()
    if as_json:
        echo_json(out)
        return
    for r in out:
        sk = ", ".join(f"{k} {v}" for k, v in r["skips"].items() if v) or "none"
        typer.echo(f"{r['dataset_id']}: {r['n_questions']:,d} of {r['source_questions']:,d} questions of "
                   f"{r['source_dataset_id']} (dropped: {sk}); {r['photos_photos']:,d} photos "
                   f"({r['photos_drawn']:,d} drawn, {r['photos_reused']:,d} kept, {r['photos_embedded']:,d} embedded); "
                   f"distance probe {r['distance_probe_accuracy']}"
                   + (f"; {r['photos_distractors_from_sample']:,d} distractors from the ball sample"
                      if r.get("photos_ball_candidates") else ""))
