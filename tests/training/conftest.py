"""A toy export shared by the training tests: features.datasets.synthetic's world (vectors whose step kind
shows in both the step title and the image cluster) -> generated datasets -> Parquet with vectors."""
from __future__ import annotations

import pytest

TOY_SETTINGS = [("visual_cloze", "recipeqa"), ("visual_cloze", (0, 0, 0)), ("visual_coherence", (0, 0, 0)),
                ("visual_ordering", (0, 0, 0)), ("textual_cloze", (0, 1, 0))]


@pytest.fixture(scope="session")
def toy_export(tmp_path_factory):
    from etl.config import Paths
    from etl.warehouse import connect
    from features.datasets.export import export_parquet
    from features.datasets.generate import generate_datasets, settings_for
    from features.datasets.synthetic import build_world
    home = tmp_path_factory.mktemp("training_home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MRQA_HOME", str(home))
        paths = Paths.from_env().ensure()
        con = connect(paths)
        build_world(con, paths.lance, n_recipes=120, seed=3, dim=32, k=50)
        settings = []
        for task, knobs in TOY_SETTINGS:
            settings += settings_for(task, preset=knobs) if knobs == "recipeqa" else settings_for(task, knobs)
        summaries = generate_datasets(con, settings, seed=0, lance_uri=paths.lance,
                                      encoder_id="synthetic-enc-0001", progress=False)
        ids = {(s["task"], s["knobs"]): s["dataset_id"] for s in summaries}
        export_parquet(con, sorted(ids.values()), paths.exports / "all", with_vectors=True, lance_uri=paths.lance)
        con.close()
    return {"home": home, "export": home / "exports" / "all", "ids": ids}


@pytest.fixture
def toy_home(toy_export, monkeypatch):
    monkeypatch.setenv("MRQA_HOME", str(toy_export["home"]))
    return toy_export


@pytest.fixture(scope="session")
def trained(toy_export):
    """A tiny transformer trained on the toy RecipeQA-style cloze set (learnable signal: the step
    kind shows in the step-title vectors and in the image clusters; the answer shares its recipe's
    style). Token features are trained by test_train.py::test_every_scorer_trains_on_every_task."""
    from training.train import main
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MRQA_HOME", str(toy_export["home"]))
        did = toy_export["ids"][("visual_cloze", "recipeqa")]
        m = main(["--export", str(toy_export["export"]), "--dataset", did, "--scorer", "transformer",
                  "--text-features", "vectors", "--tiny", "--max-epochs", "12", "--patience", "12", "--seed", "0"])
    return m
