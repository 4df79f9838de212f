"""The short training stage always finishes: a dataset whose split has no questions, or a requested
id prefix that matches no dataset, is skipped with the reason recorded (and shown in the demo's
printed summary) instead of training; the pipeline without datasets to train skips the stage and
says why."""
from __future__ import annotations

import inspect

from flows.demo import demo_digest, format_digest
from flows.pipeline import build_stages, pipeline_flow, run_stage
from flows.train import SHORT_TRAIN_EXPORT, short_training


def _question(ds: str, i: int, split: str) -> tuple:
    return (ds, f"q{i}", "visual_cloze", f"R{i}", split, ["a", "@placeholder"], ["x", "y", "z", "w"], 0, [1, 2],
            "{}")


def _dataset(ds: str, n: int) -> tuple:
    return (ds, "visual_cloze", 0, 1, 1, None, 0, "enc", "{}", "2024-01-01 00:00:00", n, n, "x")


def test_short_training_skips_datasets_with_an_empty_split(paths, con):
    rows = [_question("vc-0-1-1-s0-abc", i, sp) for i, sp in enumerate(["train", "train", "test"])]
    rows += [_question("vc-0-0-0-s0-abc", 9, "val")]                # not a demo training dataset
    con.executemany("INSERT INTO questions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    con.executemany("INSERT INTO datasets (dataset_id, task, knob1, knob2, knob3, preset, seed, encoder_id, "
                    "params, created_at, n_questions, n_recipes, content_sha256) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [_dataset("vc-0-1-1-s0-abc", 3), _dataset("vc-recipeqa-s0-abc", 0), _dataset("vc-0-0-0-s0-abc", 1)])
    con.close()
    out = short_training(paths, ["vc-recipeqa-", "vc-0-1-1-s"], seed=0)
    assert out == [{"dataset_id": "vc-0-1-1-s0-abc", "skipped": "no val questions"},
                   {"dataset_id": "vc-recipeqa-s0-abc", "skipped": "no train/val/test questions"}]
    assert not (paths.exports / SHORT_TRAIN_EXPORT).exists()      # nothing to export, nothing trained

    summary = {"stages": [{"stage": "train", "status": "completed", "seconds": 1.0, "cpu_s": 0.5,
                           "summary": {"runs": out}}], "total_s": 1.0}
    text = format_digest(demo_digest(summary))
    assert "vc-0-1-1-s0-abc: skipped (no val questions)" in text
    assert "train     completed" in text

    assert short_training(paths, ["vc-0-0-0-s0-abc", "tc-"], seed=0) == [
        {"dataset_id": "tc-", "skipped": "no generated dataset matches"},
        {"dataset_id": "vc-0-0-0-s0-abc", "skipped": "no train/test questions"}]


def test_pipeline_train_stage_without_datasets_is_skipped_with_its_reason(paths):
    params = {k: v.default for k, v in inspect.signature(pipeline_flow.fn).parameters.items()}
    stages = build_stages({**params, "train": True, "generate": False, "report": False}, paths)
    assert [s.name for s in stages] == ["clean", "embed", "train"]
    res = run_stage(paths, stages[-1])
    assert res["status"] == "skipped" and "no train_datasets given" in res["reason"]
    stages = build_stages({**params, "train": True, "train_datasets": ["vc-0-1-1-s"]}, paths)
    train = next(s for s in stages if s.name == "train")
    assert train.skip_reason is None and train.params["datasets"] == ["vc-0-1-1-s"]
    # the reading check's folds are part of the stage's parameters only when they are not the default: a
    # home checked on its test splits keeps its train stage, and `--reading-folds split` runs it again
    reading = {**params, "train": True, "train_reading": True}
    plain, split = (next(s for s in build_stages({**reading, "reading_folds": f}, paths) if s.name == "train")
                    .params["reading"] for f in ("test", "split"))
    assert "folds" not in plain and split == {**plain, "folds": "split"}


def test_the_summary_names_the_reading_benchmark_and_how_to_score_a_model_on_it():
    """The demo's summary lists the datasets the reading-only export holds, per task, and says how to score
    a model of one's own on them (`mrqa score`)."""
    ro = {"datasets": ["vc-0-1-1-af-s0-abc", "vc-1-1-1-af-s0-abc", "vcoh-0-0-0-matched-af-s0-abc"], "left_out": 77}
    summary = {"stages": [{"stage": "train", "status": "completed", "seconds": 1.0, "cpu_s": 0.5,
                           "summary": {"reading_only": ro}}], "total_s": 1.0}
    lines = format_digest(demo_digest(summary)).splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith("reading benchmark"))
    assert "3 datasets, 77 left out" in lines[i]
    assert lines[i + 1].split() == ["vc", "0-1-1-af", "1-1-1-af"]
    assert lines[i + 2].split() == ["vcoh", "0-0-0-matched-af"]
    assert "mrqa score --export DIR --predictions FOLDER --context-ablation FOLDER" in lines[i + 3]
    # an empty benchmark: why, and no advice to export it
    ro = {"datasets": [], "left_out": 80, "reasons": {"look probe (pixels)": 48, "question-only probe": 32}}
    text = format_digest(demo_digest({"stages": [{"stage": "train", "status": "completed", "seconds": 1.0,
                                                  "cpu_s": 0.5, "summary": {"reading_only": ro}}], "total_s": 1.0}))
    assert "0 datasets, 80 left out" in text and "look probe (pixels): 48, question-only probe: 32" in text
    assert "mrqa score" not in text


def test_the_demo_makes_its_reading_benchmark_by_default(paths):
    """`make demo` runs the pooled step on the textual cloze AF datasets (the sample kitchen's reading
    benchmark) and not the one on the visual cloze AF datasets (the look probe reads those from their
    pixels either way): the CLI's defaults and demo_flow's agree, and the generate stage they build
    carries the textual step's options and no visual one. `mrqa pipeline` runs both by default."""
    import typer

    from flows.cli import app
    from flows.demo import demo_flow
    from flows.pipeline import TEXTUAL_AF_DROP, TEXTUAL_POOL
    cli = {p.name: p.default for p in typer.main.get_command(app).commands["demo"].params}
    flow = {k: v.default for k, v in inspect.signature(demo_flow.fn).parameters.items()}
    assert (cli["af_pool"], cli["textual_cloze_pooled"]) == (flow["af_pool"], flow["textual_cloze_pooled"]) \
        == (False, True)
    params = {k: v.default for k, v in inspect.signature(pipeline_flow.fn).parameters.items()}
    # the pipeline (no time bound) runs both, so a scheduled run on a demo home keeps the reading benchmark
    pipe = {p.name: p.default for p in typer.main.get_command(app).commands["pipeline"].params}
    assert (pipe["af_pool"], pipe["textual_cloze_pooled"]) == (params["af_pool"], params["textual_cloze_pooled"]) \
        == (True, True)
    for af_pool, textual in ((False, True), (True, False)):
        gen = next(s for s in build_stages({**params, "af_pool": af_pool, "textual_cloze_pooled": textual}, paths)
                   if s.name == "generate")
        assert (gen.params["af_pool"] is not None) == af_pool
        assert gen.params.get("textual_cloze_pooled") == ({**TEXTUAL_POOL, "af_drop": "pooled"} if textual else None)
    assert TEXTUAL_AF_DROP == "pooled"


def test_the_summary_counts_a_textual_step_whose_idle_datasets_got_afs_own_drop():
    """`flows.pipeline._textual` gives a dataset the pooled step had no room in AF's own drop and reports it in
    the step's shape (`own_drop`): the digest sums it with the others, and a skipped step says why."""
    step = {"tc-0-1-1-af-s0-x": {"dropped": 300, "kept": 640, "oof_question_only_acc": 0.4,
                                 "oof_question_only_acc_kept": 0.2},
            "tc-0-0-0-af-s0-x": {"dropped": 0, "kept": 150, "oof_question_only_acc": None,
                                 "oof_question_only_acc_kept": None, "own_drop": True}}
    gen = {"stage": "generate", "status": "completed", "seconds": 1.0, "cpu_s": 1.0,
           "summary": {"n_datasets": 2, "n_questions": 790, "textual_cloze_pooled": step}}
    digest = demo_digest({"stages": [gen], "total_s": 1.0})
    assert digest["counts"]["af_pool"]["textual_cloze"] == "790 kept / 300 dropped over 2 datasets"
    skipped = {**gen, "summary": {**gen["summary"], "textual_cloze_pooled": {
        "skipped": "too few recipes", "regenerated_with_linear_drop": ["tc-0-0-0-af-s0-x"]}}}
    assert demo_digest({"stages": [skipped], "total_s": 1.0})["counts"]["af_pool"]["textual_cloze"] == "too few recipes"
    assert "790 kept / 300 dropped" in format_digest(digest)


def test_the_summary_counts_the_redrawn_steps_the_items_rules_apart():
    """The redrawn step's two pooled steps (REDRAWN_POOL's, then the items rule's) each get a line of the digest."""
    def step(kept, dropped):
        return {"dropped": dropped, "kept": kept, "oof_question_only_acc": 0.5, "oof_question_only_acc_kept": 0.3}
    redrawn = {"af_pool": {"visual_cloze": {"vc-0-1-1-redrawn-af-s0-x": step(900, 100)}},
               "af_pool_items": {"visual_cloze": {"vc-0-0-0-redrawn-af-s0-x": step(700, 50),
                                                  "vc-1-0-0-redrawn-af-s0-x": step(300, 25)}}}
    gen = {"stage": "generate", "status": "completed", "seconds": 1.0, "cpu_s": 1.0,
           "summary": {"n_datasets": 3, "n_questions": 1900, "redrawn": redrawn}}
    digest = demo_digest({"stages": [gen], "total_s": 1.0})
    assert digest["counts"]["af_pool"] == {
        "visual_cloze (redrawn)": "900 kept / 100 dropped over 1 datasets",
        "visual_cloze (redrawn, items rule)": "1000 kept / 75 dropped over 2 datasets"}
    assert "1000 kept / 75 dropped over 2 datasets" in format_digest(digest)


def test_the_adversary_size_aims_the_pooled_steps_beyond_the_paper_and_the_check(paths):
    """`--adversary-size paper` gives the author coherence and redrawn visual cloze pooled steps paper-size
    adversaries (PAPER_ADVERSARIES, every other option as it was) and the train stage's check that size; the
    default leaves both stages' parameters exactly as before (a home made without it is not run again); the
    CLI's defaults and the flows' agree; an unknown size is refused before any stage runs."""
    import pytest
    import typer

    from flows.cli import app
    from flows.demo import demo_flow
    from flows.pipeline import (
        AUTHOR_POOL,
        PAPER_ADVERSARIES,
        REDRAWN_ITEMS,
        REDRAWN_ITEMS_POOL,
        REDRAWN_ITEMS_REDRAW,
        REDRAWN_POOL,
        pool_for,
    )
    params = {k: v.default for k, v in inspect.signature(pipeline_flow.fn).parameters.items()}
    base = {**params, "author_coherence": True, "redrawn": True, "train": True, "train_reading": True}

    def stages(size):
        return {s.name: s.params for s in build_stages({**base, "adversary_size": size}, paths)}
    small, paper = stages("small"), stages("paper")
    assert small["generate"]["author_coherence"] == AUTHOR_POOL and "check_size" not in small["train"]
    assert {k: v for k, v in small["generate"]["redrawn"].items() if k in REDRAWN_POOL} == REDRAWN_POOL
    assert paper["generate"]["author_coherence"] == {**AUTHOR_POOL, "size": "paper", "adversaries": 2}
    red, red_paper = small["generate"]["redrawn"], paper["generate"]["redrawn"]
    assert red["items"] == {"settings": {t: list(s) for t, s in REDRAWN_ITEMS.items()}, **REDRAWN_POOL,
                            **REDRAWN_ITEMS_POOL, "candidate_sample": 100}
    assert REDRAWN_ITEMS_POOL == {"drop_order": "minimax", "rules": True}
    assert REDRAWN_ITEMS_REDRAW == {"candidate_sample": 100}
    assert red_paper == {**red, "size": "paper", "adversaries": 2,
                         "items": {**red["items"], "size": "paper", "adversaries": 2}}
    assert paper["train"] == {**small["train"], "check_size": "paper"}
    assert {k: v for k, v in paper["generate"].items() if k not in ("author_coherence", "redrawn")} \
        == {k: v for k, v in small["generate"].items() if k not in ("author_coherence", "redrawn")}
    assert PAPER_ADVERSARIES == {"size": "paper", "adversaries": 2}
    assert pool_for(REDRAWN_POOL, "small") is REDRAWN_POOL
    for cmd in ("demo", "pipeline"):
        cli = {p.name: p.default for p in typer.main.get_command(app).commands[cmd].params}
        assert str(cli["adversary_size"]) == params["adversary_size"] == "small"
    assert inspect.signature(demo_flow.fn).parameters["adversary_size"].default == "small"
    with pytest.raises(ValueError, match="adversary_size 'huge': choose one of small, paper"):
        pipeline_flow.fn(adversary_size="huge")
    assert not (paths.home / "warehouse.duckdb").exists()


def test_the_summary_says_the_size_of_the_models_that_checked():
    """The demo's summary names the train stage's check size when it is not the default small one."""
    for size, words in ((None, "(every question, recorded)"), ("paper", "(paper-size models, every question, "
                                                                         "recorded)")):
        trn = {"gm3c_check": {"visual_cloze": {"vc-0-1-1-af-s0-x": 0.3, "vc-1-1-1-af-s0-x": 0.25},
                              "textual_cloze": {"skipped": "too few recipes"}},
               **({"gm3c_check_size": size} if size else {})}
        text = format_digest(demo_digest({"stages": [{"stage": "train", "status": "completed", "seconds": 1.0,
                                                      "cpu_s": 0.5, "summary": trn}], "total_s": 1.0}))
        line = next(x for x in text.splitlines() if x.startswith("independent GM3C"))
        assert words in line and line.endswith("2 datasets, 25.0%-30.0%"), line


def test_the_summary_gives_the_pixel_probes_range_when_the_train_stage_ran_it():
    """The train stage's pixel probe (the visual datasets waiting for it) appears in the summary as its range;
    no line when none waited."""
    for pixel, want in (({"vc-0-1-0-redrawn-af-s0-x": 0.278, "vcoh-0-0-0-author-af-s0-x": 0.261},
                         "pixel probe (a CNN on the photos, every question, recorded): 2 datasets, 26.1%-27.8%"),
                        ({}, None)):
        text = format_digest(demo_digest({"stages": [{"stage": "train", "status": "completed", "seconds": 1.0,
                                                      "cpu_s": 0.5, "summary": {"pixel_check": pixel}}],
                                          "total_s": 1.0}))
        lines = [x for x in text.splitlines() if x.startswith("pixel probe")]
        assert lines == ([want] if want else []), text
