"""Share an encoder between homes and machines: one archive of its files and its row in `encoders`.

The default encoder trains on the CPU, and torch's kernels round otherwise under another instruction set
(AVX2, AVX-512), so another machine trains other weights from the same seed and data, and every distance,
dataset and figure follows them. Sharing the weights instead of training again keeps the feature space:
`mrqa encoder export ID --out FILE` writes the archive, `mrqa encoder import FILE` registers the same
encoder (the same id and weights) in another home, where `mrqa embed` and `mrqa pipeline` then use it
rather than training one (the latest registered encoder is the default).

The archive is a plain tar, the same bytes for the same encoder: `encoder.json` (the registry row
without its home-specific path and time, each file's sha256, the format) and the files of
`models/encoders/<id>/`. Import checks every file's sha256 and the weights' against the row before it
registers anything. An encoder registered from a weights file outside the home (`mrqa encoder add
--pretrained`) is not exported: register the same file on the other machine.
"""
from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
from pathlib import Path, PurePosixPath

import duckdb

from etl.config import Paths
from etl.warehouse import utcnow
from features.embed.registry import _store_path, encoder_row, make_encoder_id, register_encoder, resolve_stored_path

FORMAT = "mrqa-encoder/1"
MANIFEST = "encoder.json"
# Registry columns carried over; checkpoint_path is rebuilt in the new home, created_at is the import's.
ROW_COLUMNS = ("encoder_id", "kind", "model_name", "pretrained", "weights_sha256", "preprocess_sha256",
               "dim", "train_split", "config", "metrics")
MAX_FILES = 64


class ShareError(ValueError):
    """An encoder that cannot be exported, or an archive that cannot be imported; the message says why."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def weights_digest(kind: str, blobs: dict[str, bytes], checkpoint: str) -> str:
    """The sha256 an encoder's id names: its checkpoint's bytes, and for a words encoder its axes'
    file followed by its vocabulary (features/embed/words_encoder.py)."""
    if kind == "words":
        return _sha256(blobs.get(checkpoint, b"") + blobs.get("vocabulary.json", b""))
    return _sha256(blobs.get(checkpoint, b""))


def _encoder_dir(row: dict, paths: Paths) -> Path:
    """The encoder's folder in this home: the one its checkpoint lies in, models/encoders/<id>/."""
    ckpt = resolve_stored_path(row["checkpoint_path"] or "", paths)
    folder = (paths.models / "encoders" / row["encoder_id"]).resolve()
    if ckpt.resolve().parent != folder:
        raise ShareError(f"encoder {row['encoder_id']} is registered from {ckpt}, outside this home's "
                         f"models/encoders/: register the same weights file on the other machine "
                         f"(`mrqa encoder add --pretrained FILE`) instead of exporting it")
    if not ckpt.is_file():
        raise ShareError(f"the weights of encoder {row['encoder_id']} are missing ({ckpt}); "
                         f"train or register it again")
    return folder


def export_encoder(con: duckdb.DuckDBPyConnection, paths: Paths, encoder_id: str, out: Path) -> dict:
    """Write encoder `encoder_id`'s archive to `out` (replaced whole); returns what it holds."""
    row = encoder_row(con, encoder_id)
    if row is None:
        known = [r[0] for r in con.execute("SELECT encoder_id FROM encoders ORDER BY 1").fetchall()]
        raise ShareError(f"encoder {encoder_id!r} is not registered (known: {known}); `mrqa encoder list`")
    folder = _encoder_dir(row, paths)
    files = sorted(p for p in folder.iterdir() if p.is_file())
    blobs = {p.name: p.read_bytes() for p in files}
    checkpoint = Path(row["checkpoint_path"]).name
    if checkpoint not in blobs or weights_digest(row["kind"], blobs, checkpoint) != row["weights_sha256"]:
        raise ShareError(f"the weights file of encoder {encoder_id} does not match its registered sha256: "
                         f"it changed after it was registered; train or register it again")
    manifest = {"format": FORMAT, "checkpoint": checkpoint,
                "row": {c: row[c] for c in ROW_COLUMNS},
                "files": {name: _sha256(data) for name, data in blobs.items()}}
    blobs = {MANIFEST: json.dumps(manifest, indent=1, sort_keys=True).encode(), **blobs}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in blobs.items():          # fixed metadata: the same encoder, the same bytes
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    tmp.replace(out)
    return {"encoder_id": encoder_id, "archive": str(out), "files": sorted(blobs),
            "bytes": out.stat().st_size, "kind": row["kind"]}


