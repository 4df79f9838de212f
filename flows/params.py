"""Literal types of the flow parameters that take a fixed set of values, so the Prefect UI (and a
deployment run's form) offers a choice and a flow run refuses anything else. Built from the library's
own value sets where their modules are light; the others are written out and checked against the
library by tests/flows/test_flow_params.py."""
from __future__ import annotations

from typing import Literal

from training.config import READER_TASKS, SCORERS, SIZES, TEXT_FEATURES, VISUAL_TASKS

TaskName = Literal["visual_cloze", "visual_coherence", "visual_ordering", "textual_cloze"]  # knobs.TASKS
K3Mode = Literal["off", "coin", "all", "balanced"]                              # knobs.K3_MODES
PresetName = Literal["recipeqa"]                                # features.datasets.generate.settings_for
NeighbourMethod = Literal["auto", "ann", "exact", "lance"]      # features.vectors.neighbours.METHODS
DecodeMode = Literal["threads", "processes"]                    # features.embed.decode.image_loader
ImportMethod = Literal["arrow", "executemany"]                  # etl.recipeqa.import_recipeqa
ProbeModel = Literal["logreg", "svm"]                           # features.diagnostics.bias.distance_probe
SplitBy = Literal["recipe", "author"]                            # etl.splits.SPLIT_UNITS
ReadingFolds = Literal["test", "split"]                         # training.split_folds.FOLDS
PipelineStage = Literal["all", "ingest", "clean", "embed", "generate", "competence", "report", "train",
                        "sweep"]                                # "all" + flows.pipeline.STAGES
Scorer = Literal[SCORERS]
TextFeatures = Literal[TEXT_FEATURES]
ModelSize = Literal[SIZES]
VisualTask = Literal[VISUAL_TASKS]
ReaderTask = Literal[READER_TASKS]
