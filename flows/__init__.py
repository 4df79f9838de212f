"""Prefect flows of the pipeline. Importing this package sets safe defaults for an offline machine
(before Prefect is imported): no telemetry, a generous ephemeral-server start-up timeout, offline hub."""
import os

for _k, _v in {
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    "HF_HUB_OFFLINE": "1",
}.items():
    os.environ.setdefault(_k, _v)

if os.environ.get("PREFECT_HOME"):  # Prefect does not create missing parents of its home
    from pathlib import Path as _Path
    _Path(os.environ["PREFECT_HOME"]).expanduser().mkdir(parents=True, exist_ok=True)
