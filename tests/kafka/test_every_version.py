"""Every version of every API the listener advertises (api/kafka/schemas.py APIS), sent with kafka-python's
request classes to a real `mqindex serve`: each answer decodes, does what the request asked (records produced
and fetched back, a topic created and deleted, a group joined, synced and left, configs changed), and the
connection stays open for the next request. The server logs no failed request."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from api.kafka import errors
from api.kafka.schemas import APIS
from tests.kafka.conftest import KafkaServerProcess
from tests.kafka.test_sasl import ADMIN_TOKEN, secured
from tests.kafka.wire import JOIN, Wire

TOPIC, CONFIGURED = "every-version", "every-version-configs"
DAY_MS = 86_400_000
METADATA, CREATE, COMMIT, FETCH_OFFSETS, DESCRIBE_CONFIGS = (3, 12), (19, 7), (8, 8), (9, 7), (32, 4)
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
GROUP_ID_NOT_FOUND = 69


def versions(api_key: int) -> range:
    api = APIS[api_key]
    return range(api.min_version, api.max_version + 1)


def batch(*values: bytes) -> bytes:
    b = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    for v in values:
        b.append(timestamp=1_700_000_000_000, key=v, value=v)
    b.close()
    return bytes(b.buffer())


def values_of(records: Any) -> list[bytes]:
    out: list[bytes] = []
    recs = MemoryRecords(bytes(records or b""))
    while (b := recs.next_batch()) is not None:
        out += [bytes(r.value) for r in b]
    return out


def create_topic(w: Wire, name: str, partitions: int) -> None:
    resp = w.call(CREATE, topics=[dict(name=name, num_partitions=partitions, replication_factor=1, assignments=[],
                                       configs=[])], timeout_ms=10_000, validate_only=False)
    assert resp.topics[0].error_code == errors.NONE, resp


def topic_meta(w: Wire, name: str) -> Any:
    return w.call(METADATA, topics=[dict(name=name)], allow_auto_topic_creation=False,
                  include_topic_authorized_operations=False).topics[0]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServerProcess]:
    s = KafkaServerProcess(tmp_path_factory.mktemp("versions") / "node").start()
    try:
        with Wire(s.kafka_port) as w:
            create_topic(w, TOPIC, 1)
            create_topic(w, CONFIGURED, 1)
            resp = w.call((0, 9), transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[dict(
                name=TOPIC, partition_data=[dict(index=0, records=batch(b"a", b"b", b"c"))])])
            assert resp.responses[0].partition_responses[0].error_code == errors.NONE, resp
        yield s
    finally:
        s.stop()


# -- one function per API: the request at `v`, and what its answer must say ----------------------------
def produce(w: Wire, v: int, s: KafkaServerProcess) -> None:
    value = f"produced-v{v}".encode()
    resp = w.call((0, v), transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[dict(
        name=TOPIC, partition_data=[dict(index=0, records=batch(value))])])
    p = resp.responses[0].partition_responses[0]
    assert (p.error_code, resp.responses[0].name) == (errors.NONE, TOPIC), resp
    got = w.call((1, 12), replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                 session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="", topics=[dict(
                     topic=TOPIC, partitions=[dict(partition=0, current_leader_epoch=-1, fetch_offset=p.base_offset,
                                                   last_fetched_epoch=-1, log_start_offset=-1,
                                                   partition_max_bytes=1 << 20)])])
    assert values_of(got.responses[0].partitions[0].records)[0] == value


def fetch(w: Wire, v: int, s: KafkaServerProcess) -> None:
    resp = w.call((1, v), replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                  session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="", topics=[dict(
                      topic=TOPIC, partitions=[dict(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                                    last_fetched_epoch=-1, log_start_offset=-1,
                                                    partition_max_bytes=1 << 20)])])
    p = resp.responses[0].partitions[0]
    assert (resp.responses[0].topic, p.error_code) == (TOPIC, errors.NONE), resp
    assert values_of(p.records)[:3] == [b"a", b"b", b"c"]
    assert p.high_watermark >= 3


def list_offsets(w: Wire, v: int, s: KafkaServerProcess) -> None:
    def offset(timestamp: int) -> int:
        resp = w.call((2, v), replica_id=-1, isolation_level=0, topics=[dict(name=TOPIC, partitions=[dict(
            partition_index=0, current_leader_epoch=-1, timestamp=timestamp)])])
        p = resp.topics[0].partitions[0]
        assert p.error_code == errors.NONE, resp
        return int(p.offset)

    assert offset(-2) == 0
    assert offset(-1) >= 3


def metadata(w: Wire, v: int, s: KafkaServerProcess) -> None:
    resp = w.call((3, v), topics=[dict(name=TOPIC)], allow_auto_topic_creation=False,
                  include_cluster_authorized_operations=False, include_topic_authorized_operations=False)
    assert [(b.host, b.port) for b in resp.brokers] == [("127.0.0.1", s.kafka_port)]
    t = resp.topics[0]
    assert (t.error_code, t.name, len(t.partitions)) == (errors.NONE, TOPIC, 1), resp
    assert t.partitions[0].leader_id == resp.brokers[0].node_id


def offset_commit(w: Wire, v: int, s: KafkaServerProcess) -> None:
    group = f"commit-v{v}"
    resp = w.call((8, v), group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                  retention_time_ms=-1, topics=[dict(name=TOPIC, partitions=[dict(
                      partition_index=0, committed_offset=v + 1, committed_leader_epoch=-1, committed_metadata="m")])])
    assert resp.topics[0].partitions[0].error_code == errors.NONE, resp
    assert w.committed(group, TOPIC, [0]).topics[0].partitions[0].committed_offset == v + 1


def offset_fetch(w: Wire, v: int, s: KafkaServerProcess) -> None:
    group = "fetch-offsets"
    w.call(COMMIT, group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
           topics=[dict(name=TOPIC, partitions=[dict(partition_index=0, committed_offset=2, committed_leader_epoch=-1,
                                                     committed_metadata="m")])])
    resp = w.call((9, v), group_id=group, topics=[dict(name=TOPIC, partition_indexes=[0])], require_stable=False)
    p = resp.topics[0].partitions[0]
    assert (p.error_code, p.committed_offset, p.metadata) == (errors.NONE, 2, "m"), resp
    if v >= 2:
        assert resp.error_code == errors.NONE


def find_coordinator(w: Wire, v: int, s: KafkaServerProcess) -> None:
    resp = w.call((10, v), key="some-group", key_type=0)
    assert (resp.error_code, resp.host, resp.port) == (errors.NONE, "127.0.0.1", s.kafka_port), resp


def _join(w: Wire, group: str, v: int = JOIN[1]) -> Any:
    resp = w.call((11, v), group_id=group, session_timeout_ms=30_000, rebalance_timeout_ms=5_000, member_id="",
                  group_instance_id=None, protocol_type="consumer", reason=None,
                  protocols=[dict(name="range", metadata=b"m")])
    assert resp.error_code == errors.NONE, resp
    return resp


def _gone(w: Wire, group: str, generation: int, member: str) -> None:
    """The member left: a heartbeat of it is answered UNKNOWN_MEMBER_ID."""
    assert w.heartbeat(group, generation, member) == errors.UNKNOWN_MEMBER_ID


def join_group(w: Wire, v: int, s: KafkaServerProcess) -> None:
    group = f"join-v{v}"
    resp = _join(w, group, v)
    assert resp.generation_id >= 1 and resp.leader == resp.member_id and resp.protocol_name == "range"
    assert [(m.member_id, bytes(m.metadata)) for m in resp.members] == [(resp.member_id, b"m")]
    assert w.leave(group, resp.member_id).members[0].error_code == errors.NONE


def sync_group(w: Wire, v: int, s: KafkaServerProcess) -> None:
    group = f"sync-v{v}"
    joined = _join(w, group)
    assignment = f"assignment-v{v}".encode()
    resp = w.call((14, v), group_id=group, generation_id=joined.generation_id, member_id=joined.member_id,
                  group_instance_id=None, protocol_type="consumer", protocol_name="range",
                  assignments=[dict(member_id=joined.member_id, assignment=assignment)])
    assert (resp.error_code, bytes(resp.assignment)) == (errors.NONE, assignment), resp
    if v >= 5:
        assert (resp.protocol_type, resp.protocol_name) == ("consumer", "range")
    w.leave(group, joined.member_id)


def heartbeat(w: Wire, v: int, s: KafkaServerProcess) -> None:
    group = f"heartbeat-v{v}"
    joined = _join(w, group)
    assert w.sync(group, joined.generation_id, joined.member_id, {joined.member_id: b"a"}).error_code == 0
    resp = w.call((12, v), group_id=group, generation_id=joined.generation_id, member_id=joined.member_id,
                  group_instance_id=None)
    assert resp.error_code == errors.NONE, resp
    w.leave(group, joined.member_id)


def leaving(v: int, member: str) -> dict[str, Any]:
    """LeaveGroup's fields at `v`: one member id before v3, a list of members from v3."""
    if v < 3:
        return dict(member_id=member)
    return dict(members=[dict(member_id=member, group_instance_id=None, **(dict(reason="done") if v >= 5 else {}))])


