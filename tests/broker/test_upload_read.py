"""Log cache -> uploader (SO / SSO split, prepare + commit) -> read path, on SeaweedFS and SQLite metadata."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from broker.errors import Fenced
from broker.metadata import MetadataClient
from broker.objects.format import StreamRecord
from broker.partitions.records import ProducerRecord, build_batch, parse_batches
from broker.streams.log_cache import LogCache
from broker.streams.stream_reader import StreamReader
from broker.streams.uploader import upload_batch
from storage_tier import open_store


def _records(sid: int, epoch: int, first: int, n: int, value_size: int, per_batch: int = 5) -> list[StreamRecord]:
    out, off = [], first
    for _ in range(n):
        payload = build_batch([ProducerRecord(bytes([off % 251]) * value_size, b"key-%d" % (off + i))
                               for i in range(per_batch)], base_offset=off)
        out.append(StreamRecord(sid, epoch, off, per_batch, payload))
        off += per_batch
    return out


@pytest.fixture
def env(seaweedfs, tmp_path: Path):  # type: ignore[no-untyped-def]
    store = open_store(seaweedfs.store_url("mqindex", f"upload-{uuid.uuid4().hex[:8]}"))
    meta = MetadataClient(f"sqlite:///{tmp_path}/meta.sqlite", 0, namespace="_kafka_up")
    meta.register_node()
    yield store, meta
    meta.close()
    store.close()


def test_upload_split_commit_and_read(env) -> None:  # type: ignore[no-untyped-def]
    store, meta = env
    big, small1, small2 = (meta.create_stream() for _ in range(3))
    for sid in (big, small1, small2):
        meta.open_stream(sid, 0)
    cache = LogCache()
    data = {big: _records(big, 0, 0, 90, 20_000),  # ~9 MiB -> its own stream object
            small1: _records(small1, 0, 0, 4, 100), small2: _records(small2, 0, 0, 3, 100)}
    for recs in data.values():
        for r in recs:
            cache.append(r)
    res = upload_batch(cache.snapshot(), store, meta)
    assert [o.range.stream_id for o in res.stream_objects] == [big]
    assert res.stream_set_object is not None
    assert [(r.stream_id, r.start, r.end) for r in res.stream_set_object.ranges] == [(small1, 0, 20), (small2, 0, 15)]
    cache.mark_uploaded(res.uploaded)
    assert cache.size == 0
    assert {meta.get_stream(s).end_offset for s in (big, small1, small2)} == {450, 20, 15}
    assert sorted(store.list("")) == sorted(meta.object_key(o) for o in meta.committed_objects())

    reader = StreamReader(store, meta, cache)
    before = store.meter.snapshot()
    got = reader.read(big, 203, 212)
    assert [r.base_offset for r in got] == [200, 205, 210]
    first = store.meter.snapshot() - before
    assert first["GET"] == 2 and first["HEAD"] == 0  # footer+index, then one block
    assert first.bytes_out < 2 * (1 << 20) + 70_000  # a block, not the 9 MiB object
    before = store.meter.snapshot()
    assert [r.base_offset for r in reader.read(big, 300, 305)] == [300]
    assert (store.meter.snapshot() - before)["GET"] == 1  # the index is cached
    assert reader.read(small2, 0, 100) == data[small2]

    # a batch of one stream is only a stream object; a read then spans the SSO and the SO
    more = _records(small1, 0, 20, 3, 100)
    for r in more:
        cache.append(r)
    assert cache.read(small1, 22, 30) == more[:2]  # served from the cache before upload
    res2 = upload_batch(cache.snapshot(), store, meta)
    assert res2.stream_set_object is None and [o.range.start for o in res2.stream_objects] == [20]
    cache.mark_uploaded(res2.uploaded)
    got = reader.read(small1, 0, 35)
    assert got == data[small1] + more
    keys = [k for r in got for b in parse_batches(r.payload) for k in (rec.key for rec in b.records)]
    assert keys == [b"key-%d" % i for i in range(35)]


def test_failed_commit_leaks_nothing(env) -> None:  # type: ignore[no-untyped-def]
    store, meta = env
    sid = meta.create_stream()
    meta.open_stream(sid, 0)
    meta.close_stream(sid, 0)  # moved away: this node may no longer commit
    batch = {sid: _records(sid, 0, 0, 2, 100)}
    with pytest.raises(Fenced):
        upload_batch(batch, store, meta, ttl_ms=5000)
    assert store.list("") == []  # uploaded, refused at the commit: deleted at once
    prepared = [o for o in meta.image.objects.values() if o.state == "PREPARED"]
    r = meta.cleanup_objects(store, now_ms=prepared[0].expires_at)
    assert r.deleted == [prepared[0].object_id]
    assert store.list("") == []
