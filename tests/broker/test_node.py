"""BrokerNode end to end on SeaweedFS (objects) and SQLite metadata: produce, fetch, get_by_id, find_by_key
with cursors, bad input, clean restart, retention."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.errors import InvalidField, MessageIdError
from broker.node import BrokerNode
from broker.partitions.client_messages import InMessage
from broker.partitions.records import index_keys
from broker.partitions.topic_errors import InvalidTopicName, PartitionNotFound, TopicExists, TopicNotFound
from storage_tier import open_store

NodeFactory = Callable[..., BrokerNode]


@pytest.fixture
def urls(seaweedfs, tmp_path: Path) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {"store": seaweedfs.store_url("mqindex", f"node-{uuid.uuid4().hex[:8]}"),
            "meta": f"sqlite:///{tmp_path}/meta.sqlite", "dir": str(tmp_path / "node")}


@pytest.fixture
def open_node(urls: dict[str, str]):  # type: ignore[no-untyped-def]
    opened: list[BrokerNode] = []

    def make(**kw: object) -> BrokerNode:
        kw.setdefault("upload_interval_s", 60.0)
        n = BrokerNode.open(urls["dir"], urls["store"], urls["meta"], **kw)  # type: ignore[arg-type]
        opened.append(n)
        return n

    yield make
    for n in opened:
        n.close()


def test_produce_fetch_get_by_id_from_cache_and_objects(open_node: NodeFactory) -> None:
    node = open_node()
    assert node.create_topic("orders", 3) == {"name": "orders", "partitions": 3, "topic_id": 1}
    msgs = [InMessage(b"value-%d" % i, key=b"order-%d" % (i % 7), headers=[("h", b"x%d" % i)]) for i in range(60)]
    produced = node.produce("orders", msgs)
    assert len(produced) == 60
    by_part: dict[int, list[int]] = {}
    for p in produced:
        by_part.setdefault(p.partition, []).append(p.offset)
    for offsets in by_part.values():  # dense Kafka offsets per partition, in request order
        assert offsets == list(range(len(offsets)))
    same_key = {}
    for m, p in zip(msgs, produced, strict=True):  # one key, one partition
        assert same_key.setdefault(m.key, p.partition) == p.partition

    def check_all() -> None:
        for m, p in zip(msgs, produced, strict=True):
            got = node.get_by_id(p.msg_id)
            assert got is not None and (got.value, got.key, got.offset, got.partition) == (m.value, m.key, p.offset,
                                                                                           p.partition)
            assert got.headers == m.headers and got.timestamp == p.timestamp
        for part, offsets in by_part.items():
            out, nxt = node.fetch("orders", part, 0, 1000)
            assert [o.offset for o in out] == offsets and nxt == len(offsets)
            out, nxt = node.fetch("orders", part, 1, 2)
            assert [o.offset for o in out] == [1, 2] and nxt == 3

    check_all()  # from the log cache
    node.flush()
    assert node.cache.size == 0
    node.block_cache.__init__(node.block_cache.max_bytes)  # cold: read the objects
    check_all()  # from objects
    assert node.block_cache.misses > 0 and node.block_cache.hits > 0
    # explicit partition and round robin
    p = node.produce("orders", [InMessage(b"x", partition=2), InMessage(b"y"), InMessage(b"z")])
    assert p[0].partition == 2 and len({q.partition for q in p[1:]}) == 2
    assert node.fetch("orders", 2, 10_000, 5) == ([], 10_000)
    assert node.get_by_id("00000001" + "00000002" + "00000000000fffff") is None
    assert node.get_by_id("000000ff" + "00000000" + "0000000000000000") is None
    assert node.list_topics() == [{"name": "orders", "partitions": 3, "topic_id": 1}]


def test_find_by_key_pages_exact_keys(open_node: NodeFactory) -> None:
    node = open_node()
    node.create_topic("t", 4)
    expected = []
    for i in range(45):  # the same key spread over partitions, some batches sharing one millisecond
        batch = [InMessage(b"v%d-%d" % (i, j), key=b"k%d" % (i * 3 + j), partition=(i + j) % 4,
                           headers=[("KEYS", b"dup other"), ("UNIQ_KEY", b"u%d-%d" % (i, j))]) for j in range(3)]
        for m, r in zip(batch, node.produce("t", batch), strict=True):
            expected.append((r.timestamp, r.offset, r.partition, m.value))
        if i == 20:
            node.flush()  # half of them in objects
    node.produce("t", [InMessage(b"aa", key=b"Aa"), InMessage(b"bb", key=b"BB")])  # Java hash collision
    want = [e[3] for e in sorted(expected, reverse=True)]
    seen: list[bytes] = []
    cursor = None
    pages = 0
    while True:
        page, cursor = node.find_by_key("t", "dup", 0, None, 7, cursor)
        pages += 1
        assert len(page) <= 7
        assert all("dup" in index_keys(m) for m in page)
        seen += [m.value for m in page]  # type: ignore[misc]
        if cursor is None:
            break
    assert seen == want and pages == 20  # 135 messages: 19 full pages + 2, no gaps, no duplicates
    assert [m.value for m in node.find_by_key("t", "Aa", 0, None, 10, None)[0]] == [b"aa"]
    assert [m.value for m in node.find_by_key("t", "BB", 0, None, 10, None)[0]] == [b"bb"]
    one, cur = node.find_by_key("t", "u7-1", 0, None, 10, None)
    assert [m.value for m in one] == [b"v7-1"] and cur is None
    assert node.find_by_key("t", "nothing", 0, None, 10, None) == ([], None)
    # a time window
    t_mid = sorted(expected)[len(expected) // 2][0]
    page, _ = node.find_by_key("t", "dup", 0, t_mid, 1000, None)
    assert [m.value for m in page] == [e[3] for e in sorted(expected, reverse=True) if e[0] <= t_mid]
    page, _ = node.find_by_key("t", "dup", t_mid, None, 1000, None)
    assert [m.value for m in page] == [e[3] for e in sorted(expected, reverse=True) if e[0] >= t_mid]


def test_bad_input(open_node: NodeFactory) -> None:
    node = open_node()
    node.create_topic("ok.topic_1-x", 2)
    with pytest.raises(TopicExists):
        node.create_topic("ok.topic_1-x", 1)
    for bad in ["", "a" * 250, "bad name", "bad/name", "ü", ".", "..", "a#b"]:
        with pytest.raises(InvalidTopicName) as ei:
            node.create_topic(bad, 1)
        assert ei.value.field == "name"
    node.create_topic("a" * 249, 1)
    for parts in (0, -1, 10_001, "3"):
        with pytest.raises(InvalidField) as ei2:
            node.create_topic("fine", parts)  # type: ignore[arg-type]
        assert ei2.value.field == "partitions"
    with pytest.raises(TopicNotFound):
        node.produce("missing", [InMessage(b"x")])
    with pytest.raises(TopicNotFound):
        node.fetch("missing", 0, 0, 1)
    with pytest.raises(TopicNotFound):
        node.find_by_key("missing", "k", 0, None, 1, None)
    for p in (2, -1, 99):
        with pytest.raises(PartitionNotFound):
            node.produce("ok.topic_1-x", [InMessage(b"x", partition=p)])
        with pytest.raises(PartitionNotFound):
            node.fetch("ok.topic_1-x", p, 0, 1)
    with pytest.raises(InvalidField) as ei3:
        node.fetch("ok.topic_1-x", 0, -1, 1)
    assert ei3.value.field == "offset"
    with pytest.raises(InvalidField) as ei3:
        node.fetch("ok.topic_1-x", 0, 0, 0)
    assert ei3.value.field == "max"
    with pytest.raises(InvalidField) as ei3:
        node.produce("ok.topic_1-x", [])
    assert ei3.value.field == "messages"
    with pytest.raises(InvalidField) as ei3:
        node.produce("ok.topic_1-x", [InMessage("text")])  # type: ignore[arg-type]
    assert ei3.value.field == "messages.0.value"
    for cursor in ("???", "bm90IGpzb24", "eyJ2IjoyfQ", ""):
        with pytest.raises(InvalidField) as ei3:
            node.find_by_key("ok.topic_1-x", "k", 0, None, 5, cursor)
        assert ei3.value.field == "cursor"
    for bad_id in ("xyz", "0" * 31, "g" * 32):
        with pytest.raises(MessageIdError):
            node.get_by_id(bad_id)
    # nothing was written by the refused requests
    assert node.fetch("ok.topic_1-x", 0, 0, 10) == ([], 0)


def test_clean_restart_continues_offsets_and_index(open_node: NodeFactory, urls: dict[str, str]) -> None:
    node = open_node()
    node.create_topic("r", 2)
    first = node.produce("r", [InMessage(b"a%d" % i, key=b"key") for i in range(5)])
    node.close()
    node = open_node()
    assert node.unclean_partitions == [] and node.recovered_records == 0
    st = node.partition_info("r", first[0].partition)["state"]
    assert st["clean_shutdown"] is False and st["index_checkpoint"] == 4  # opened again, index caught up
    second = node.produce("r", [InMessage(b"b%d" % i, key=b"key") for i in range(5)])
    assert [p.offset for p in second] == list(range(5, 10))
    page, _ = node.find_by_key("r", "key", 0, None, 100, None)
    assert [m.offset for m in page] == list(range(9, -1, -1))
    assert node.index.skipped_redispatched == 0
    store = open_store(urls["store"])
    try:  # only committed objects are in the store: nothing leaked
        node.meta.catch_up()
        keys = {k for k in store.list("") if not k.startswith("index/")}
        assert keys == {node.meta.object_key(o) for o in node.meta.committed_objects()}
    finally:
        store.close()


def test_a_keyless_partition_is_not_read_again_at_the_next_open(open_node: NodeFactory) -> None:
    """Records without keys put nothing in the index, yet the index's checkpoint of their partition reaches
    its end at a clean close: the next open has nothing to catch up (before, every open re-read the whole
    partition from the store)."""
    from broker.partitions.index_link import catch_up_ranges

    node = open_node()
    node.create_topic("nokeys", 1)
    node.produce("nokeys", [InMessage(b"v%d" % i) for i in range(20)])
    node.produce("nokeys", [InMessage(b"k", key=b"key")] + [InMessage(b"w%d" % i) for i in range(9)])
    node.close()
    node = open_node()
    assert node.partition_info("nokeys", 0)["state"]["index_checkpoint"] == 29
    assert [(c.start, c.end) for c in catch_up_ranges(node.partitions) if c.topic == "nokeys"] == [(30, 30)]
    assert node.dispatcher.redispatched == 0
    page, _ = node.find_by_key("nokeys", "key", 0, None, 10, None)
    assert [m.offset for m in page] == [20]


def test_retention_by_time_and_size_deletes_objects(open_node: NodeFactory, urls: dict[str, str]) -> None:
    node = open_node(retention_bytes=30_000, maintenance_interval_s=0)
    node.create_topic("ret", 1)
    for _ in range(6):  # 6 uploads of ~10 KB: 6 stream objects
        node.produce("ret", [InMessage(b"x" * 1000, key=b"k") for _ in range(10)])
        node.flush()
    objects_before = set(node.meta.committed_objects())
    out = node.run_maintenance()
    start = node.partition_info("ret", 0)["start_offset"]
    assert out["trimmed"] == {"ret-0": start} and 20 <= start <= 40  # keeps >= 30 KB
    assert out["deleted"]  # objects wholly below the start are gone from the store
    store = open_store(urls["store"])
    try:
        for oid in out["deleted"]:
            assert not store.exists(node.meta.object_key(oid))
        assert oid in objects_before
    finally:
        store.close()
    msgs, nxt = node.fetch("ret", 0, 0, 5)
    assert msgs[0].offset == start and nxt == start + 5
    assert node.get_by_id(msgs[0].msg_id) is not None
    page, _ = node.find_by_key("ret", "k", 0, None, 1000, None)  # trimmed hits are skipped, not errors
    assert [m.offset for m in page] == list(range(59, start - 1, -1))
    # by time: everything committed before "now + 1 h" expires
    node.retention = type(node.retention)(retention_ms=1000)
    out = node.run_maintenance(now_ms=page[0].timestamp + 3_600_000)
    assert node.partition_info("ret", 0)["start_offset"] == 60
    assert node.fetch("ret", 0, 0, 5) == ([], 60)