def leave_group(w: Wire, v: int, s: KafkaServerProcess) -> None:
    group = f"leave-v{v}"
    joined = _join(w, group)
    assert w.sync(group, joined.generation_id, joined.member_id, {joined.member_id: b"a"}).error_code == 0
    resp = w.call((13, v), group_id=group, **leaving(v, joined.member_id))
    assert resp.error_code == errors.NONE, resp
    if v >= 3:
        assert [(m.member_id, m.error_code) for m in resp.members] == [(joined.member_id, errors.NONE)]
    _gone(w, group, joined.generation_id, joined.member_id)
    again = _join(w, group)  # the group is empty: a newcomer is leader of a group of one at once
    assert [m.member_id for m in again.members] == [again.member_id]
    w.leave(group, again.member_id)


def api_versions(w: Wire, v: int, s: KafkaServerProcess) -> None:
    resp = w.call((18, v), client_software_name="wire-test", client_software_version="1.0")
    assert resp.error_code == errors.NONE
    assert {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys} == {
        a.key: (a.min_version, a.max_version) for a in APIS.values()}


def create_topics(w: Wire, v: int, s: KafkaServerProcess) -> None:
    name = f"created-v{v}"
    resp = w.call((19, v), timeout_ms=10_000, validate_only=False, topics=[dict(
        name=name, num_partitions=2, replication_factor=1, assignments=[],
        configs=[dict(name="retention.ms", value=str(DAY_MS))])])
    assert (resp.topics[0].name, resp.topics[0].error_code) == (name, errors.NONE), resp
    if v >= 5:
        assert resp.topics[0].num_partitions == 2
    assert len(topic_meta(w, name).partitions) == 2