def read_archive(archive: Path) -> tuple[dict, dict[str, bytes]]:
    """(manifest, {file name: bytes}) of an archive, every file checked against the manifest."""
    try:
        tar = tarfile.open(archive, "r:*")
    except FileNotFoundError:
        raise ShareError(f"no such archive: {archive}") from None
    except tarfile.TarError:                  # its message lists every compression tried, over lines
        raise ShareError(f"{archive} is not an encoder archive (not a tar file); make one with `mrqa "
                         f"encoder export ID --out FILE`") from None
    except OSError as exc:
        raise ShareError(f"cannot read {archive}: {exc.strerror or exc}") from None
    blobs: dict[str, bytes] = {}
    with tar:
        try:
            members = tar.getmembers()
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise ShareError(f"{archive} is cut short or damaged ({exc}); export it again") from None
        if len(members) > MAX_FILES:
            raise ShareError(f"{archive} holds {len(members)} entries; an encoder archive holds a few files")
        for m in members:
            name = PurePosixPath(m.name)
            if not m.isfile() or len(name.parts) != 1 or name.name in ("", ".", ".."):
                raise ShareError(f"{archive} holds {m.name!r}, not a plain file at its top: "
                                 f"not an encoder archive")
            try:
                blobs[m.name] = tar.extractfile(m).read()
            except (tarfile.TarError, OSError, EOFError) as exc:
                raise ShareError(f"{archive} is cut short or damaged ({exc}); export it again") from None
    if MANIFEST not in blobs:
        raise ShareError(f"{archive} has no {MANIFEST}: not an encoder archive")
    try:
        manifest = json.loads(blobs.pop(MANIFEST))
    except ValueError as exc:
        raise ShareError(f"{archive}: {MANIFEST} is not JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ShareError(f"{archive}: format {manifest.get('format') if isinstance(manifest, dict) else None!r}, "
                         f"this mrqa reads {FORMAT!r}")
    listed = manifest.get("files") or {}
    if set(listed) != set(blobs):
        raise ShareError(f"{archive}: its files {sorted(blobs)} are not those its manifest lists {sorted(listed)}")
    for name, data in blobs.items():
        if _sha256(data) != listed[name]:
            raise ShareError(f"{archive}: {name} does not match its sha256; the archive is damaged")
    row, checkpoint = manifest.get("row") or {}, manifest.get("checkpoint")
    missing = [c for c in ROW_COLUMNS if c not in row]
    if missing or checkpoint not in blobs:
        raise ShareError(f"{archive}: the manifest lacks {missing or ['its checkpoint file']}")
    digest = weights_digest(str(row["kind"]), blobs, checkpoint)
    if digest != row["weights_sha256"] or make_encoder_id(
            str(row["model_name"]), digest, str(row["preprocess_sha256"])) != row["encoder_id"]:
        raise ShareError(f"{archive}: the weights are not those of encoder {row['encoder_id']} "
                         f"(its id names the sha256 of its weights)")
    eid = str(row["encoder_id"])
    if not eid or eid != eid.strip() or "/" in eid or eid.startswith("."):
        raise ShareError(f"{archive}: {eid!r} is not an encoder id")
    return manifest, blobs


def import_encoder(con: duckdb.DuckDBPyConnection, paths: Paths, archive: Path,
                   read: tuple[dict, dict[str, bytes]] | None = None) -> dict:
    """Register the archive's encoder in this home (its files in models/encoders/<id>/); `read`: what
    `read_archive(archive)` already returned, so the archive is not read and checked twice. Importing an
    encoder that is already registered with the same weights only makes it the latest again; one with
    the same id and other weights is refused."""
    manifest, blobs = read if read is not None else read_archive(Path(archive))
    row = dict(manifest["row"])
    eid = row["encoder_id"]
    have = encoder_row(con, eid)
    if have is not None and have["weights_sha256"] != row["weights_sha256"]:
        raise ShareError(f"encoder {eid} is registered here with other weights; nothing imported")
    dest = paths.models / "encoders" / eid
    tmp = paths.models / "encoders" / f".import-{eid}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name, data in blobs.items():
        (tmp / name).write_bytes(data)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    row["checkpoint_path"] = _store_path(dest / manifest["checkpoint"], paths)
    row["created_at"] = utcnow()
    register_encoder(con, row)
    return {"encoder_id": eid, "kind": row["kind"], "files": sorted(blobs), "dir": str(dest),
            "already_registered": have is not None}
