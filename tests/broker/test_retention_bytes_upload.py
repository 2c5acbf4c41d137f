"""Retention by bytes while an upload commits: a record committed to an object but still in the log cache (the
upload has not marked it yet) is counted once, so retention never trims the stream below `retention.bytes`."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.node import BrokerNode
from broker.partitions.client_messages import InMessage
from broker.partitions.retention import part_bytes


@pytest.fixture
def node(seaweedfs, tmp_path: Path) -> Iterator[BrokerNode]:  # type: ignore[no-untyped-def]
    url = seaweedfs.store_url("mqindex", f"retb-{uuid.uuid4().hex[:8]}")
    n = BrokerNode.open(tmp_path / "node", url, f"sqlite:///{tmp_path}/meta.sqlite", upload_interval_s=3600,
                        maintenance_interval_s=0)
    yield n
    n.close()


def produce(node: BrokerNode, tag: bytes) -> None:
    node.produce("t", [InMessage(tag + b"%03d" % i + b"x" * 1000) for i in range(20)])


def test_an_upload_committing_during_retention_is_counted_once(node: BrokerNode,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    node.create_topic("t", 1)
    storage, meta = node.partitions.storage, node.meta
    produce(node, b"a")
    storage.force_upload()
    sid = node.partitions.get("t", 0).data_stream
    s = meta.get_stream(sid)
    (ref,) = meta.get_objects(sid, s.start_offset, s.end_offset).objects
    part = part_bytes(storage.reader, sid, ref.object_id, ref.kind, ref.size, ref.start, ref.end)  # each upload's
    node.alter_topic_configs("t", {"retention.bytes": 2 * part})  # keeps the two newest uploads
    produce(node, b"b")
    storage.force_upload()
    produce(node, b"c")  # in the log cache only
    get_stream = meta.get_stream
    uploaded: list[bool] = []

    def upload_lands_meanwhile(stream_id: int, refresh: bool = True) -> Any:
        if stream_id == sid and not uploaded:  # the uploader commits "c" while retention looks
            uploaded.append(True)
            storage.force_upload()
        return get_stream(stream_id, refresh)

    monkeypatch.setattr(meta, "get_stream", upload_lands_meanwhile)
    node.run_maintenance()
    monkeypatch.undo()
    assert uploaded
    kept, _ = node.fetch("t", 0, 0, 1000)
    assert {m.value[:1] for m in kept} >= {b"b", b"c"}, "retention trimmed below retention.bytes"
    assert {m.value[:1] for m in kept} == {b"b", b"c"}  # and the oldest upload went
