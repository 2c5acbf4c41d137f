"""A rolling upgrade from 0.3.0: stream records with their append time (magic 0x23) are written only once every
live node announces it reads them. A 0.3.0 node registers its lease without an announcement (it has no
`software` column to fill) and cannot read those records: while one is live, the new nodes write magic 0x22
records (the 0.3.0 format); once it is gone (or upgraded), 0x23 again.

One node in this process on SQLite metadata; the 0.3.0 node is its lease row, registered and renewed as 0.3.0
does (LeaseTable.register without `software`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from broker.cluster.membership import TIMED_STREAM_RECORDS
from broker.metadata.leases import LeaseTable
from broker.node import BrokerNode
from broker.partitions.client_messages import InMessage
from tests.cluster.conftest import InProcessNodes

LEASE_MS = 1000
OLD = 7  # the 0.3.0 node's id


class OldNode:
    """A live 0.3.0 node's lease: registered without an announcement and renewed every 0.2 s."""

    def __init__(self, table: LeaseTable) -> None:
        self.table = table
        table.register(OLD, 1, "http://127.0.0.1:9", None, LEASE_MS)
        self._stop = threading.Event()
        self._renewing = threading.Thread(target=self._renew, daemon=True)
        self._renewing.start()

    def _renew(self) -> None:
        while not self._stop.wait(0.2):
            self.table.heartbeat(OLD, 1, LEASE_MS)

    def stop(self) -> None:
        """A clean stop (to be upgraded): renewals end and the lease is marked shut down."""
        self._stop.set()
        self._renewing.join()
        self.table.shut_down(OLD, 1)


@pytest.fixture
def old_node(nodes: InProcessNodes) -> Iterator[OldNode]:
    table = LeaseTable(nodes.meta)
    node = OldNode(table)
    try:
        yield node
    finally:
        node.stop()
        table.close()


def appended_with_time(node: BrokerNode) -> bool | None:
    """Whether the newest record of t-0 carries its append time (magic 0x23)."""
    p = node.partitions.get("t", 0)
    assert p.data is not None
    end = p.data.confirmed_end
    recs = list(node.storage.read(p.data_stream, end - 1, end))
    return recs[-1].append_ms is not None


def wait_for(what: str, check: object) -> None:
    deadline = time.monotonic() + 30
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_records_keep_the_old_format_while_a_0_3_0_node_is_live(nodes: InProcessNodes,
                                                                 old_node: OldNode) -> None:
    new = nodes.open(0, lease_ms=LEASE_MS)
    new.create_topic("t", 1)
    m = new.cluster.membership
    wait_for("the new node did not see the 0.3.0 node", lambda: not m.reads_everywhere(TIMED_STREAM_RECORDS))
    new.produce("t", [InMessage(b"beside 0.3.0", key=b"k")])
    assert appended_with_time(new) is False, "a 0x23 record was written while a 0.3.0 node is live"
    nodes_view = {n["node_id"]: n["version"] for n in new.cluster.nodes()}
    assert nodes_view[OLD] is None and nodes_view[0] is not None

    old_node.stop()  # the 0.3.0 node stops to be upgraded
    wait_for("the new node still writes the old format", lambda: m.reads_everywhere(TIMED_STREAM_RECORDS))
    new.produce("t", [InMessage(b"all upgraded", key=b"k")])
    assert appended_with_time(new) is True
    assert [x.value for x in new.fetch("t", 0, 0, 10)[0]] == [b"beside 0.3.0", b"all upgraded"]


def test_an_announcement_of_an_earlier_incarnation_does_not_count(nodes: InProcessNodes) -> None:
    """A node upgraded, then started again on 0.3.0 (a rollback): 0.3.0 leaves the column as it was, and the
    announcement names the epoch it was made at, so the 0.3.0 incarnation (a newer epoch) announces nothing."""
    table = LeaseTable(nodes.meta)
    try:
        table.register(3, 1, None, None, 60_000, {"version": "0.4.0", "reads": [TIMED_STREAM_RECORDS]})
        assert next(n for n in table.nodes() if n.node_id == 3).reads(TIMED_STREAM_RECORDS)
        # 0.3.0's register, word for word: it does not name the software column, which keeps epoch 1's
        table._sql(f"INSERT INTO node_leases (node_id, epoch, http, kafka, expires_ms, state) "
                   f"VALUES (?, ?, ?, ?, {table._now} + ?, 'alive') ON CONFLICT (node_id) DO UPDATE SET "
                   f"epoch = excluded.epoch, http = excluded.http, kafka = excluded.kafka, "
                   f"expires_ms = excluded.expires_ms, state = 'alive' WHERE node_leases.epoch <= excluded.epoch",
                   (3, 2, None, None, 60_000))
        row = next(n for n in table.nodes() if n.node_id == 3)
        assert row.epoch == 2 and table._sql("SELECT software FROM node_leases WHERE node_id = 3").fetchone()[0]
        assert not next(n for n in table.nodes() if n.node_id == 3).reads(TIMED_STREAM_RECORDS)
    finally:
        table.close()
