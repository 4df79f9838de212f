"""Prefect flow: import RecipeQA JSON files (thin wrapper over etl.recipeqa.import_recipeqa)."""
from __future__ import annotations

from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from etl.config import Paths
from etl.recipeqa import RecipeQAFormatError, import_recipeqa
from etl.warehouse import connect
from flows.params import ImportMethod
from flows.tasks import run_task


@task(name="import-recipeqa-files", cache_policy=NO_CACHE)
def import_files(files: list[str], images_dir: str | None, method: str, replace: bool = False,
                 resplit: tuple[float, float, float] | None = None) -> dict:
    paths = Paths.from_env().ensure()
    con = connect(paths)
    try:
        return import_recipeqa(con, files, Path(images_dir) if images_dir else None,
                               home=paths.home, method=method, replace=replace, resplit=resplit)
    except RecipeQAFormatError as e:
        return {"error": str(e), "loaded": False}
    finally:
        con.close()


@flow(name="import-recipeqa")
def import_recipeqa_flow(files: list[str], images_dir: str | None = None, method: ImportMethod = "arrow",
                         raise_on_error: bool = True, replace: bool = False,
                         resplit: tuple[float, float, float] | None = None) -> dict:
    """Validate every file first, then load recipes, steps, images and original questions at once.

    A bad file loads nothing: the flow fails (or, with raise_on_error=False, returns
    {"error": message, "loaded": False} so the CLI can print a clean message). Without `replace`,
    rows of known recipes that these files lack are kept (summary "kept"); with it, dropped.
    `resplit`: (train, val, test) shares that replace the files' splits (etl.recipeqa.resplit_records).
    """
    summary = run_task(import_files, files, images_dir, method, replace, resplit)
    if "error" in summary and raise_on_error:
        raise RecipeQAFormatError(summary["error"])
    return summary
