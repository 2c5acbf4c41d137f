"""The index directory: one folder per lifecycle state and crash-safe moves between them.

    <data_dir>/LOCK          flock: one service per directory
    <data_dir>/writing/      <begin>.mqxu   native unsealed files (the WRITING one and SEALED ones)
    <data_dir>/compacting/   scratch: everything is written here first; cleared on open
    <data_dir>/compacted/    <begin>.mqxc   native compacted files waiting for upload
    <data_dir>/uploaded/     <begin>.json   manifest per uploaded file (store key, size, CRC32C, summary)
    <data_dir>/imported/     <name>.json    RocketMQ files registered read-only by `import-rocketmq`
    <data_dir>/quarantine/   files that failed a check on open, moved aside, never served
    <data_dir>/checkpoint.json  per (topic, queue) highest durably indexed offset

Every publication is: write to compacting/, fsync the file, rename into the target folder (atomic),
fsync the folder. JSON documents carry a CRC32C of their body so a torn or edited one is detected, and may carry
their format version in a "v" beside it: a document without one (every one written so far) is version 1. One of
a later version is refused with `NewerDocument` (naming the file and both versions), which is not a
`DocumentError`: the file is left where it is, never quarantined as damage.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import crc32c

from storage_tier.durability import fsync_dir

log = logging.getLogger("mqindex.index_service.folders")

WRITING, COMPACTING, COMPACTED, UPLOADED, IMPORTED, QUARANTINE = (
    "writing", "compacting", "compacted", "uploaded", "imported", "quarantine")
UNSEALED_EXT, COMPACTED_EXT, MANIFEST_EXT = ".mqxu", ".mqxc", ".json"


DOCUMENT_VERSION = 1  # the newest document format this version reads (it writes version 1, without a "v")


class DocumentError(ValueError):
    """A JSON document (manifest, checkpoint) failed its checksum or could not be parsed."""


class NewerDocument(Exception):
    """A JSON document of a version newer than this version of mqindex reads: not damage (not a ValueError, so no
    caller quarantines it); the file is left untouched and the reader stops with this."""

    def __init__(self, name: str, version: int) -> None:
        self.name = name
        self.version = version
        super().__init__(f"{name}: a document of version {version}, newer than this version of mqindex reads "
                         f"({DOCUMENT_VERSION}): written by a newer version? Left in place; upgrade this node "
                         "(docs/OPERATIONS.md, Upgrading a cluster)")


def file_name(begin_ms: int) -> str:
    """The stem every form of one index file shares: its begin time, zero padded so names sort."""
    return f"{begin_ms:016d}"


def parse_name(stem: str) -> int | None:
    return int(stem) if stem.isdigit() else None


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def encode_document(body: dict[str, Any]) -> bytes:
    payload = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return json.dumps({"crc32c": crc32c.crc32c(payload.encode()), "body": payload}).encode() + b"\n"


def decode_document(name: str, data: bytes) -> dict[str, Any]:
    try:
        outer = json.loads(data)
        version = outer.get("v", 1) if isinstance(outer, dict) else 1
        if type(version) is int and version > DOCUMENT_VERSION:
            raise NewerDocument(name, version)
        payload = outer["body"]
        if crc32c.crc32c(payload.encode()) != outer["crc32c"]:
            raise DocumentError(f"{name}: checksum mismatch")
        body = json.loads(payload)
    except (ValueError, KeyError, TypeError) as exc:
        raise DocumentError(f"{name}: not a valid document ({exc})") from exc
    if not isinstance(body, dict):
        raise DocumentError(f"{name}: document body is not an object")
    return body


class StateFolders:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        for d in (WRITING, COMPACTING, COMPACTED, UPLOADED, IMPORTED, QUARANTINE):
            (self.root / d).mkdir(exist_ok=True)
        self._lock_fd: int | None = None

    # -- paths -----------------------------------------------------------------------------------
    def path(self, folder: str, name: str) -> Path:
        return self.root / folder / name

    def unsealed(self, stem: str) -> Path:
        return self.path(WRITING, stem + UNSEALED_EXT)

    def compacted(self, stem: str) -> Path:
        return self.path(COMPACTED, stem + COMPACTED_EXT)

    def manifest(self, stem: str) -> Path:
        return self.path(UPLOADED, stem + MANIFEST_EXT)

    def scratch(self, name: str) -> Path:
        return self.path(COMPACTING, name)

    @property
    def checkpoint_path(self) -> Path:
        return self.root / "checkpoint.json"

    def listing(self, folder: str, ext: str) -> list[Path]:
        return sorted(p for p in (self.root / folder).iterdir() if p.name.endswith(ext) and p.is_file())

    # -- ownership -------------------------------------------------------------------------------
    def lock(self) -> None:
        fd = os.open(self.root / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RuntimeError(f"{self.root} is in use by another index service (LOCK is held)") from None
        self._lock_fd = fd

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- crash-safe operations -------------------------------------------------------------------
    def clear_scratch(self) -> int:
        n = 0
        for p in (self.root / COMPACTING).iterdir():
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink()
            n += 1
        if n:
            fsync_dir(self.root / COMPACTING)
        return n

    def publish(self, scratch: Path, dest: Path) -> None:
        """scratch (written, not yet fsynced) -> dest atomically: fsync, rename, fsync the folder."""
        fsync_file(scratch)
        os.replace(scratch, dest)
        fsync_dir(dest.parent)

    def write_document(self, dest: Path, body: dict[str, Any]) -> None:
        tmp = self.scratch(f"{dest.name}.{uuid.uuid4().hex[:8]}.tmp")
        with open(tmp, "wb") as f:
            f.write(encode_document(body))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dest)
        fsync_dir(dest.parent)

    def read_document(self, path: Path) -> dict[str, Any]:
        return decode_document(str(path), path.read_bytes())

    def remove(self, path: Path) -> None:
        try:
            path.unlink()
        except FileNotFoundError:
            return
        fsync_dir(path.parent)

    def quarantine(self, path: Path, reason: str, state: str) -> Path:
        """Move a file that failed a check out of the served folders, with an error line naming it."""
        dest = self.path(QUARANTINE, f"{path.name}.{int(time.time())}.{uuid.uuid4().hex[:6]}")
        os.replace(path, dest)
        fsync_dir(path.parent)
        fsync_dir(dest.parent)
        log.error("index file quarantined", extra={"file": str(path), "state": state, "reason": reason,
                                                   "moved_to": str(dest)})
        return dest
