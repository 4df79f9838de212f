"""What every `mrqa` command module shares: the one-line error exit, JSON output and logging set-up."""
from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import NoReturn, Optional

import typer

# Loggers that are chatty at INFO and drown the pipeline's own lines.
NOISY_LOGGERS = ("httpx", "urllib3", "prefect", "distributed", "PIL")


def fail(msg: str, code: int = 2) -> NoReturn:
    """Print `error: msg` on stderr and leave with `code` (2: bad input or a refused request)."""
    typer.secho(f"error: {msg}", fg="red", err=True)
    raise typer.Exit(code)


def echo_json(obj) -> None:
    """Print `obj` as indented JSON (dates and paths as strings)."""
    typer.echo(json.dumps(obj, indent=2, ensure_ascii=False, default=str))


def setup_logging(home: Optional[Path], verbose: bool = False) -> None:
    """Point MRQA_HOME at `home` (when given) and log to stderr, DEBUG with `verbose`, else INFO."""
    if home is not None:
        os.environ["MRQA_HOME"] = str(home)
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    for noisy in NOISY_LOGGERS:
        logging.getLogger(noisy).setLevel(logging.WARNING)


def package_version() -> str:
    """The installed version of the meta-recipeqa distribution ("unknown" when it is not installed)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("meta-recipeqa")
    except PackageNotFoundError:
        return "unknown"