def delete_topics(w: Wire, v: int, s: KafkaServerProcess) -> None:
    name = f"deleted-v{v}"
    create_topic(w, name, 1)
    resp = w.call((20, v), topic_names=[name], timeout_ms=10_000)
    assert (resp.responses[0].name, resp.responses[0].error_code) == (name, errors.NONE), resp
    assert topic_meta(w, name).error_code == errors.UNKNOWN_TOPIC_OR_PARTITION


def create_partitions(w: Wire, v: int, s: KafkaServerProcess) -> None:
    name = f"grown-v{v}"
    create_topic(w, name, 1)
    resp = w.call((37, v), topics=[dict(name=name, count=3, assignments=None)], timeout_ms=10_000,
                  validate_only=False)
    assert [(r.name, r.error_code) for r in resp.results] == [(name, errors.NONE)], resp
    assert len(topic_meta(w, name).partitions) == 3
    resp = w.call((37, v), topics=[dict(name=name, count=2, assignments=None)], timeout_ms=10_000,
                  validate_only=False)
    refused = resp.results[0]
    assert refused.error_code == errors.INVALID_PARTITIONS and "has 3 partitions" in refused.error_message, resp


PRODUCER_IDS: set[int] = set()


def init_producer_id(w: Wire, v: int, s: KafkaServerProcess) -> None:
    resp = w.call((22, v), transactional_id=None, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1)
    assert (resp.error_code, resp.producer_epoch) == (errors.NONE, 0), resp
    assert resp.producer_id >= 0 and resp.producer_id not in PRODUCER_IDS
    PRODUCER_IDS.add(resp.producer_id)


