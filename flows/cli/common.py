"""What every `mrqa` command module shares: the one-line error exit (also for a value an option does
not accept, and for a warehouse another process holds), comma-separated choices, JSON output, logging
set-up, `--wait` (retry a locked warehouse) and `run_flow` (a stage flow directly, or as a Prefect
flow run with `--prefect` or PREFECT_API_URL)."""
from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import NoReturn, Optional

import typer
from typer.core import TyperGroup

PREFECT_ENV = "MRQA_PREFECT"         # "1": --prefect, "0": --no-prefect, unset: PREFECT_API_URL decides
LOCK_WAIT_ENV = "MRQA_LOCK_WAIT"     # etl.warehouse.LOCK_WAIT_ENV (not imported: duckdb stays unloaded)

# Loggers that are chatty at INFO and drown the pipeline's own lines.
NOISY_LOGGERS = ("httpx", "urllib3", "prefect", "distributed", "PIL")


def fail(msg: str, code: int = 2) -> NoReturn:
    """Print `error: msg` on stderr and leave with `code` (2: bad input or a refused request)."""
    typer.secho(f"error: {msg}", fg="red", err=True)
    raise typer.Exit(code)


def parse_seeds(seeds: str) -> tuple[int, ...]:
    """`--seeds "0,1,2"` as integers; one `error:` line (rc 2) when it is not a non-empty list of them."""
    try:
        out = tuple(int(x) for x in seeds.split(",") if x.strip())
    except ValueError:
        fail(f"--seeds must be comma-separated integers, got {seeds!r}")
    if not out:
        fail("--seeds needs at least one seed")
    bad = [s for s in out if not 0 <= s < 2 ** 32]
    if bad:
        fail(f"--seeds: {bad[0]} is not a seed (0 to 2**32 - 1)")
    if len(set(out)) < len(out):
        fail(f"--seeds: {seeds!r} names a seed twice; each seed is one more model")
    return out


def one_of(values) -> str:
    """'a, b or c': the allowed values as an error message lists them."""
    values = [str(v) for v in values]
    return values[0] if len(values) == 1 else f"{', '.join(values[:-1])} or {values[-1]}"


def bad_value_message(err: typer.BadParameter) -> str:
    """One line for a value an option refused: `--probe must be logreg or svm, got 'tree'` for a
    choice option, `missing --dataset (an option); see --help` for a required one left out, else
    `--recipes: Input should be greater than or equal to 1`."""
    param = err.param
    if param is None:
        return err.message
    long_opts = [o for o in getattr(param, "opts", []) if o.startswith("--")]
    name = long_opts[0] if long_opts else (param.name or "argument").upper()
    if type(err).__name__ == "MissingParameter":           # click's, raised for a required option or argument
        return f"missing {name}" + (" (an option)" if long_opts else " (an argument)") + "; see --help"
    detail = err.message.removeprefix("Value error, ")
    allowed = getattr(getattr(param, "type_descriptor", None), "choices", None)
    if not allowed:
        return f"{name}: {detail}"
    got = re.match(r"(.+?) is not one of ", detail)
    return f"{name} must be {one_of(getattr(c, 'value', c) for c in allowed)}" + (f", got {got[1]}" if got else "")


# click's UsageError (typer vendors click and exports only BadParameter, one of its subclasses)
USAGE_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


def repeated_option(cmd, args: list[str], ctx, path: str) -> str | None:
    """What is wrong when `args` give an option of the command they run (`cmd`, through its sub-groups) more
    than once: a value option twice, or a flag and its other form (Click would keep the last one silently,
    `mrqa generate --knobs 0-0-1-af --knobs 1-0-1-af` making 1-0-1-af alone); None when none is. An option
    that takes several (`multiple`) is left alone."""
    while hasattr(cmd, "get_command"):                 # a group: on to the command it runs
        name = next((a for a in args if not a.startswith("-")), None)
        sub = cmd.get_command(ctx, name) if name is not None else None
        if sub is None:
            return None                                # Click names the missing or unknown command
        args, cmd, path = args[args.index(name) + 1:], sub, f"{path} {name}"
    by_name = {n: p for p in cmd.params if getattr(p, "param_type_name", "") == "option"
               and not p.multiple and not getattr(p, "count", False) for n in [*p.opts, *p.secondary_opts]}
    seen: dict[str, list[str]] = {}
    i = 0
    while i < len(args) and args[i] != "--":
        name, eq, _ = args[i].partition("=")
        p = by_name.get(name) if args[i].startswith("-") else None
        if p is not None:
            takes = 0 if p.is_flag or eq else p.nargs
            seen.setdefault(p.name, []).append(" ".join(args[i:i + 1 + takes]))
            i += takes
        i += 1
    for forms in seen.values():
        if len(forms) > 1:
            return (f"{' and '.join(forms)}: `{path}` takes one of these and would keep only the last; give it "
                    "once (repeat a command to run it for several values)")
    return None


