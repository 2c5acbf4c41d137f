"""While the metadata database does not answer, every Kafka request is answered with a code Kafka's clients retry,
on a connection that stays open (docs/KAFKA.md, "Error codes for faults that heal"). Before, only Metadata and
OffsetFetch were answered: any other request whose handler met the outage (`MetadataUnavailable`) closed the
client's connection, and librdkafka, kafka-python and the Java client saw a disconnection instead of a code.

A real `mqindex serve` on a PostgreSQL database of the test's own (tests/api/test_metadata_reconnect.py), made to
refuse connections; raw requests (tests/kafka/wire.py) of every kind that needs the metadata, each on the one
connection, which must stay open through all of them. Every wait is on a condition with a bound."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from api.kafka import errors
from tests.api.server import free_port, wait_for
from tests.api.test_metadata_reconnect import LEASE_MS, OwnDatabase, _server, own_db  # noqa: F401 - a fixture
from tests.kafka.test_every_version import batch
from tests.kafka.wire import Wire

TOPIC = "outage"
GROUP = "outage-group"
TID = "outage-txn"

#: the storage error mapping's codes (api/kafka/errors.py code_for): KAFKA_STORAGE_ERROR for the metadata not
#: answering, NOT_LEADER_OR_FOLLOWER once the node cannot renew its lease (it may have lost its partitions)
STORAGE = {errors.KAFKA_STORAGE_ERROR, errors.NOT_LEADER_OR_FOLLOWER}


def _produce(w: Wire, value: bytes) -> int:
    resp = w.call((0, 9), transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[dict(
        name=TOPIC, partition_data=[dict(index=0, records=batch(value))])])
    return int(resp.responses[0].partition_responses[0].error_code)


def _commit(w: Wire, group: str) -> list[int]:
    resp = w.call((8, 8), group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                  topics=[dict(name=TOPIC, partitions=[dict(partition_index=0, committed_offset=1,
                                                            committed_leader_epoch=-1, committed_metadata="")])])
    return [p.error_code for t in resp.topics for p in t.partitions]


def _requests(pid: int, epoch: int) -> dict[str, tuple[Callable[[Wire], Any], set[int]]]:
    """Each request kind: a function sending it and giving its codes, and the codes it may be answered with."""
    unavailable = {errors.COORDINATOR_NOT_AVAILABLE}
    return {
        "Fetch": (lambda w: [p.error_code for t in w.call(
            (1, 12), replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
            session_epoch=-1, forgotten_topics_data=[], rack_id="", topics=[dict(topic=TOPIC, partitions=[dict(
                partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=1 << 20)])]).responses for p in t.partitions],
            STORAGE | {errors.NONE}),
        "ListOffsets": (lambda w: [p.error_code for t in w.call(
            (2, 7), replica_id=-1, isolation_level=0, topics=[dict(name=TOPIC, partitions=[dict(
                partition_index=0, current_leader_epoch=-1, timestamp=-1)])]).topics for p in t.partitions],
            STORAGE | {errors.NONE}),
        "OffsetCommit": (lambda w: _commit(w, GROUP), unavailable),
        "OffsetFetch": (lambda w: [w.committed(GROUP, TOPIC, [0]).error_code], unavailable | {errors.NONE}),
        "FindCoordinator": (lambda w: [w.call((10, 3), key=GROUP, key_type=0).error_code],
                            unavailable | {errors.NONE}),
        "JoinGroup": (lambda w: [w.join("outage-join").error_code], unavailable | {errors.NONE}),
        "DescribeGroups": (lambda w: [g.error_code for g in w.call(
            (15, 5), groups=[GROUP], include_authorized_operations=False).groups], unavailable | {errors.NONE}),
        "ListGroups": (lambda w: [w.call((16, 4), states_filter=[]).error_code], unavailable | {errors.NONE}),
        "DeleteGroups": (lambda w: [r.error_code for r in w.call((42, 2), groups_names=[GROUP]).results],
                         unavailable),
        "OffsetDelete": (lambda w: [w.call((47, 0), group_id=GROUP, topics=[dict(
            name=TOPIC, partitions=[dict(partition_index=0)])]).error_code], unavailable),
        "CreateTopics": (lambda w: [t.error_code for t in w.call(
            (19, 7), topics=[dict(name="outage-new", num_partitions=1, replication_factor=1, assignments=[],
                                  configs=[])], timeout_ms=10_000, validate_only=False).topics],
            STORAGE),
        "DeleteTopics": (lambda w: [r.error_code for r in w.call((20, 5), topic_names=[TOPIC],
                                                                 timeout_ms=10_000).responses],
                         STORAGE),
        "CreatePartitions": (lambda w: [r.error_code for r in w.call(
            (37, 3), topics=[dict(name=TOPIC, count=3, assignments=None)], timeout_ms=10_000,
            validate_only=False).results], STORAGE),
        "DescribeConfigs": (lambda w: [r.error_code for r in w.call(
            (32, 4), resources=[dict(resource_type=2, resource_name=TOPIC, configuration_keys=None)],
            include_synonyms=False, include_documentation=False).results],
            STORAGE | {errors.NONE}),
        "IncrementalAlterConfigs": (lambda w: [r.error_code for r in w.call(
            (44, 1), validate_only=False, resources=[dict(resource_type=2, resource_name=TOPIC, configs=[dict(
                name="retention.ms", config_operation=0, value="86400000")])]).responses],
            STORAGE),
        "AlterConfigs": (lambda w: [r.error_code for r in w.call(
            (33, 2), validate_only=False, resources=[dict(resource_type=2, resource_name=TOPIC, configs=[dict(
                name="retention.ms", value="86400000")])]).responses], STORAGE),
        "InitProducerId": (lambda w: [w.call((22, 4), transactional_id=None, transaction_timeout_ms=60_000,
                                             producer_id=-1, producer_epoch=-1).error_code], unavailable),
        "InitProducerId (transactional)": (lambda w: [w.call(
            (22, 4), transactional_id=TID, transaction_timeout_ms=60_000, producer_id=-1,
            producer_epoch=-1).error_code], unavailable),
        "AddPartitionsToTxn": (lambda w: [p.partition_error_code for t in w.call(
            (24, 3), v3_and_below_transactional_id=TID, v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[dict(name=TOPIC, partitions=[0])]).results_by_topic_v3_and_below
            for p in t.results_by_partition], unavailable),
        "AddOffsetsToTxn": (lambda w: [w.call((25, 3), transactional_id=TID, producer_id=pid, producer_epoch=epoch,
                                              group_id=GROUP).error_code], unavailable),
        "EndTxn": (lambda w: [w.call((26, 3), transactional_id=TID, producer_id=pid, producer_epoch=epoch,
                                     committed=False).error_code], unavailable | {errors.NONE}),
        "TxnOffsetCommit": (lambda w: [p.error_code for t in w.call(
            (28, 3), transactional_id=TID, group_id=GROUP, producer_id=pid, producer_epoch=epoch, generation_id=-1,
            member_id="", group_instance_id=None, topics=[dict(name=TOPIC, partitions=[dict(
                partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata="")])]).topics
            for p in t.partitions], unavailable),
    }


def test_every_request_is_answered_a_retriable_code_while_the_metadata_database_refuses(
        tmp_path: Path, own_db: OwnDatabase) -> None:  # noqa: F811 - the imported fixture
    kafka_port = free_port()
    server = _server(tmp_path, own_db, kafka_port).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as c, contextlib.ExitStack() as wires:
            w = wires.enter_context(Wire(kafka_port, timeout=60))
            assert c.post("/v1/topics", json={"name": TOPIC, "partitions": 1}).status_code == 201
            assert _produce(w, b"before") == errors.NONE
            assert _commit(w, GROUP) == [errors.NONE]
            txn = w.call((22, 4), transactional_id=TID, transaction_timeout_ms=60_000, producer_id=-1,
                         producer_epoch=-1)
            assert txn.error_code == errors.NONE, txn
            log_at = server.log.stat().st_size

            own_db.refuse()
            wait_for("the node sees the outage", lambda: c.get("/healthz/ready").status_code == 503, timeout=30)
            # a produce is acknowledged while the node surely holds its lease, refused with a retriable code after
            seen: list[int] = []

            def refused() -> bool:
                seen.append(_produce(w, b"during-%d" % len(seen)))
                assert seen[-1] in STORAGE | {errors.NONE}, seen
                return seen[-1] != errors.NONE

            wait_for("a produce refused", refused, timeout=LEASE_MS / 1000 + 30, interval=0.2)
            answered: dict[str, list[int] | str] = {}
            wrong: list[str] = []
            for name, (send, allowed) in _requests(txn.producer_id, txn.producer_epoch).items():
                try:
                    answered[name] = codes = list(send(w))
                except (AssertionError, OSError) as exc:  # the connection closed under the request
                    answered[name] = f"no answer: {exc}"
                    wrong.append(name)
                    w = wires.enter_context(Wire(kafka_port, timeout=60))  # the next kinds are each still asked
                    continue
                if not set(codes) <= allowed:
                    wrong.append(name)
            assert not wrong, f"not answered a retriable code: {wrong}; every answer: {answered}"
            assert w.call((18, 0)).error_code == errors.NONE  # the connection is still open

            own_db.accept()
            wait_for("ready again", lambda: c.get("/healthz/ready").status_code == 200, timeout=30)
            wait_for("produce served again", lambda: _produce(w, b"after") == errors.NONE,
                     timeout=LEASE_MS / 1000 + 30, interval=0.2)
        outage = server.log.read_bytes()[log_at:].decode()
        assert "kafka request failed" not in outage and "Traceback" not in outage, outage[-3000:]
        assert server.stop() == 0
    finally:
        server.stop()