def _described(w: Wire) -> dict[str, str]:
    resp = w.call(DESCRIBE_CONFIGS, resources=[dict(resource_type=2, resource_name=CONFIGURED,
                                                    configuration_keys=None)],
                  include_synonyms=False, include_documentation=False)
    return {c.name: c.value for c in resp.results[0].configs}


def describe_configs(w: Wire, v: int, s: KafkaServerProcess) -> None:
    resp = w.call((32, v), resources=[dict(resource_type=2, resource_name=TOPIC, configuration_keys=["retention.ms"])],
                  include_synonyms=True, include_documentation=True)
    r = resp.results[0]
    assert (r.error_code, r.resource_name) == (errors.NONE, TOPIC), resp
    assert [(c.name, c.value) for c in r.configs] == [("retention.ms", "-1")]


def alter_configs(w: Wire, v: int, s: KafkaServerProcess) -> None:
    value = str((v + 1) * DAY_MS)
    resp = w.call((33, v), validate_only=False, resources=[dict(resource_type=2, resource_name=CONFIGURED,
                                                                configs=[dict(name="retention.ms", value=value)])])
    assert resp.responses[0].error_code == errors.NONE, resp
    assert _described(w)["retention.ms"] == value


def incremental_alter_configs(w: Wire, v: int, s: KafkaServerProcess) -> None:
    value = str((v + 1) << 30)
    resp = w.call((44, v), validate_only=False, resources=[dict(
        resource_type=2, resource_name=CONFIGURED, configs=[dict(name="retention.bytes", config_operation=0,
                                                                 value=value)])])
    assert resp.responses[0].error_code == errors.NONE, resp
    assert _described(w)["retention.bytes"] == value


def describe_groups(w: Wire, v: int, s: KafkaServerProcess) -> None:
    group = f"described-v{v}"
    joined = _join(w, group)
    assert w.sync(group, joined.generation_id, joined.member_id, {joined.member_id: b"a"}).error_code == 0
    resp = w.call((15, v), groups=[group, "never-seen"], include_authorized_operations=False)
    g, unknown = resp.groups
    assert (g.error_code, g.group_id, g.group_state, g.protocol_type, g.protocol_data) == (
        errors.NONE, group, "Stable", "consumer", "range"), resp
    assert [(m.member_id, m.client_id, m.client_host, bytes(m.member_metadata), bytes(m.member_assignment))
            for m in g.members] == [(joined.member_id, "wire-test", "/127.0.0.1", b"m", b"a")]
    assert (unknown.error_code, unknown.group_state, unknown.members) == (errors.NONE, "Dead", [])
    w.leave(group, joined.member_id)