class OneLineErrors(TyperGroup):
    """The root command group: a value an option of any command refuses ends the command with
    one `error: ...` line and rc 2, like every other bad input, instead of a usage box. An option given
    twice (`repeated_option`) is refused the same way, before the command starts."""

    def resolve_command(self, ctx, args):
        name, cmd, rest = super().resolve_command(ctx, args)
        if cmd is not None:
            msg = repeated_option(cmd, rest, ctx, f"mrqa {name}")
            if msg:
                fail(msg)
        return name, cmd, rest

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except typer.BadParameter as err:
            fail(bad_value_message(err))
        except USAGE_ERROR as err:                   # an unknown option or command, an extra argument
            where = err.ctx.command_path if err.ctx is not None else "mrqa"
            fail(f"{err.format_message().rstrip('.')}; see `{where} --help`")
        except OSError as err:
            if err.filename is None:                     # not about a path: a bug's traceback, kept
                raise
            # a path that cannot be read or written (missing, a file where a folder is needed, no
            # permission, a read-only or virtual file system): one line, not a traceback
            fail(f"cannot use {err.filename}: {err.strerror or err}; check the path and its permissions")
        except Exception as err:
            warehouse = sys.modules.get("etl.warehouse")     # loaded whenever a warehouse was opened
            if warehouse is not None and isinstance(err, (warehouse.WarehouseLocked, warehouse.SchemaError)):
                fail(str(err))
            duck = sys.modules.get("duckdb")
            if duck is not None and isinstance(err, duck.IOException):     # e.g. a warehouse file cut short
                fail(f"DuckDB could not read a file ({str(err).splitlines()[0][:200]}); if it is the warehouse, it "
                     "is damaged or cut short: restore it from a copy, or rebuild the home (`mrqa demo`, the pipeline)")
            raise


def require_warehouse() -> None:
    """A command that only reads the warehouse does not create one: a mistyped --home is an error, not a
    fresh empty warehouse reported as zeros."""
    from etl.config import Paths
    wh = Paths.from_env().warehouse
    if not wh.exists():
        fail(f"no warehouse at {wh}; run `mrqa init` (an empty one) or `mrqa demo` first, or check --home")


def check_out_path(option: str, path: Path, want_dir: bool = True) -> Path:
    """Refuse an output path before any work: `option` names it in the one-line error. A folder
    (`want_dir`) must be a folder or not exist yet, and a file must not be a folder; either way no
    existing part of the path above it may be a file. An empty path (the working directory) is refused."""
    if str(path).strip() in ("", "."):
        fail(f"{option}: give a folder to write to, not the working directory")
    from etl.config import file_in_path
    p = Path(path).expanduser()
    blocked = file_in_path(p if want_dir else p.parent)
    if blocked is not None:
        fail(f"{option}: {blocked} is a file, not a folder")
    if not want_dir and p.is_dir():
        fail(f"{option}: {p} is a folder; give a file name")
    return p


def _set_lock_wait(value: float) -> float:
    if value:
        os.environ[LOCK_WAIT_ENV] = repr(float(value))
    return value


def wait_option():
    """`--wait SECONDS` of a command that opens the warehouse: etl.warehouse.connect retries a file
    another process holds for that long (MRQA_LOCK_WAIT), then ends with the one-line lock error."""
    return typer.Option(0.0, "--wait", min=0.0, metavar="SECONDS", envvar=LOCK_WAIT_ENV,
                        callback=_set_lock_wait,
                        help="When another process holds the warehouse (DuckDB allows one writer), retry "
                             "opening it for up to SECONDS instead of failing at once.")


def use_prefect() -> bool:
    """Whether stage commands run as Prefect flow runs: `mrqa --prefect` / `--no-prefect` decide;
    without either, a set PREFECT_API_URL (a server to report to) means yes."""
    chosen = os.environ.get(PREFECT_ENV)
    if chosen in ("0", "1"):
        return chosen == "1"
    return bool(os.environ.get("PREFECT_API_URL"))


def prefect_server_early() -> Callable[[], None]:
    """Start Prefect's temporary server on a thread, so that it boots (a process of its own, about 5 s)
    while the command imports its libraries (about 6 s for the pipeline's) instead of after them. Returns
    the call that waits for it; call it before the first flow run, which then finds the server up. Nothing
    starts when PREFECT_API_URL names a server or the temporary server is off; a failed start is left to
    the flow run, which tries again and reports it."""
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_EPHEMERAL_ENABLED
    if PREFECT_API_URL.value() or not PREFECT_SERVER_EPHEMERAL_ENABLED.value():
        return lambda: None

    def start() -> None:
        from prefect.server.api.server import SubprocessASGIServer
        try:
            SubprocessASGIServer().start()
        except Exception as e:  # noqa: BLE001 - the flow run starts it again and reports a failure
            logging.getLogger(__name__).debug("early start of the temporary Prefect server failed: %s", e)

    thread = threading.Thread(target=start, name="prefect-server-start", daemon=True)
    thread.start()
    return thread.join


def run_flow(flow, *args, **kwargs):
    """Run a stage flow: as a Prefect flow run when `use_prefect()`, else its function directly (no
    temporary Prefect server; its tasks run as plain calls, flows/tasks.py). Same result either way."""
    if use_prefect():
        return flow(*args, **kwargs)
    return flow.fn(*args, **kwargs)


def parse_choices(option: str, text: str, allowed: type[StrEnum]) -> list[str]:
    """The comma-separated values of `option` (e.g. --scorers a,b), each checked against `allowed`; a value
    given twice counts once."""
    values = list(dict.fromkeys(v.strip() for v in text.split(",") if v.strip()))
    bad = [v for v in values if v not in allowed.__members__]
    if bad or not values:
        fail(f"{option} must be a comma-separated list of {one_of(allowed.__members__)}, got {text!r}")
    return values


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
