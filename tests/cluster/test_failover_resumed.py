"""A survivor that stops in the middle of a failover (the dead node fenced, its partition opened here, its WAL not
replayed yet) and is restarted before its own lease expires finishes that failover at its restart: the dead node's
acknowledged records are served, its WAL objects and the replay record are gone, and the failover is listed. Before,
the restart opened the partition at its committed end as one it leads: the dead node's records, only in its WAL,
were lost, and the replay record stayed (the balancer waits while one exists).

Two nodes in this process on one SQLite metadata database, a local object store and a shared WAL in an SQLite blob
store; the dead node stops renewing its lease, the survivor "crashes" by stopping with its final upload failing (its
streams stay open, as after a kill -9)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from broker.cluster.failover import REPLAYS_PREFIX, Failover
from broker.partitions.client_messages import InMessage
from broker.streams.object_wal import wal_prefix
from storage_tier import open_store
from tests.cluster.conftest import InProcessNodes


def _unreachable(*args: object, **kw: object) -> None:
    raise ConnectionError("the object store did not answer")


def test_a_survivor_stopped_in_the_middle_of_a_failover_finishes_it_at_its_restart(
        nodes: InProcessNodes, monkeypatch: pytest.MonkeyPatch) -> None:
    dead = nodes.open(1, shared_wal=True)
    dead.create_topic("t", 1)  # led by node 1, the only node
    values = [b"v%03d" % i for i in range(50)]
    for i in range(0, 50, 10):
        dead.produce("t", [InMessage(v, key=b"k%d" % (i // 10)) for v in values[i:i + 10]])
    data_stream = dead.partition_info("t", 0)["data_stream"]
    assert dead.meta.get_stream(data_stream).end_offset == 0  # all of it in node 1's WAL only

    survivor = nodes.open(0, shared_wal=True)
    began = threading.Event()
    real_try_finish = Failover._try_finish

    def stops_before_the_replay(self: Failover, node: int) -> dict[str, Any]:
        began.set()  # fenced, the partition opened here; the survivor stops before it reads the dead node's WAL
        return {}

    monkeypatch.setattr(Failover, "_try_finish", stops_before_the_replay)
    nodes.dies(dead)
    assert began.wait(60), "the survivor never began the failover"
    assert survivor.meta.kv_get(f"{REPLAYS_PREFIX}1", refresh=True) is not None
    monkeypatch.setattr(survivor.storage, "flush", _unreachable)  # its final upload fails: the streams stay open
    survivor.close()
    monkeypatch.setattr(Failover, "_try_finish", real_try_finish)

    again = nodes.open(0, shared_wal=True)  # within its lease: nobody failed it over
    wal = open_store(f"sqlite:///{nodes.tmp_path}/wal.sqlite")
    try:
        assert again.partition_info("t", 0)["owned"]
        assert [m.value for m in again.fetch("t", 0, 0, 100)[0]] == values
        assert again.meta.get_stream(data_stream).end_offset == 50  # uploaded before it served
        assert again.meta.kv_get(f"{REPLAYS_PREFIX}1", refresh=True) is None
        assert wal.list(wal_prefix(1)) == []
        (report,) = [f for f in again.failovers() if f["node"] == 1]
        assert report["finished_at_restart"] and report["partitions"] == ["t-0"] and report["replayed_records"] == 50
        assert report["by"] == 0 and report["committed_ends"] == {"t-0": 50}
        assert report["redispatched_from"] == [["t", 0, 0]]  # where the restart re-indexes it from: no index here
        assert sorted(m.value for m in again.find_by_key("t", "k3", 0, None, 100, None)[0]) == values[30:40]
        again.produce("t", [InMessage(b"after", key=b"k0")])
        assert again.fetch("t", 0, 50, 10)[0][0].value == b"after"
    finally:
        wal.close()
