"""Retention with an injected clock: the index follows the data. Per-topic `retention.ms`; files whose
every range is trimmed leave the store; skewed producer timestamps do not scatter or expire entries."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from broker.errors import InvalidField
from broker.node import BrokerNode
from broker.partitions.client_messages import InMessage
from broker.partitions.topic_errors import TopicNotFound
from storage_tier import open_store

DAY = 86_400_000
HOUR = 3_600_000


class Clock:
    def __init__(self) -> None:
        self.ms = time.time_ns() // 1_000_000

    def __call__(self) -> int:
        return self.ms


@pytest.fixture
def node_and_clock(seaweedfs, tmp_path: Path, request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """A node on a clock the test moves; index files are not merged unless the test is marked `merging`."""
    clock = Clock()
    url = seaweedfs.store_url("mqindex", f"ret-{uuid.uuid4().hex[:8]}")
    merging = request.node.get_closest_marker("merging") is not None
    node = BrokerNode.open(tmp_path / "node", url, f"sqlite:///{tmp_path}/meta.sqlite", upload_interval_s=60.0,
                           maintenance_interval_s=0, clock=clock,
                           index_config={"maintain_interval_s": 0, "roll_age_ms": HOUR,
                                         **({} if merging else {"merge_tiers_ms": ()})})
    try:
        yield node, clock, url
    finally:
        node.close()


def produce_keys(node: BrokerNode, topic: str, n: int) -> list[str]:
    produced = node.produce(topic, [InMessage(b"v%d" % i, key=b"%s-%d" % (topic.encode(), i)) for i in range(n)])
    return [p.msg_id for p in produced]


def test_index_follows_data_four_days_later(node_and_clock) -> None:  # type: ignore[no-untyped-def]
    node, clock, url = node_and_clock
    node.create_topic("short", 2, {"retention.ms": 2 * DAY})
    node.create_topic("keep", 2)
    assert node.describe_topic("short")["configs"]["retention.ms"] == {"value": 2 * DAY, "source": "topic"}
    assert node.describe_topic("keep")["configs"]["retention.ms"] == {"value": -1, "source": "default"}
    short_ids = produce_keys(node, "short", 40)
    node.flush()  # the short topic's records alone in their objects
    node.sync_index()
    node.index.roll()  # the short topic's entries alone in one file
    keep_ids = produce_keys(node, "keep", 40)
    node.flush()
    node.sync_index()
    node.index.roll()
    node.index.maintain()  # compact and upload both files
    files = {f.name: f for f in node.index.files()}
    uploaded = [f for f in files.values() if f.state.value == "UPLOADED"]
    assert len(uploaded) == 2
    store = open_store(url)
    try:
        assert all(store.exists(f.location) for f in uploaded)
        clock.ms += 4 * DAY  # four days later
        # before the broker trims: all still found (the old fixed 72 h index retention would have lost them)
        rep = node.index.maintain()
        assert rep.expired == []
        assert len(node.find_by_key("short", "short-3", 0, None, 10, None)[0]) == 1
        out = node.run_maintenance()
        assert set(out["trimmed"]) == {"short-0", "short-1"}
        rep = node.index.maintain()
        assert len(rep.expired) == 1  # the short topic's file: every range in it trimmed
        gone = [f for f in uploaded if f.name in rep.expired][0]
        assert not store.exists(gone.location)
        kept = [f for f in uploaded if f.name not in rep.expired][0]
        assert store.exists(kept.location)
        assert [f.name for f in node.index.files() if f.items] == [kept.name]
    finally:
        store.close()
    # the kept topic: found by key, id and offset, four days after it was produced
    for i in range(40):
        page, _ = node.find_by_key("keep", f"keep-{i}", 0, None, 10, None)
        assert [m.value for m in page] == [b"v%d" % i]
        m = node.get_by_id(keep_ids[i])
        assert m is not None and m.value == b"v%d" % i
        assert node.fetch("keep", m.partition, m.offset, 1)[0][0].value == m.value
    # the trimmed topic: no data, no index entry, no query answer
    for i in range(40):
        assert node.find_by_key("short", f"short-{i}", 0, None, 10, None) == ([], None)
        assert node.index.query("short", f"short-{i}") == []
        assert node.get_by_id(short_ids[i]) is None
    for p in range(2):
        assert node.fetch("short", p, 0, 10)[0] == []


@pytest.mark.merging
def test_a_merged_file_answers_only_for_the_data_still_stored(node_and_clock) -> None:  # type: ignore[no-untyped-def]
    """Merged with a topic kept longer, a trimmed topic's entries stay in the merged file but are never answered."""
    node, clock, _url = node_and_clock
    node.create_topic("short", 2, {"retention.ms": 2 * DAY})
    node.create_topic("keep", 2)
    short_ids = produce_keys(node, "short", 40)
    keep_ids = produce_keys(node, "keep", 40)
    for _ in range(2):  # two files, so that a closed day holds enough to merge
        node.flush()
        node.sync_index()
        node.index.roll()
        node.index.maintain()
        node.produce("keep", [InMessage(b"filler", key=b"filler")])
    clock.ms += 4 * DAY
    rep = node.index.maintain()
    assert rep.merged, rep  # one day file now holds both topics
    assert len(node.index.query("short", "short-3")) == 1
    assert set(node.run_maintenance()["trimmed"]) == {"short-0", "short-1"}
    rep = node.index.maintain()
    assert rep.expired == []  # the merged file still holds the kept topic
    for i in range(40):
        assert node.index.query("short", f"short-{i}") == []
        assert node.find_by_key("short", f"short-{i}", 0, None, 10, None) == ([], None)
        assert node.get_by_id(short_ids[i]) is None
        page, _ = node.find_by_key("keep", f"keep-{i}", 0, None, 10, None)
        assert [m.msg_id for m in page] == [keep_ids[i]]