def list_groups(w: Wire, v: int, s: KafkaServerProcess) -> None:
    group = f"listed-v{v}"
    joined = _join(w, group)
    resp = w.call((16, v), states_filter=[], types_filter=[])
    assert resp.error_code == errors.NONE, resp
    listed = {g.group_id: g for g in resp.groups}
    assert listed[group].protocol_type == "consumer"
    if v >= 4:
        assert listed[group].group_state == "CompletingRebalance"
        only_empty = w.call((16, v), states_filter=["Empty"], types_filter=[])
        assert group not in {g.group_id for g in only_empty.groups}
    w.leave(group, joined.member_id)


def _commit(w: Wire, group: str, offsets: dict[str, int]) -> None:
    resp = w.call(COMMIT, group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                  topics=[dict(name=t, partitions=[dict(partition_index=0, committed_offset=o,
                                                        committed_leader_epoch=-1, committed_metadata="")])
                          for t, o in offsets.items()])
    assert all(p.error_code == errors.NONE for t in resp.topics for p in t.partitions), resp


def delete_groups(w: Wire, v: int, s: KafkaServerProcess) -> None:
    group = f"deleted-group-v{v}"
    _commit(w, group, {TOPIC: 1})
    resp = w.call((42, v), groups_names=[group, "never-seen"])
    assert [(r.group_id, r.error_code) for r in resp.results] == [
        (group, errors.NONE), ("never-seen", GROUP_ID_NOT_FOUND)], resp
    assert w.committed(group, TOPIC, [0]).topics[0].partitions[0].committed_offset == -1


def offset_delete(w: Wire, v: int, s: KafkaServerProcess) -> None:
    group = f"offset-delete-v{v}"
    _commit(w, group, {TOPIC: 2, CONFIGURED: 1})
    resp = w.call((47, v), group_id=group, topics=[dict(name=CONFIGURED, partitions=[dict(partition_index=0)])])
    assert resp.error_code == errors.NONE, resp
    assert [(p.partition_index, p.error_code) for p in resp.topics[0].partitions] == [(0, errors.NONE)]
    assert w.committed(group, CONFIGURED, [0]).topics[0].partitions[0].committed_offset == -1
    assert w.committed(group, TOPIC, [0]).topics[0].partitions[0].committed_offset == 2


PRODUCER_FENCED, INVALID_PRODUCER_EPOCH = 90, 47


def _txn(w: Wire, tid: str) -> tuple[int, int]:
    resp = w.call((22, 4), transactional_id=tid, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1)
    assert resp.error_code == errors.NONE, resp
    return resp.producer_id, resp.producer_epoch


def _add(w: Wire, v: int, tid: str, pid: int, epoch: int, topics: dict[str, list[int]]) -> Any:
    return w.call((24, v), v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                  v3_and_below_producer_epoch=epoch,
                  v3_and_below_topics=[dict(name=t, partitions=ps) for t, ps in topics.items()])


def _end(w: Wire, v: int, tid: str, pid: int, epoch: int, commit: bool) -> int:
    return int(w.call((26, v), transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                      committed=commit).error_code)


def add_partitions_to_txn(w: Wire, v: int, s: KafkaServerProcess) -> None:
    tid = f"add-partitions-v{v}"
    pid, epoch = _txn(w, tid)
    bad = _add(w, v, tid, pid, epoch, {TOPIC: [0], "no-such-topic": [0]})
    codes = {(t.name, p.partition_index): p.partition_error_code for t in bad.results_by_topic_v3_and_below
             for p in t.results_by_partition}
    assert codes == {(TOPIC, 0): 55, ("no-such-topic", 0): errors.UNKNOWN_TOPIC_OR_PARTITION}, bad
    resp = _add(w, v, tid, pid, epoch, {TOPIC: [0]})
    assert [p.partition_error_code for p in resp.results_by_topic_v3_and_below[0].results_by_partition] == [0]
    assert _end(w, 3, tid, pid, epoch, True) == errors.NONE


