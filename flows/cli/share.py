"""`mrqa encoder export` and `mrqa encoder import`: one archive carries an encoder to another home or machine,
so its datasets are made in the same feature space there instead of one trained again (features/embed/share.py)."""
from __future__ import annotations

from pathlib import Path

import typer

from flows.cli.common import echo_json, fail, wait_option


def encoder_export_cmd(
        encoder: str = typer.Argument(..., help="encoder_id (`mrqa encoder list`)."),
        out: Path = typer.Option(..., "--out", help="The archive to write (a plain tar; replaced whole)."),
        wait: float = wait_option()):
    """Write an encoder's weights, config and registry row to one archive, the same bytes for the same
    encoder. Another home registers it with `mrqa encoder import FILE` and embeds with it instead of
    training its own: on another CPU a trained encoder gets other weights, and so other datasets."""
    if out.is_dir():
        fail(f"--out {out} is a folder; give the archive's file name, e.g. {out / (encoder + '.tar')}")
    from etl.warehouse import connect_reader
    from features.embed.share import ShareError, export_encoder
    con = connect_reader()
    try:
        echo_json(export_encoder(con, _paths(), encoder, out))
    except ShareError as e:
        fail(str(e))
    finally:
        con.close()


def encoder_import_cmd(
        archive: Path = typer.Argument(..., help="An archive `mrqa encoder export` wrote."),
        wait: float = wait_option()):
    """Register the archive's encoder in this home, its files checked against their sha256 first. It
    becomes the latest encoder, so `mrqa embed` and `mrqa pipeline` use it rather than training one.
    Importing it again is safe; an encoder of the same id with other weights is refused."""
    from etl.warehouse import connect
    from features.embed.share import ShareError, import_encoder, read_archive
    try:
        read = read_archive(archive)           # a bad archive is refused before the warehouse is opened
    except ShareError as e:
        fail(str(e))
    con = connect()
    try:
        echo_json(import_encoder(con, _paths(), archive, read))
    except ShareError as e:
        fail(str(e))
    finally:
        con.close()


def _paths():
    from etl.config import Paths
    return Paths.from_env()


def register(encoder_group: typer.Typer) -> None:
    """Add `export` and `import` to the `mrqa encoder` group (flows/cli/embed.py)."""
    encoder_group.command("export")(encoder_export_cmd)
    encoder_group.command("import")(encoder_import_cmd)
