"""Prefect flow: clean + tokenize the warehouse (thin wrapper over etl.clean.clean_corpus)."""
from __future__ import annotations

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from etl.clean import CleanConfig, clean_corpus
from etl.config import Paths
from etl.warehouse import connect
from flows.tasks import run_task


@task(name="clean-and-tokenize", cache_policy=NO_CACHE)
def clean_task(config: CleanConfig) -> dict:
    paths = Paths.from_env().ensure()
    con = connect(paths)
    try:
        return clean_corpus(con, paths, config).summary
    finally:
        con.close()


@flow(name="clean")
def clean_flow(workers: int = 2, retrain_punkt: bool = False, repair: bool = True) -> dict:
    """Clean every step from its raw text, reject non-recipes with a reason, tokenize kept steps."""
    return run_task(clean_task, CleanConfig(workers=workers, retrain_punkt=retrain_punkt, repair=repair))
