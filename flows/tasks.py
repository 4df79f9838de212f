"""Run a stage's Prefect tasks the same way inside and outside a flow run: as task runs while a flow
run is active (a `--prefect` command, a deployment, the pipeline's subflows), as plain function calls
when a command runs the flow's function directly (`flow.fn`, the default without PREFECT_API_URL), so
no temporary Prefect server starts."""
from __future__ import annotations

from prefect.context import FlowRunContext


def in_flow_run() -> bool:
    """Whether this code runs inside a Prefect flow run."""
    return FlowRunContext.get() is not None


def run_task(task, *args, **kwargs):
    """`task(...)` (a task run with its retries) inside a flow run, else `task.fn(...)`."""
    if in_flow_run():
        return task(*args, **kwargs)
    return task.fn(*args, **kwargs)
