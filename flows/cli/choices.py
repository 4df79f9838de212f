"""The fixed sets of values `mrqa` options accept, as str Enums: `--help` lists them, shell completion
offers them, and a value outside them ends the command with one line naming the option and its values.

Where a light library module holds the set (training.config, etl.splits) the Enum is built from it, so
a rename there reaches the command line. The sets of modules that import numpy, Prefect or LanceDB
(the tasks and knob-3 modes, the pipeline's stages, the neighbour methods) are written out here, so
`mrqa --help` stays fast, and tests/flows/test_cli_package.py checks them against the library.
"""
from __future__ import annotations

from enum import StrEnum

from etl.splits import SPLIT_UNITS, SPLITS
from training.config import READER_TASKS, SCORERS, SIZES, TEXT_FEATURES, VISUAL_TASKS


def choices(name: str, values) -> type[StrEnum]:
    """A str Enum called `name` whose members are `values` (member name = value)."""
    return StrEnum(name, [(v, v) for v in values])


Task = choices("Task", (*VISUAL_TASKS, "textual_cloze"))         # features.datasets.knobs.TASKS
VisualTask = choices("VisualTask", VISUAL_TASKS)
ReaderTask = choices("ReaderTask", READER_TASKS)                # the tasks the trainer reads (mrqa sweep)
AfTask = choices("AfTask", (*VISUAL_TASKS, "textual_cloze"))   # flows.af_pool
K3Mode = choices("K3Mode", ("coin", "all", "balanced"))        # knobs.K3_MODES but "off" (= knob 3 at 0)
Scorer = choices("Scorer", SCORERS)
TextFeatures = choices("TextFeatures", TEXT_FEATURES)
Size = choices("Size", SIZES)
Split = choices("Split", SPLITS)
SplitBy = choices("SplitBy", SPLIT_UNITS)
Preset = choices("Preset", ("recipeqa",))                      # features.datasets.generate.settings_for
AfDrop = choices("AfDrop", ("linear", "pooled"))               # GeneratedDataset.af_drop
Distractors = choices("Distractors", ("ball", "matched", "author", "kitchen",     # KnobParams.distractors
                                       "redrawn", "matched-redrawn"))
FloorBy = choices("FloorBy", ("dataset", "split"))            # training.af_pooled.FLOOR_BY
SwapFirst = choices("SwapFirst", ("auto", "confident", "movable"))   # flows.af_pool.af_pool_flow swap_first
AdversarySize = choices("AdversarySize", ("small", "paper"))  # flows.pipeline.ADVERSARY_SIZES
FoldBy = choices("FoldBy", ("recipe", "split"))               # training.af_pooled.FOLD_BY
ReadingFolds = choices("ReadingFolds", ("test", "split"))     # training.split_folds.FOLDS
DropOrder = choices("DropOrder", ("votes", "minimax"))        # training.af_pooled.DROP_ORDERS
QueryFormat = choices("QueryFormat", ("table", "json", "csv"))
ListFormat = choices("ListFormat", ("table", "json"))
ExportFormat = choices("ExportFormat", ("parquet", "recipeqa-json"))   # features.datasets.export
VectorsOf = choices("VectorsOf", ("splits", "questions"))             # features.datasets.export.VECTORS_OF
Probe = choices("Probe", ("logreg", "svm"))                    # features.diagnostics.bias.distance_probe
ImportMethod = choices("ImportMethod", ("arrow", "executemany"))      # etl.recipeqa.import_recipeqa
Decode = choices("Decode", ("threads", "processes"))           # features.embed.decode.image_loader
NeighbourMethod = choices("NeighbourMethod", ("auto", "ann", "exact"))  # of features.vectors.neighbours.METHODS
KnnData = choices("KnnData", ("recipes", "clustered"))         # features.vectors.bench.knn_data
TwinMode = choices("TwinMode", ("none", "positive", "mask"))     # features.embed.train_encoder.TrainConfig.twins
TwinRule = choices("TwinRule", ("words", "items"))             # features.datasets.twins.TWIN_RULES
ForceStage = choices("ForceStage", ("all", "ingest", "clean", "embed", "generate", "competence", "report",
                                    "train", "sweep"))                  # 'all' + flows.pipeline.STAGES
