"""Controller metadata: a log of records in SQLite or PostgreSQL replayed into an in-memory image."""

from broker.metadata.client import (
    CleanupResult,
    CommitRange,
    MetadataClient,
    StreamObjectCommit,
    StreamSetObjectCommit,
)
from broker.metadata.image import MetadataImage, ObjectLookup, ObjectRef, StreamMeta

__all__ = [
    "CleanupResult", "CommitRange", "MetadataClient", "MetadataImage", "ObjectLookup", "ObjectRef",
    "StreamMeta", "StreamObjectCommit", "StreamSetObjectCommit",
]
