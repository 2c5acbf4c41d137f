"""Helpers of the compaction tests: streams opened by node 0 and stream set objects uploaded directly
through the uploader (no broker process), and a full read of a stream."""

from __future__ import annotations

import os

from broker.metadata.client import MetadataClient
from broker.objects.format import StreamRecord
from broker.streams.stream_reader import StreamReader
from broker.streams.uploader import upload_batch
from storage_tier import BlobStore


def open_streams(meta_url: str, count: int) -> tuple[MetadataClient, list[int]]:
    meta = MetadataClient(meta_url, 0)
    meta.register_node()
    sids = meta.create_streams(count)
    assert all(v is None for v in meta.open_streams([(s, 0) for s in sids]).values())
    return meta, sids


def upload_rounds(store: BlobStore, meta: MetadataClient, sids: list[int], rounds: int, payload: int,
                  so_threshold: int = 1 << 40, after: dict[int, list[StreamRecord]] | None = None
                  ) -> dict[int, list[StreamRecord]]:
    """`rounds` uploads of one record of `payload` random bytes per stream: one SSO each (an SO when there
    is one stream). Offsets continue after the records of `after` (which the result then includes)."""
    written: dict[int, list[StreamRecord]] = {s: list((after or {}).get(s, [])) for s in sids}
    for _ in range(rounds):
        batch = {}
        for s in sids:
            off = written[s][-1].last_offset if written[s] else 0
            batch[s] = [StreamRecord(s, 0, off, 3, os.urandom(payload))]
            written[s] += batch[s]
        upload_batch(batch, store, meta, so_threshold=so_threshold)
    return written


def read_stream(store: BlobStore, meta: MetadataClient, sid: int, start: int = 0) -> list[StreamRecord]:
    end = meta.get_stream(sid).end_offset
    return StreamReader(store, meta).read(sid, start, end, max_bytes=1 << 40)
