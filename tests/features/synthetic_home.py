"""A module-scoped MRQA_HOME holding the synthetic world (features/datasets/synthetic.py): the shared
set-up of the generation, AF, export and report test modules.

    with synthetic_home(tmp_path_factory, "gen_home", n_recipes=70, seed=1, dim=24, k=100) as (home, paths, con):
        ...

MRQA_HOME points at the new home inside the block and is restored after it; the connection is closed."""
from __future__ import annotations

import os
from contextlib import contextmanager


@contextmanager
def synthetic_home(tmp_path_factory, name: str, **world):
    from etl.config import Paths
    from etl.warehouse import connect
    from features.datasets.synthetic import build_world
    home = tmp_path_factory.mktemp(name)
    old = os.environ.get("MRQA_HOME")
    os.environ["MRQA_HOME"] = str(home)
    con = None
    try:
        paths = Paths.from_env().ensure()
        con = connect(paths)
        build_world(con, paths.lance, **world)
        yield home, paths, con
    finally:
        if con is not None:
            con.close()
        if old is None:
            os.environ.pop("MRQA_HOME", None)
        else:
            os.environ["MRQA_HOME"] = old
