"""The Literal types of the flow parameters (flows/params.py) hold exactly the library's value sets,
and Prefect shows them as choices (an enum in the parameter schema the UI renders)."""
from __future__ import annotations

import typing

import pytest
from prefect.utilities.callables import parameter_schema

from flows import params


def test_written_out_literals_match_the_library():
    from features.datasets.knobs import K3_MODES, TASKS
    from features.vectors.neighbours import METHODS
    from flows.pipeline import STAGES
    assert typing.get_args(params.TaskName) == TASKS
    assert typing.get_args(params.K3Mode) == K3_MODES
    assert typing.get_args(params.NeighbourMethod) == METHODS
    assert typing.get_args(params.PipelineStage) == ("all", *STAGES)
    from training.split_folds import FOLDS
    assert typing.get_args(params.ReadingFolds) == FOLDS
    from training.config import READER_TASKS, VISUAL_TASKS
    assert typing.get_args(params.ReaderTask) == READER_TASKS and typing.get_args(params.VisualTask) == VISUAL_TASKS
    # the sets the command line offers for the same options (checked against the library in
    # tests/flows/test_cli_package.py)
    from flows.cli import choices
    for literal, enum in ((params.ImportMethod, choices.ImportMethod), (params.ProbeModel, choices.Probe),
                          (params.DecodeMode, choices.Decode), (params.PresetName, choices.Preset),
                          (params.ReadingFolds, choices.ReadingFolds)):
        assert typing.get_args(literal) == tuple(e.value for e in enum)


@pytest.mark.parametrize("module, flow_name, parameter, values", [
    ("flows.generate", "generate_flow", "task_name", params.TaskName),
    ("flows.generate", "generate_flow", "k3_mode", params.K3Mode),
    ("flows.generate", "generate_flow", "preset", params.PresetName),
    ("flows.embed", "embed_flow", "neighbour_method", params.NeighbourMethod),
    ("flows.embed", "embed_flow", "decode", params.DecodeMode),
    ("flows.report", "report_flow", "model", params.ProbeModel),
    ("flows.import_recipeqa", "import_recipeqa_flow", "method", params.ImportMethod),
    ("flows.train", "train_flow", "scorer", params.Scorer),
    ("flows.train", "train_flow", "size", params.ModelSize),
    ("flows.train", "sweep_flow", "tasks", params.ReaderTask),
    ("flows.pipeline", "pipeline_flow", "force", params.PipelineStage),
    ("flows.pipeline", "pipeline_flow", "sweep_scorers", params.Scorer),
    ("flows.pipeline", "pipeline_flow", "reading_folds", params.ReadingFolds),
])
def test_flow_parameters_are_choices_in_prefect(module, flow_name, parameter, values):
    import importlib
    flow = getattr(importlib.import_module(module), flow_name)
    prop = parameter_schema(flow.fn).model_dump()["properties"][parameter]
    schema = prop.get("items") or next((s for s in prop.get("anyOf", [prop]) if {"enum", "const"} & set(s)), prop)
    offered = schema["enum"] if "enum" in schema else [schema["const"]] if "const" in schema else None
    assert offered == list(typing.get_args(values)), prop       # one value: a JSON-schema const


def test_a_flow_run_refuses_a_value_outside_the_choice():
    from prefect.exceptions import ParameterTypeError

    from flows.report import report_flow
    with pytest.raises(ParameterTypeError):
        report_flow.validate_parameters({"model": "tree"})
