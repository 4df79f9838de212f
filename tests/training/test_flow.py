"""The thin Prefect flow over train_run (one epoch, tiny)."""
from __future__ import annotations


def test_train_flow_runs_one_tiny_epoch(toy_home, prefect_harness):
    from flows.train import train_flow
    did = toy_home["ids"][("visual_ordering", "0-0-0")]
    m = train_flow(str(toy_home["export"]), did, scorer="bidaf", tiny=True,
                   overrides={"max_epochs": 1, "max_train_questions": 48})
    assert m["task"] == "visual_ordering" and m["epochs_run"] == 1 and 0 <= m["test_acc"] <= 1
    assert m["recorded_in_runs"] and "history" not in m
