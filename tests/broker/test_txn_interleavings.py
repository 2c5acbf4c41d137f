"""Hypothesis over interleavings of transactional writes, commits and aborts of several producers on several
partitions, with plain (non-transactional) records among them: a key lookup finds exactly the committed and the
plain records (never an aborted one, nor one of a transaction still open), and a read_committed reader paging
through each partition (the HTTP fetch's `isolation=read_committed`, in pages of any size) reads exactly the
committed and plain records before the first open transaction, in offset order.

The node is real (WAL, stream storage, index, SQLite metadata on a local store); batches and markers go in
through ClientBatches as a Kafka client's produce and the coordinator's markers do."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.config import Settings
from api.http.message_json import Page
from broker.node import BrokerNode
from broker.partitions.kafka_clients import committed_reads, txn_partition
from broker.partitions.records import ProducerRecord, build_batch

PARTITIONS, PRODUCERS = 3, 3

write = st.tuples(st.just("write"), st.integers(0, PRODUCERS - 1), st.integers(0, PARTITIONS - 1), st.integers(1, 3))
plain = st.tuples(st.just("plain"), st.integers(0, PARTITIONS - 1), st.integers(1, 2))
end = st.tuples(st.just("end"), st.integers(0, PRODUCERS - 1), st.booleans())
OPS = st.lists(st.one_of(write, write, plain, end), min_size=1, max_size=30)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerNode]:
    s = Settings(data_dir=str(tmp_path_factory.mktemp("txn-interleavings") / "data")).resolved()
    n = BrokerNode.open(s.data_dir, s.store, s.metadata)
    try:
        yield n
    finally:
        n.close()


def batch(keys: list[str], producer_id: int = -1, sequence: int = -1) -> bytes:
    b = bytearray(build_batch([ProducerRecord(b"v", k.encode(), [], 1) for k in keys]))
    if producer_id >= 0:
        struct.pack_into(">h", b, 21, struct.unpack_from(">h", b, 21)[0] | txn_partition.TRANSACTIONAL)
        struct.pack_into(">qhi", b, 43, producer_id, 0, sequence)
        struct.pack_into(">I", b, 17, crc32c.crc32c(bytes(b[21:])))
    return bytes(b)


def committed_pages(node: BrokerNode, topic: str, partition: int, page: int) -> list[str]:
    """Every key a read_committed reader gets paging from offset 0 until the next offset stops moving."""
    keys: list[str] = []
    offset = 0
    while True:
        built = Page()
        served, next_offset = committed_reads.fetch_rendered(node.partitions, topic, partition, offset, page,
                                                             built.renderer)
        keys += [m["key"] for m in json.loads(bytes(built.body(served, next_offset)))["messages"]]
        if next_offset == offset:
            return keys
        offset = next_offset


_topics = iter(range(1_000_000))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, page=st.integers(1, 7))
def test_lookups_and_read_committed_show_exactly_the_committed_records(node: BrokerNode, ops: list[tuple],
                                                                        page: int) -> None:
    topic = f"txi-{next(_topics)}"
    node.create_topic(topic, PARTITIONS)
    cb, parts = node.client_batches, node.partitions
    part = [parts.partition(parts.topic(topic), i) for i in range(PARTITIONS)]
    pid_base = 1000 * next(_topics) + 1
    sequences: dict[tuple[int, int], int] = {}
    open_keys: dict[int, list[str]] = {i: [] for i in range(PRODUCERS)}
    open_parts: dict[int, set[int]] = {i: set() for i in range(PRODUCERS)}
    shown: set[str] = set()  # committed and plain
    every: list[str] = []
    for n, op in enumerate(ops):
        if op[0] == "write":
            _, who, q, count = op
            keys = [f"{topic}-w{n}-{i}" for i in range(count)]
            seq = sequences.get((who, q), 0)
            cb.append(part[q], batch(keys, pid_base + who, seq))[1].wait()
            sequences[(who, q)] = seq + count
            open_keys[who] += keys
            open_parts[who].add(q)
            every += keys
        elif op[0] == "plain":
            _, q, count = op
            keys = [f"{topic}-p{n}-{i}" for i in range(count)]
            cb.append(part[q], batch(keys))[1].wait()
            shown.update(keys)
            every += keys
        else:
            _, who, commit = op
            for q in sorted(open_parts[who]):
                cb.append_marker(part[q], pid_base + who, 0, commit).result(30)
            if commit:
                shown.update(open_keys[who])
            open_keys[who], open_parts[who] = [], set()

    node.dispatcher.wait_idle(60)
    for k in every:
        found, _ = node.find_by_key(topic, k, 0, None, 10, None)
        assert [m.key for m in found] == ([k.encode()] if k in shown else []), (k, k in shown)

    still_open = {k for keys in open_keys.values() for k in keys}
    for q in range(PARTITIONS):
        stored, _ = node.fetch(topic, q, 0, 10_000)  # read_uncommitted: every record, markers left out
        keyed = [(m.offset, m.key.decode()) for m in stored if m.key is not None]
        assert len(keyed) == len(stored)
        first_open = min([o for o, k in keyed if k in still_open], default=1 << 62)
        expect = [k for o, k in keyed if k in shown and o < first_open]
        assert committed_pages(node, topic, q, page) == expect, (q, first_open)


def test_an_abort_between_two_batches_of_a_committed_transaction(node: BrokerNode) -> None:
    """Two producers' transactions interleaved on one partition, one aborted in the middle of the other."""
    topic = "txi-fixed"
    node.create_topic(topic, 1)
    cb, parts = node.client_batches, node.partitions
    p = parts.partition(parts.topic(topic), 0)
    cb.append(p, batch(["a0"], 7, 0))[1].wait()
    cb.append(p, batch(["b0"], 8, 0))[1].wait()
    cb.append(p, batch(["plain"]))[1].wait()
    cb.append_marker(p, 8, 0, False).result(30)
    cb.append(p, batch(["a1"], 7, 1))[1].wait()
    cb.append_marker(p, 7, 0, True).result(30)
    assert committed_pages(node, topic, 0, 2) == ["a0", "plain", "a1"]
