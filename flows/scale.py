"""Scale-out setting: run the fan-out stages on an existing Dask cluster through prefect-dask.

`MRQA_DASK_ADDRESS` (or an explicit `address`) names a running Dask scheduler, e.g.
`tcp://10.0.0.5:8786`. Set, the fan-out stage (embed: image decode + encode batches) submits its
Prefect tasks to `DaskTaskRunner(address=...)`; unset or empty, it runs on the default local path
(Prefect's ThreadPoolTaskRunner / the stage's in-process DataLoader). Ingest stays in the flow
process on purpose: see flows/ingest.py (per-host politeness; parsing is < 1% of the fetch time).

What the Dask workers need (prefect-dask runs each task through Prefect on the worker):
- the same code and virtual environment as the flow (`pip install -e .` of this repo, same pins);
- `PREFECT_API_URL` of the Prefect server the flow reports to (without it every
  worker starts its own temporary server). The flow also ships its settings context with each task;
  the environment variable makes workers right for anything else they run;
- the files the stage reads at the same paths (MRQA_HOME/images, the encoder weights): a shared
  file system, or the same absolute paths on every worker. Workers never open the DuckDB warehouse
  or write LanceDB: the flow process does all writes, in the same order as the local run.

For tests and local development, `local_cluster()` starts a `distributed.LocalCluster` whose worker
processes get PREFECT_API_URL; `python -m flows.scale` runs one and prints its address, and
`python -m flows.scale bench 1024` measures encode throughput in-process vs on 2 Dask workers.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)

ENV_ADDRESS = "MRQA_DASK_ADDRESS"


def dask_address(address: str | None = None) -> str | None:
    """The Dask scheduler address to use: `address` if given, else MRQA_DASK_ADDRESS; None if empty."""
    addr = address if address is not None else os.environ.get(ENV_ADDRESS, "")
    addr = addr.strip()
    return addr or None


def task_runner(address: str | None = None):
    """A Prefect task runner for the fan-out stages.

    `DaskTaskRunner(address=...)` when a scheduler address is set (argument or MRQA_DASK_ADDRESS),
    otherwise Prefect's default local `ThreadPoolTaskRunner`. Usable as
    `some_flow.with_options(task_runner=task_runner())` or as a context manager inside a flow
    (`with task_runner() as runner: runner.submit(task, parameters={...})`).
    """
    addr = dask_address(address)
    if addr is None:
        from prefect.task_runners import ThreadPoolTaskRunner
        return ThreadPoolTaskRunner()
    from prefect_dask import DaskTaskRunner
    return DaskTaskRunner(address=addr)


def is_dask(runner) -> bool:
    """True when `runner` sends tasks to a Dask cluster."""
    return type(runner).__name__ == "DaskTaskRunner"


def describe(address: str | None = None) -> str:
    """One line for logs and summaries: where the fan-out runs."""
    addr = dask_address(address)
    return f"dask {addr}" if addr else "local"


@contextmanager
def local_cluster(n_workers: int = 2, threads_per_worker: int = 1, processes: bool = True,
                  api_url: str | None = None, **kwargs) -> Iterator:
    """A `distributed.LocalCluster` for tests and development (yields it; `.scheduler_address`).

    Worker processes get PREFECT_API_URL (default: the one the current Prefect settings point to,
    e.g. a `prefect_test_harness` server) so their task runs report to the same server.
    """
    from distributed import LocalCluster
    from prefect.settings import PREFECT_API_URL
    api_url = api_url if api_url is not None else PREFECT_API_URL.value()
    env = dict(kwargs.pop("env", {}) or {})
    if api_url:
        env.setdefault("PREFECT_API_URL", api_url)
    for name in ("PREFECT_HOME", "DO_NOT_TRACK", "PREFECT_SERVER_ANALYTICS_ENABLED", "HF_HUB_OFFLINE"):
        if os.environ.get(name):
            env.setdefault(name, os.environ[name])
    kwargs.setdefault("dashboard_address", None)
    kwargs.setdefault("host", "127.0.0.1")
    cluster = LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker,
                           processes=processes, env=env, **kwargs)
    log.info("Dask LocalCluster at %s (%d workers x %d threads)", cluster.scheduler_address,
             n_workers, threads_per_worker)
    try:
        yield cluster
    finally:
        cluster.close()


def bench_embed(n_images: int = 1024, batch_size: int = 128, n_workers: int = 2,
                encoder_id: str | None = None) -> dict:
    """Steady-state image decode+encode throughput of MRQA_HOME's ok images: the same batches
    in-process vs on a warm `n_workers`-process LocalCluster (workers loaded before timing)."""
    import time

    import duckdb
    from distributed import Client

    from etl.config import Paths
    from features.embed.decode import image_items
    from features.embed.encoders import latest_encoder_id
    from features.embed.fanout import encode_batch, encoder_spec
    paths = Paths.from_env()
    with duckdb.connect(str(paths.warehouse), read_only=True) as con:
        encoder_id = encoder_id or latest_encoder_id(con)
        if encoder_id is None:
            raise SystemExit("no encoder registered in MRQA_HOME; run `mrqa encoder train` first")
        spec = encoder_spec(con, encoder_id, paths)
        files = [str(it.path) for it in image_items(con, paths)][:n_images]
    batches = [files[s:s + batch_size] for s in range(0, len(files), batch_size)]
    encode_batch(spec, files[:2])                        # load the model before timing
    t0 = time.perf_counter()
    n_local = sum(len(encode_batch(spec, b)["ok"]) for b in batches)
    local = n_local / (time.perf_counter() - t0)
    with local_cluster(n_workers=n_workers) as cluster, Client(cluster) as client:
        client.gather([client.submit(encode_batch, spec, files[:2], pure=False, workers=[w])
                       for w in client.scheduler_info()["workers"]])
        t0 = time.perf_counter()
        n_dask = sum(len(r["ok"]) for r in client.gather(
            [client.submit(encode_batch, spec, b, pure=False) for b in batches]))
        dask = n_dask / (time.perf_counter() - t0)
    return {"images": n_local, "batch_size": batch_size, "in_process_img_s": round(local, 1),
            f"dask_{n_workers}_workers_img_s": round(dask, 1), "ratio": round(dask / local, 2),
            "load_avg_1m": round(os.getloadavg()[0], 2)}


def main() -> None:  # pragma: no cover - development helpers
    """`python -m flows.scale [N_WORKERS]`: run a LocalCluster until Ctrl-C, printing its address.
    `python -m flows.scale bench [N_IMAGES]`: `bench_embed` on MRQA_HOME, printed as JSON."""
    import json
    import sys
    import time
    if sys.argv[1:2] == ["bench"]:
        print(json.dumps(bench_embed(int(sys.argv[2]) if len(sys.argv) > 2 else 1024)), flush=True)
        return
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    with local_cluster(n_workers=n) as cluster:
        print(f"export {ENV_ADDRESS}={cluster.scheduler_address}", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
