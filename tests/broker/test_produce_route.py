"""The produce path's per-message steps in C (broker/partitions/_produce_route.pyx) give what the Python way gives:
Kafka's murmur2, each message's partition and offset, its id and timestamp, the records stored."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.config import Settings
from broker.errors import InvalidField
from broker.node import BrokerNode
from broker.partitions import produce
from broker.partitions.client_messages import InMessage
from broker.partitions.partitioner import RoundRobin, murmur2
from broker.partitions.topic_errors import PartitionNotFound

# org.apache.kafka.common.utils.UtilsTest#testMurmur2: what a Java producer computes for these keys
KAFKA_MURMUR2 = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
                 b"a-little-bit-longer-string": -1486304829,
                 b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971, b"abc": 479470107}


def test_the_route_module_is_built() -> None:
    """`pip install` (make test) builds broker/partitions/_produce_route; without it messages go the Python way."""
    assert produce._compiled is not None


@pytest.mark.parametrize("key", sorted(KAFKA_MURMUR2))
def test_murmur2_is_kafkas(key: bytes) -> None:
    assert murmur2(key) == KAFKA_MURMUR2[key]
    assert produce._compiled.murmur2(key) == KAFKA_MURMUR2[key]


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=64))
def test_murmur2_in_c_is_the_pythons(key: bytes) -> None:
    assert produce._compiled.murmur2(key) == murmur2(key)


def test_round_robin_takes_consecutive_counters() -> None:
    rr = RoundRobin()
    assert [rr.next("t", 5) for _ in range(3)] == [0, 1, 2]
    assert rr.take("t", 4) == 3
    assert rr.next("t", 5) == 2  # counter 7
    assert rr.take("t", 1) == 8 and rr.take("t", 0) == 9 and rr.next("t", 100) == 9
    assert rr.take("u", 3) == 0 and rr.next("u", 100) == 3


class Twins:
    """Two nodes with the same topic; produce on one in C, on the other the Python way."""

    PARTITIONS = 5

    def __init__(self, root: Path) -> None:
        self.nodes = []
        for name in ("c", "python"):
            s = Settings(data_dir=str(root / name)).resolved()
            node = BrokerNode.open(s.data_dir, s.store, s.metadata)
            node.create_topic("t", self.PARTITIONS)
            self.nodes.append(node)

    def produce(self, messages: list[InMessage], monkeypatch: pytest.MonkeyPatch) -> list[Any]:
        out = []
        for node, compiled in zip(self.nodes, (produce._compiled, None), strict=True):
            with monkeypatch.context() as m:
                m.setattr(produce, "_compiled", compiled)
                try:
                    out.append(node.produce("t", messages))
                except (InvalidField, PartitionNotFound) as exc:
                    out.append((type(exc), str(exc), exc.field))
        return out

    def close(self) -> None:
        for n in self.nodes:
            n.close()


@pytest.fixture(scope="module")
def twins(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twins]:
    t = Twins(tmp_path_factory.mktemp("twins"))
    yield t
    t.close()


small = st.none() | st.binary(max_size=12)
plain = st.builds(InMessage, value=small, key=small,
                  partition=st.none() | st.integers(0, Twins.PARTITIONS - 1))
other = st.builds(InMessage, value=small, key=small,
                  headers=st.lists(st.tuples(st.sampled_from(["KEYS", "UNIQ_KEY", "h"]), st.binary(max_size=6)),
                                   max_size=2),
                  partition=st.none() | st.integers(-1, Twins.PARTITIONS + 1),
                  timestamp=st.none() | st.integers(0, 2**41))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(plain, min_size=1, max_size=12) | st.lists(plain | other, min_size=1, max_size=12))
def test_c_and_python_store_and_answer_the_same(twins: Twins, monkeypatch: pytest.MonkeyPatch,
                                                messages: list[InMessage]) -> None:
    got_c, got_py = twins.produce(messages, monkeypatch)
    if isinstance(got_c, tuple):  # refused: the same error naming the same field, nothing stored
        assert got_c == got_py
        return
    assert [(p.partition, p.offset, p.msg_id[16:]) for p in got_c] == \
           [(p.partition, p.offset, p.msg_id[16:]) for p in got_py]
    for p, m in zip(got_c, messages, strict=True):
        if m.timestamp is not None:
            assert p.timestamp == m.timestamp
    for pc, pp in zip(got_c, got_py, strict=True):
        a, _ = twins.nodes[0].fetch("t", pc.partition, pc.offset, 1)
        b, _ = twins.nodes[1].fetch("t", pp.partition, pp.offset, 1)
        assert (a[0].key, a[0].value, list(a[0].headers)) == (b[0].key, b[0].value, list(b[0].headers))
        assert a[0].msg_id == pc.msg_id


def test_an_explicit_partition_out_of_range_names_its_message(twins: Twins,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    messages = [InMessage(b"v", None, (), 1), InMessage(b"w", None, (), Twins.PARTITIONS)]
    got_c, got_py = twins.produce(messages, monkeypatch)
    assert got_c == got_py and got_c[2] == "messages.1.partition"


def test_a_list_subclass_goes_the_python_way(twins: Twins, monkeypatch: pytest.MonkeyPatch) -> None:
    class Messages(list):  # type: ignore[type-arg]
        pass

    got_c, got_py = twins.produce(Messages([InMessage(b"v", b"k"), InMessage(b"w")]), monkeypatch)
    assert [(p.partition, p.offset) for p in got_c] == [(p.partition, p.offset) for p in got_py]


def test_a_refused_request_moves_round_robin_as_the_python_way(twins: Twins,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    turns = [n.producer.round_robin.take("t", 0) for n in twins.nodes]
    refused = [InMessage(b"a"), InMessage(b"b", None, (), Twins.PARTITIONS)]
    got_c, got_py = twins.produce(refused, monkeypatch)
    assert got_c == got_py and got_c[0] is PartitionNotFound
    after = [n.producer.round_robin.take("t", 0) for n in twins.nodes]
    assert after[0] - turns[0] == after[1] - turns[1]
    got_c, got_py = twins.produce([InMessage(b"c")], monkeypatch)
    assert got_c[0].partition == got_py[0].partition
