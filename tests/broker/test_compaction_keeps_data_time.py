"""Compaction keeps the commit time of the data it rewrites: a quiet stream's old data, merged over and over with
newer data of streams that share its stream set objects, still expires by `retention.ms` (before, every merge
stamped it with the merge's time, so it never looked old enough). The time survives a metadata snapshot."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest

from broker.compaction import CompactionConfig, Compactor
from broker.metadata.client import MetadataClient
from broker.metadata.snapshot import _build, checksum, decode, encode, image_state
from broker.objects.format import StreamRecord
from broker.partitions.retention import RetentionPolicy, retention_start
from broker.streams.uploader import upload_batch
from storage_tier import open_store
from tests.broker.compaction_helpers import open_streams, read_stream


@pytest.fixture
def store(seaweedfs):  # type: ignore[no-untyped-def]
    s = open_store(seaweedfs.store_url("mqindex", f"cmpt-{uuid.uuid4().hex[:8]}"))
    yield s
    s.close()


def first_commit_ms(meta: MetadataClient, sid: int) -> int:
    s = meta.get_stream(sid)
    (ref,) = meta.get_objects(sid, s.start_offset, s.end_offset).objects
    t = meta.image.objects[ref.object_id].committed_at
    assert t is not None
    return t


def test_a_quiet_streams_data_merged_again_and_again_still_expires(
        store, meta_url_factory: Callable[[], str]) -> None:  # type: ignore[no-untyped-def]
    meta, (quiet, busy, other) = open_streams(meta_url_factory(), 3)
    ends = {quiet: 0, busy: 0, other: 0}

    def upload(sids: list[int]) -> None:
        batch = {s: [StreamRecord(s, 0, ends[s], 2, b"p" * 300)] for s in sids}
        for s in sids:
            ends[s] += 2
        upload_batch(batch, store, meta)

    upload([quiet, busy])
    written_at = first_commit_ms(meta, quiet)
    compactor = Compactor(store, meta, CompactionConfig(interval_s=0, grace_ms=0))
    for _ in range(3):
        deadline = time.monotonic() + 5
        while int(time.time() * 1000) <= written_at + 5:  # each merge happens after the quiet data's commit
            assert time.monotonic() < deadline
            time.sleep(0.002)
        upload([busy, other])
        report = compactor.run_once()
        assert not report.errors and report.merged >= 2
    s = meta.get_stream(quiet)
    (ref,) = meta.get_objects(quiet, s.start_offset, s.end_offset).objects
    assert meta.image.objects[ref.object_id].committed_at > written_at + 5  # rewritten by the merges
    assert meta.image.part_time(ref.object_id, quiet) == written_at
    retention_ms = 60_000
    just_after = written_at + 1 + retention_ms  # the quiet data is older than retention.ms, the merges are not
    policy = RetentionPolicy(retention_ms=retention_ms)
    assert retention_start(meta, None, quiet, lambda end: 0, policy, just_after) == ends[quiet]  # type: ignore[arg-type]
    assert retention_start(meta, None, busy, lambda end: 0, policy, just_after) < ends[busy]  # type: ignore[arg-type]
    again = _build(image_state(meta.image))  # as a node starting from a snapshot sees it
    assert again.part_time(ref.object_id, quiet) == written_at
    assert image_state(again) == image_state(meta.image)
    assert [r.base_offset for r in read_stream(store, meta, quiet)] == [0]
    # retention trims the quiet stream out of the merged object: its data time goes with its part, and the
    # metadata snapshot of that image loads (a leftover time made every later snapshot unloadable)
    meta.trim_stream(quiet, 0, ends[quiet])
    payload = encode(meta.image)
    loaded = decode(payload, checksum(payload), "test")
    assert image_state(loaded) == image_state(meta.image)
    assert all(quiet not in o.data_at for n in loaded.nodes.values() for o in n.sso.values())