def add_offsets_to_txn(w: Wire, v: int, s: KafkaServerProcess) -> None:
    tid = f"add-offsets-v{v}"
    pid, epoch = _txn(w, tid)
    resp = w.call((25, v), transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=f"txn-g-{v}")
    assert resp.error_code == errors.NONE, resp
    assert _end(w, 3, tid, pid, epoch, False) == errors.NONE


def end_txn(w: Wire, v: int, s: KafkaServerProcess) -> None:
    tid = f"end-txn-v{v}"
    pid, epoch = _txn(w, tid)
    assert _add(w, 3, tid, pid, epoch, {TOPIC: [0]}).results_by_topic_v3_and_below[0] \
        .results_by_partition[0].partition_error_code == errors.NONE
    assert _end(w, v, tid, pid, epoch, True) == errors.NONE
    assert _end(w, v, tid, pid, epoch, True) == errors.NONE  # a retry of the commit that completed
    _txn(w, tid)  # a new incarnation: the old epoch is fenced
    assert _end(w, v, tid, pid, epoch, True) == (PRODUCER_FENCED if v >= 2 else INVALID_PRODUCER_EPOCH)


def txn_offset_commit(w: Wire, v: int, s: KafkaServerProcess) -> None:
    tid, group = f"txn-offset-commit-v{v}", f"txn-offsets-v{v}"
    pid, epoch = _txn(w, tid)
    assert w.call((25, 3), transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                  group_id=group).error_code == errors.NONE
    resp = w.call((28, v), transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch,
                  generation_id=-1, member_id="", group_instance_id=None, topics=[dict(name=TOPIC, partitions=[
                      dict(partition_index=0, committed_offset=7, committed_leader_epoch=-1,
                           committed_metadata="m")])])
    assert [(p.partition_index, p.error_code) for p in resp.topics[0].partitions] == [(0, errors.NONE)], resp
    assert w.committed(group, TOPIC, [0]).topics[0].partitions[0].committed_offset == -1  # not before the commit
    assert _end(w, 3, tid, pid, epoch, True) == errors.NONE
    # EndTxn answers once the decision is stored; the offsets land with the completion that follows (as in Kafka,
    # where they land with the markers), so a plain OffsetFetch may see them a moment later: wait, bounded
    deadline = time.monotonic() + 30
    while (seen := w.committed(group, TOPIC, [0]).topics[0].partitions[0].committed_offset) != 7:
        assert seen == -1 and time.monotonic() < deadline, f"committed offset {seen}, 30 s after the commit"
        time.sleep(0.05)


# an ACL granting the (anonymous) caller everything on the cluster, so the ACL APIs stay allowed while it exists
_ACL = dict(resource_type=4, resource_name="kafka-cluster", resource_pattern_type=3, principal="User:anonymous",
            host="*", operation=2, permission_type=3)
_ACL_FILTER = dict(resource_type_filter=4, resource_name_filter=None, pattern_type_filter=1,
                   principal_filter="User:anonymous", host_filter=None, operation=1, permission_type=1)


def _acls(w: Wire, create_v: int = 3, describe_v: int = 3, delete_v: int = 3) -> None:
    """Create the rule, see it listed, delete it (no rule is left: access control is off again)."""
    assert [r.error_code for r in w.call((30, create_v), creations=[_ACL]).results] == [errors.NONE]
    resp = w.call((29, describe_v), **_ACL_FILTER)
    assert resp.error_code == errors.NONE and [len(r.acls) for r in resp.resources] == [1], resp
    gone = w.call((31, delete_v), filters=[_ACL_FILTER]).filter_results
    assert [(f.error_code, len(f.matching_acls)) for f in gone] == [(errors.NONE, 1)], gone


