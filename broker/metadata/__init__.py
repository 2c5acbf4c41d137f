"""Controller metadata: a log of records in SQLite or PostgreSQL replayed into an in-memory image."""

from broker.metadata.client import MetadataClient
from broker.metadata.image import MetadataImage, ObjectLookup, ObjectRef, StreamMeta
from broker.metadata.requests import (
    CleanupResult,
    CommitRange,
    SnapshotResult,
    StreamObjectCommit,
    StreamSetObjectCommit,
)
from broker.metadata.snapshot import SnapshotDamaged

__all__ = [
    "CleanupResult", "CommitRange", "MetadataClient", "MetadataImage", "ObjectLookup", "ObjectRef",
    "SnapshotDamaged", "SnapshotResult", "StreamMeta", "StreamObjectCommit", "StreamSetObjectCommit",
]
