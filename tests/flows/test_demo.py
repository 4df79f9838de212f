"""The demo's short training stage always finishes: a dataset whose split has no questions is
skipped with the reason recorded (and shown in the printed summary) instead of training."""
from __future__ import annotations

from flows.demo import demo_digest, format_digest, short_training


def _question(ds: str, i: int, split: str) -> tuple:
    return (ds, f"q{i}", "visual_cloze", f"R{i}", split, ["a", "@placeholder"], ["x", "y", "z", "w"], 0, [1, 2],
            "{}")


def test_short_training_skips_datasets_with_an_empty_split(paths, con):
    rows = [_question("vc-k011-s0-abc", i, sp) for i, sp in enumerate(["train", "train", "test"])]
    rows += [_question("vc-k000-s0-abc", 9, "val")]                # not a demo training dataset
    con.executemany("INSERT INTO questions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    con.close()
    generated = {"datasets": [{"dataset_id": d} for d in ("vc-k011-s0-abc", "vc-recipeqa-s0-abc",
                                                          "vc-k000-s0-abc")]}
    out = short_training(paths, generated, seed=0)
    assert out == [{"dataset_id": "vc-k011-s0-abc", "skipped": "no val questions"},
                   {"dataset_id": "vc-recipeqa-s0-abc", "skipped": "no train/val/test questions"}]
    assert not (paths.exports / "demo-train").exists()           # nothing to export, nothing trained

    summary = {"stages": [{"stage": "train", "status": "completed", "seconds": 1.0, "cpu_s": 0.5,
                           "summary": {"runs": out}}], "total_s": 1.0}
    text = format_digest(demo_digest(summary))
    assert "vc-k011-s0-abc: skipped (no val questions)" in text
    assert "train     completed" in text