CASES: dict[int, Callable[[Wire, int, KafkaServerProcess], None]] = {
    0: produce, 1: fetch, 2: list_offsets, 3: metadata, 8: offset_commit, 9: offset_fetch, 10: find_coordinator,
    11: join_group, 12: heartbeat, 13: leave_group, 14: sync_group, 18: api_versions, 19: create_topics,
    20: delete_topics, 22: init_producer_id, 32: describe_configs, 33: alter_configs, 44: incremental_alter_configs,
    15: describe_groups, 16: list_groups, 42: delete_groups, 47: offset_delete, 24: add_partitions_to_txn,
    25: add_offsets_to_txn, 26: end_txn, 28: txn_offset_commit, 37: create_partitions,
    29: lambda w, v, s: _acls(w, describe_v=v), 30: lambda w, v, s: _acls(w, create_v=v),
    31: lambda w, v, s: _acls(w, delete_v=v),
}


def test_every_advertised_api_has_a_case() -> None:
    assert set(CASES) | {SASL_HANDSHAKE, SASL_AUTHENTICATE} == set(APIS)


def test_the_documented_versions_are_the_served_ones() -> None:
    table = (Path(__file__).parents[2] / "docs" / "KAFKA.md").read_text().split("## Versions served")[1]
    documented = {int(key): (int(low), int(high))
                  for key, low, high in re.findall(r"\| [A-Za-z]+ \((\d+)\) \| (\d+)-(\d+) ", table.split("\n\n")[1])}
    assert documented == {a.key: (a.min_version, a.max_version) for a in APIS.values()}


def no_failed_requests(s: KafkaServerProcess) -> None:
    log = s.log.read_text()
    assert "kafka request failed" not in log and "malformed request" not in log, log[-4000:]


@pytest.mark.parametrize("api_key", sorted(CASES), ids=lambda k: APIS[k].name)
def test_every_version_is_served(server: KafkaServerProcess, api_key: int) -> None:
    with Wire(server.kafka_port) as w:
        for v in versions(api_key):
            try:
                CASES[api_key](w, v, server)
            except AssertionError as exc:
                raise AssertionError(f"{APIS[api_key].name} v{v}: {exc}") from exc
        assert w.call((18, 0)).error_code == errors.NONE  # the connection is still usable
    no_failed_requests(server)


@pytest.fixture(scope="module")
def sasl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServerProcess]:
    s = secured(Path(tmp_path_factory.mktemp("versions-sasl"))).start()
    try:
        yield s
    finally:
        s.stop()


def test_every_sasl_version_is_served(sasl_server: KafkaServerProcess) -> None:
    token = b"\0token\0" + ADMIN_TOKEN.encode()  # SASL/PLAIN: a bearer token as the password of `token`
    for hv in versions(SASL_HANDSHAKE):
        for av in versions(SASL_AUTHENTICATE) if hv >= 1 else [None]:
            with Wire(sasl_server.kafka_port) as w:
                resp = w.call((SASL_HANDSHAKE, hv), mechanism="PLAIN")
                assert resp.error_code == errors.NONE and "PLAIN" in resp.mechanisms, resp
                if av is None:  # SaslHandshake v0: the token travels raw
                    assert w.raw(token) == b""
                else:
                    auth = w.call((SASL_AUTHENTICATE, av), auth_bytes=token)
                    assert auth.error_code == errors.NONE, f"SaslAuthenticate v{av}: {auth}"
                assert topic_meta(w, "no-such-topic").error_code == errors.UNKNOWN_TOPIC_OR_PARTITION
    no_failed_requests(sasl_server)