def test_alter_topic_retention_and_bad_configs(node_and_clock) -> None:  # type: ignore[no-untyped-def]
    node, clock, _ = node_and_clock
    node.create_topic("t", 1)
    produce_keys(node, "t", 10)
    node.flush()
    clock.ms += 3 * DAY
    assert node.run_maintenance()["trimmed"] == {}  # server default: keep forever
    for bad in ({"retention.ms": 0}, {"retention.ms": "1"}, {"retention.ms": -2}, {"segment.ms": 5},
                {"retention.bytes": True}):
        with pytest.raises(InvalidField):
            node.alter_topic_configs("t", bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidField):
            node.create_topic("u", 1, bad)  # type: ignore[arg-type]
    with pytest.raises(TopicNotFound):
        node.alter_topic_configs("nope", {"retention.ms": DAY})
    assert node.describe_topic("t")["configs"]["retention.ms"]["source"] == "default"  # bad input: untouched
    desc = node.alter_topic_configs("t", {"retention.ms": DAY})
    assert desc["configs"]["retention.ms"] == {"value": DAY, "source": "topic"}
    assert node.run_maintenance()["trimmed"] == {"t-0": 10}
    desc = node.alter_topic_configs("t", {"retention.ms": None})  # back to the server default
    assert desc["configs"]["retention.ms"] == {"value": -1, "source": "default"}


def test_producer_timestamps_far_past_and_future(node_and_clock) -> None:  # type: ignore[no-untyped-def]
    node, clock, _ = node_and_clock
    node.create_topic("skew", 1)
    t0 = clock.ms
    past, future = t0 - 20 * 365 * DAY, t0 + 20 * 365 * DAY
    got = node.produce("skew", [InMessage(b"old", key=b"a", timestamp=past),
                                InMessage(b"new", key=b"b", timestamp=future),
                                InMessage(b"now", key=b"c")])
    assert [p.timestamp for p in got] == [past, future, t0]  # the record's own timestamp is returned
    with pytest.raises(InvalidField):
        node.produce("skew", [InMessage(b"x", timestamp=-5)])
    node.sync_index()
    node.index.roll()
    # index entries carry the append time: the file's bounds are [t0, t0], not 40 years wide
    (f,) = [f for f in node.index.files() if f.items]
    assert f.min_ms == t0 and f.end_ms == t0
    clock.ms += HOUR
    produce_keys(node, "skew", 1)
    node.sync_index()
    node.index.roll()
    begins = [f.begin_ms for f in node.index.files() if f.items]
    assert begins == sorted(begins) and len(begins) == 2
    clock.ms += 4 * DAY
    node.run_maintenance()
    assert node.index.maintain().expired == []  # no early expiry
    for key, value, ts in (("a", b"old", past), ("b", b"new", future), ("c", b"now", t0)):
        page, _ = node.find_by_key("skew", key, t0, t0, 10, None)  # begin/end filter on the append time
        assert [(m.value, m.timestamp) for m in page] == [(value, ts)]
        assert node.find_by_key("skew", key, t0 + 1, None, 10, None)[0] == []
