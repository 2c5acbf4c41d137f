"""Uploader: turns one batch of cached stream records into objects and commits them through the metadata.

A stream with at least `so_threshold` bytes in the batch becomes a Stream Object (SO); the rest share one
Stream Set Object (SSO) sorted by stream id; a batch of a single stream is only an SO. Object ids are
prepared first (PREPARED, with an expiry), the objects written, then committed in one metadata
transaction; a failure before the commit aborts the uploads and leaves the prepared ids to expire. A commit
the metadata refuses deletes the objects written (their ids may have expired and been cleaned up meanwhile,
and nothing else would find them); any other commit failure leaves them, as the commit may have been applied
(a connection lost at COMMIT): StreamStorage.force_upload finds out from the metadata.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.errors import MetadataError
from broker.metadata.client import MetadataClient
from broker.metadata.requests import CommitRange, StreamObjectCommit, StreamSetObjectCommit
from broker.objects.format import DEFAULT_BLOCK_SIZE, StreamRecord
from broker.objects.writer import ObjectWriter
from storage_tier import BlobStore

DEFAULT_SO_THRESHOLD = 8 << 20


@dataclass(frozen=True)
class UploadResult:
    stream_objects: list[StreamObjectCommit]
    stream_set_object: StreamSetObjectCommit | None
    uploaded: dict[int, int]  # stream id -> end offset now in object storage


def upload_batch(batch: dict[int, list[StreamRecord]], store: BlobStore, meta: MetadataClient, *,
                 so_threshold: int = DEFAULT_SO_THRESHOLD, block_size: int = DEFAULT_BLOCK_SIZE,
                 ttl_ms: int = 10 * 60 * 1000) -> UploadResult:
    batch = {sid: recs for sid, recs in sorted(batch.items()) if recs}
    if not batch:
        return UploadResult([], None, {})
    if len(batch) == 1:
        so_streams = list(batch)
    else:
        so_streams = [sid for sid, recs in batch.items() if sum(len(r.payload) for r in recs) >= so_threshold]
    rest = [sid for sid in batch if sid not in so_streams]
    first = meta.prepare_objects(len(so_streams) + (1 if rest else 0), ttl_ms=ttl_ms)

    def crange(recs: list[StreamRecord]) -> CommitRange:
        return CommitRange(recs[0].stream_id, recs[-1].epoch, recs[0].base_offset, recs[-1].last_offset)

    writers: list[ObjectWriter] = []
    try:
        sos = []
        for i, sid in enumerate(so_streams):
            w = ObjectWriter(store, meta.object_key(first + i), block_size=block_size)
            writers.append(w)
            for r in batch[sid]:
                w.write(r)
            info = w.close()
            sos.append(StreamObjectCommit(first + i, info.size, crange(batch[sid])))
        sso = None
        if rest:
            oid = first + len(so_streams)
            w = ObjectWriter(store, meta.object_key(oid), block_size=block_size)
            writers.append(w)
            for sid in rest:
                for r in batch[sid]:
                    w.write(r)
            info = w.close()
            sso = StreamSetObjectCommit(oid, info.size, [crange(batch[sid]) for sid in rest])
    except BaseException:
        for w in writers:
            w.abort()
        raise
    try:
        meta.commit_objects(sso=sso, stream_objects=sos)
    except MetadataError:
        store.delete([meta.object_key(c.object_id) for c in [*sos, *([sso] if sso else [])]])
        raise
    return UploadResult(sos, sso, {sid: recs[-1].last_offset for sid, recs in batch.items()})
