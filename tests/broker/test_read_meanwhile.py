"""A read whose objects are deleted between its lookup and its GET: retention trimmed the range meanwhile (the
reader answers OffsetOutOfRange, as for any read below the stream's start, not damage in the store), or
compaction replaced the objects (the reader looks the range up again and returns the records). Only an object
the metadata still lists is damage. SeaweedFS with SQLite and PostgreSQL metadata; the trim and the compaction
are run by the real maintenance calls, right after the reader's first lookup."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from broker.compaction import CompactionConfig, Compactor
from broker.errors import ObjectFormatError, OffsetOutOfRange
from broker.metadata.client import MetadataClient
from broker.streams.stream_reader import StreamReader
from storage_tier import open_store
from tests.broker.compaction_helpers import open_streams, upload_rounds

FAR_FUTURE_MS = 1 << 50


@pytest.fixture
def store(seaweedfs):  # type: ignore[no-untyped-def]
    s = open_store(seaweedfs.store_url("mqindex", f"meanwhile-{uuid.uuid4().hex[:8]}"))
    yield s
    s.close()


def after_first_lookup(meta: MetadataClient, monkeypatch: pytest.MonkeyPatch, step: Callable[[], Any]) -> None:
    """Run `step` (maintenance) right after the reader's first object lookup returns."""
    real = meta.get_objects
    ran: list[bool] = []

    def lookup(*args: Any, **kw: Any) -> Any:
        found = real(*args, **kw)
        if not ran:
            ran.append(True)
            step()
        return found

    monkeypatch.setattr(meta, "get_objects", lookup)


def test_a_range_trimmed_meanwhile_is_out_of_range_not_damage(
        store, meta_url_factory: Callable[[], str], monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    meta, (sid,) = open_streams(meta_url_factory(), 1)
    written = upload_rounds(store, meta, [sid], rounds=3, payload=2000)  # one object each
    trim_to = written[sid][1].last_offset

    def retention() -> None:
        meta.trim_stream(sid, 0, trim_to)
        meta.cleanup_objects(store, now_ms=FAR_FUTURE_MS)  # the trimmed objects are deleted at once

    after_first_lookup(meta, monkeypatch, retention)
    with pytest.raises(OffsetOutOfRange, match="trimmed meanwhile"):
        StreamReader(store, meta).read(sid, 0, written[sid][-1].last_offset)
    monkeypatch.undo()
    assert StreamReader(store, meta).read(sid, trim_to, written[sid][-1].last_offset) == written[sid][2:]


def test_objects_compacted_meanwhile_are_read_from_their_replacement(
        store, meta_url_factory: Callable[[], str], monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    meta, (sid,) = open_streams(meta_url_factory(), 1)
    written = upload_rounds(store, meta, [sid], rounds=3, payload=2000)

    def compaction() -> None:
        report = Compactor(store, meta, CompactionConfig(interval_s=0, grace_ms=0)).run_once()
        assert not report.errors and report.streams_compacted == 1
        meta.cleanup_objects(store, now_ms=FAR_FUTURE_MS)

    after_first_lookup(meta, monkeypatch, compaction)
    assert StreamReader(store, meta).read(sid, 0, written[sid][-1].last_offset, max_bytes=1 << 30) == written[sid]


def test_an_object_the_metadata_still_lists_is_damage(store, meta_url_factory: Callable[[], str]) -> None:  # type: ignore[no-untyped-def]
    meta, (sid,) = open_streams(meta_url_factory(), 1)
    written = upload_rounds(store, meta, [sid], rounds=2, payload=2000)
    first = meta.get_stream(sid).stream_objects[0].object_id
    store.delete(meta.object_key(first))  # lost from the store, still in the metadata
    with pytest.raises(ObjectFormatError, match="missing object"):
        StreamReader(store, meta).read(sid, 0, written[sid][-1].last_offset)
