"""A metadata commit whose outcome the caller does not learn: the transaction is applied, then the connection is
lost before the answer (PostgreSQL's COMMIT went through, the client got an error). Compaction must not delete
objects such a commit made the stream's; the uploader must find its records committed and let the cache drain,
rather than upload them again and be refused for good. A commit the metadata refuses leaves nothing in the store.

SeaweedFS and real SQLite / PostgreSQL metadata; the lost answer is injected at the metadata log's transaction."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from api.config import Settings
from broker.compaction import CompactionConfig, Compactor
from broker.errors import InvalidRequest
from broker.metadata.client import MetadataClient
from broker.node import BrokerNode
from broker.objects.format import StreamRecord
from broker.partitions.client_messages import InMessage
from broker.streams.uploader import upload_batch
from storage_tier import open_store
from tests.broker.compaction_helpers import open_streams, read_stream, upload_rounds

FAR_FUTURE_MS = 1 << 50


@pytest.fixture
def store(seaweedfs):  # type: ignore[no-untyped-def]
    s = open_store(seaweedfs.store_url("mqindex", f"outcome-{uuid.uuid4().hex[:8]}"))
    yield s
    s.close()


@contextlib.contextmanager
def answer_lost(meta: MetadataClient, record_type: str) -> Iterator[dict[str, bool]]:
    """The next transaction appending a `record_type` record is applied, then raises as a lost connection."""
    real = meta.log.locked
    state = {"armed": True, "lost": False}

    @contextlib.contextmanager
    def locked() -> Iterator[Any]:
        appended: list[dict[str, Any]] = []
        with real() as txn:
            append = txn.append

            def recording(first: int, records: list[dict[str, Any]]) -> str | None:
                appended.extend(records)
                return append(first, records)

            txn.append = recording  # type: ignore[method-assign]
            yield txn
        if state["armed"] and any(r.get("type") == record_type for r in appended):
            state["armed"], state["lost"] = False, True
            raise ConnectionError("server closed the connection unexpectedly (the transaction was committed)")

    meta.log.locked = locked  # type: ignore[method-assign]
    try:
        yield state
    finally:
        meta.log.locked = real  # type: ignore[method-assign]


def object_keys(store, meta: MetadataClient) -> set[str]:  # type: ignore[no-untyped-def]
    return {k for k in store.list() if k.split("/")[1] == meta.namespace}


def test_stream_object_compaction_keeps_outputs_a_lost_answer_committed(
        store, meta_url_factory: Callable[[], str]) -> None:  # type: ignore[no-untyped-def]
    meta, sids = open_streams(meta_url_factory(), 1)
    written = upload_rounds(store, meta, sids, rounds=3, payload=2000)  # one stream object each
    with answer_lost(meta, "compaction") as lost:
        report = Compactor(store, meta, CompactionConfig(interval_s=0, grace_ms=0)).run_once()
    assert lost["lost"] and any("ConnectionError" in e for e in report.errors)
    meta.catch_up()
    assert len(meta.get_stream(sids[0]).stream_objects) == 1  # the compaction was applied
    meta.cleanup_objects(store, now_ms=FAR_FUTURE_MS)  # the sources go once their grace period is over
    assert read_stream(store, meta, sids[0]) == written[sids[0]]


def test_an_upload_refused_after_its_ids_expired_leaves_nothing_in_the_store(
        store, meta_url_factory: Callable[[], str], monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """A slow upload outlives its prepared ids: cleanup expires them (deleting keys not written yet) before the
    object lands; the commit is then refused, and the object must not stay in the store with no metadata."""
    meta, sids = open_streams(meta_url_factory(), 2)
    upload_rounds(store, meta, sids, rounds=1, payload=500)
    before = object_keys(store, meta)
    put = store.put
    slow: list[str] = []

    def put_after_cleanup(key: str, data: bytes) -> None:
        slow.append(key)
        meta.cleanup_objects(store, now_ms=FAR_FUTURE_MS)  # ran by maintenance while the upload was slow
        put(key, data)

    monkeypatch.setattr(store, "put", put_after_cleanup)
    batch = {s: [StreamRecord(s, 0, 3, 3, b"x" * 500)] for s in sids}
    with pytest.raises(InvalidRequest, match="not PREPARED"):
        upload_batch(batch, store, meta)
    monkeypatch.undo()
    assert slow, "the upload did not put its object"
    assert object_keys(store, meta) == before


@pytest.fixture
def node(tmp_path: Path, seaweedfs) -> Iterator[BrokerNode]:  # type: ignore[no-untyped-def]
    s = Settings(data_dir=str(tmp_path / "data"),
                 store=seaweedfs.store_url("mqindex", f"outcome-node-{uuid.uuid4().hex[:8]}")).resolved()
    n = BrokerNode.open(s.data_dir, s.store, s.metadata, upload_interval_s=3600)
    n.create_topic("t", 1)
    yield n
    n.close()


def test_an_upload_whose_commit_answer_was_lost_drains_the_cache(node: BrokerNode) -> None:
    storage = node.partitions.storage
    node.produce("t", [InMessage(b"v%d" % i, key=b"k") for i in range(5)])
    with answer_lost(storage.meta, "commit") as lost, pytest.raises(ConnectionError):
        storage.force_upload()
    assert lost["lost"] and storage.cache.size > 0
    storage.force_upload()  # finds the records committed: no second upload, the cache drains
    assert storage.cache.size == 0
    node.produce("t", [InMessage(b"after", key=b"k")])
    storage.force_upload()
    messages, _ = node.fetch("t", 0, 0, 100)
    assert [(m.offset, m.value) for m in messages] == [(i, b"v%d" % i) for i in range(5)] + [(5, b"after")]