def test_a_left_member_is_gone_at_every_leave_version(server: KafkaServerProcess) -> None:
    """LeaveGroup of one of two members at each version: the other is alone in the next generation at once."""
    for v in versions(13):
        group = f"two-leave-v{v}"
        with Wire(server.kafka_port) as a, Wire(server.kafka_port) as b:
            first = a.join(group)  # alone: generation 1 at once
            assert a.sync(group, first.generation_id, first.member_id, {first.member_id: b"x"}).error_code == 0
            b.send_join(group)  # a newcomer: the group rebalances, a learns it from its heartbeat and rejoins
            assert a.heartbeat(group, first.generation_id, first.member_id) == errors.REBALANCE_IN_PROGRESS
            a.send_join(group, first.member_id)
            ja, jb = a.recv(), b.recv()
            assert ja.generation_id == jb.generation_id and len(ja.members) == 2 and ja.leader == first.member_id
            a.send_sync(group, ja.generation_id, ja.member_id, {m.member_id: b"x" for m in ja.members})
            b.send_sync(group, jb.generation_id, jb.member_id)
            assert a.recv().error_code == errors.NONE and b.recv().error_code == errors.NONE
            resp = b.call((13, v), group_id=group, **leaving(v, jb.member_id))
            assert resp.error_code == errors.NONE, resp
            assert a.heartbeat(group, ja.generation_id, ja.member_id) == errors.REBALANCE_IN_PROGRESS
            rejoined = a.join(group, ja.member_id)
            assert [m.member_id for m in rejoined.members] == [ja.member_id]
            assert rejoined.generation_id == ja.generation_id + 1
            _gone(b, group, rejoined.generation_id, jb.member_id)
    no_failed_requests(server)



def test_every_version_answers_errors_too(server: KafkaServerProcess) -> None:
    """The answers that carry an error (fields left unset, nulls) are well formed at every version as well."""
    missing = "no-such-topic"
    with Wire(server.kafka_port) as w:
        for v in versions(0):
            resp = w.call((0, v), transactional_id=None, acks=1, timeout_ms=1_000, topic_data=[dict(
                name=missing, partition_data=[dict(index=0, records=batch(b"x"))])])
            assert resp.responses[0].partition_responses[0].error_code == errors.UNKNOWN_TOPIC_OR_PARTITION
        for v in versions(1):
            resp = w.call((1, v), replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1000, isolation_level=0,
                          session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="", topics=[dict(
                              topic=missing, partitions=[dict(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                                              last_fetched_epoch=-1, log_start_offset=-1,
                                                              partition_max_bytes=1000)])])
            assert resp.responses[0].partitions[0].error_code == errors.UNKNOWN_TOPIC_OR_PARTITION
        for v in versions(11):
            resp = w.call((11, v), group_id="errors", session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
                          member_id="nobody", group_instance_id=None, protocol_type="consumer", reason=None,
                          protocols=[dict(name="range", metadata=b"")])
            assert resp.error_code == errors.UNKNOWN_MEMBER_ID
        for v in versions(14):
            resp = w.call((14, v), group_id="errors", generation_id=1, member_id="nobody", group_instance_id=None,
                          protocol_type=None, protocol_name=None, assignments=[])
            assert resp.error_code == errors.UNKNOWN_MEMBER_ID
        for v in versions(13):
            resp = w.call((13, v), group_id="errors", **leaving(v, "nobody"))
            codes = [resp.error_code] if v < 3 else [m.error_code for m in resp.members]
            assert codes == [errors.UNKNOWN_MEMBER_ID], resp
        for v in versions(19):
            resp = w.call((19, v), timeout_ms=1_000, validate_only=False, topics=[dict(
                name="bad/name", num_partitions=1, replication_factor=1, assignments=[], configs=[])])
            assert resp.topics[0].error_code == errors.INVALID_TOPIC_EXCEPTION
        for v in versions(20):
            resp = w.call((20, v), topic_names=[missing], timeout_ms=1_000)
            assert resp.responses[0].error_code == errors.UNKNOWN_TOPIC_OR_PARTITION
        for v in versions(32):
            resp = w.call((32, v), include_synonyms=False, include_documentation=False, resources=[
                dict(resource_type=2, resource_name=missing, configuration_keys=None)])
            assert resp.results[0].error_code == errors.UNKNOWN_TOPIC_OR_PARTITION
        assert w.call((18, 0)).error_code == errors.NONE
    no_failed_requests(server)
