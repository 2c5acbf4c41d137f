"""The WAL objects a dead source kept for a move (its next owner had not uploaded the range lent from them when
the source was failed over) are deleted once that range is uploaded, after a grace; the moved records stay
readable all along.

Two nodes in this process on one SQLite metadata database, a local object store and a shared WAL in an SQLite
blob store; a node "dies" by no longer renewing its lease nor reconciling."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from broker.cluster import handoff_wal
from broker.partitions.client_messages import InMessage
from broker.streams.object_wal import wal_prefix
from storage_tier import open_store
from tests.cluster.conftest import InProcessNodes


def _until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"not within {timeout}s: {what}"
        time.sleep(0.05)


def test_a_dead_sources_kept_wal_objects_are_deleted_once_the_moved_range_is_uploaded(
        nodes: InProcessNodes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handoff_wal, "KEPT_GRACE_S", 1.0)
    reading = threading.Event()  # the target reads the moved data range from the source's WAL
    release = threading.Event()
    real_load = handoff_wal.load

    def load(store: Any, entry: dict[str, Any], stream_id: int, above: int, *args: Any) -> Any:
        if stream_id == data_stream:  # the target reads the moved data only once the source is failed over
            reading.set()
            assert release.wait(60), "never released"
        return real_load(store, entry, stream_id, above, *args)

    monkeypatch.setattr(handoff_wal, "load", load)
    source = nodes.open(0, shared_wal=True)
    source.create_topic("t", 2)
    values = [b"m%03d-" % i + b"x" * 4000 for i in range(200)]
    for i in range(0, 200, 20):
        source.produce("t", [InMessage(v, partition=0) for v in values[i:i + 20]])
    source.produce("t", [InMessage(b"other", partition=1)])
    data_stream = source.partitions.partition(source.partitions.topic("t"), 0).data_stream
    wal = open_store(f"sqlite:///{nodes.tmp_path}/wal.sqlite")
    try:
        target = nodes.open(1, shared_wal=True)
        assert source.cluster.watcher is not None
        _until(lambda: source.cluster.watcher.lends_to(1), 30, "the target announced it reads lent WAL ranges")
        answer = source.reassign("t", 0, 1)  # lent: nothing uploaded first
        assert answer["to"] == 1 and not answer["unchanged"]
        assert reading.wait(30)
        _until(lambda: target.partition_info("t", 0)["owned"], 30, "the target serves the moved partition")
        assert target.produce("t", [InMessage(b"after", partition=0)])[0].offset == 200
        nodes.dies(source)  # its WAL alone holds offsets 0-199 of partition 0
        _until(lambda: any(f["node"] == 0 for f in target.failovers()), 60, "the source failed over")
        kept = handoff_wal.kept_objects(target.meta, [0])
        assert kept, "the failover kept no WAL object for the move"
        record = target.meta.kv_get(f"{handoff_wal.KEPT_PREFIX}0")
        assert record is not None and set(json.loads(record)["objects"]) == kept
        assert set(wal.list(wal_prefix(0))) == kept  # the rest of the dead source's WAL is deleted
        time.sleep(2 * handoff_wal.KEPT_GRACE_S)
        assert set(wal.list(wal_prefix(0))) == kept  # not deleted while the range is not uploaded

        release.set()  # the target reads the range, uploads it; the doc is dropped, then the objects after grace
        _until(lambda: not wal.list(wal_prefix(0)), 60, "the kept WAL objects deleted")
        assert target.meta.kv_get(f"{handoff_wal.KEPT_PREFIX}0") is None
        assert not target.meta.kv_items(handoff_wal.PREFIX)  # the hand-off doc dropped: the range committed
        messages, _ = target.fetch("t", 0, 0, 500)
        assert [m.value for m in messages] == [*values, b"after"]
        assert [m.offset for m in messages] == list(range(201))
    finally:
        release.set()
        wal.close()

