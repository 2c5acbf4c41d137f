"""What the service reports about its files: FileState (the lifecycle) and FileInfo."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class FileState(enum.StrEnum):
    WRITING = "WRITING"  # the one unsealed local file puts go to
    SEALED = "SEALED"  # full or rolled, still in writing/, waiting for compaction
    COMPACTED = "COMPACTED"  # rearranged, local, waiting for upload
    UPLOADED = "UPLOADED"  # on the BlobStore; local copy removed, manifest in uploaded/
    EXPIRED = "EXPIRED"  # past retention: deleted from the store and the disk
    IMPORTED = "IMPORTED"  # a RocketMQ tiered index file registered read-only


@dataclass(frozen=True)
class FileInfo:
    name: str
    state: FileState
    begin_ms: int  # the file's begin (creation) time; strictly increasing across files
    end_ms: int | None  # newest store time in the file (None while empty)
    items: int
    location: str  # local path, or store key for uploaded files
    min_ms: int | None = None  # oldest store time in the file (may precede begin_ms: dispatch lag)
    size_bytes: int = 0
    exact: bool = True  # False for RocketMQ files (hash-only hits)
