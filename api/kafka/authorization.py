"""The answer to a request the caller's scopes do not allow, in the shape of that API's response.

Which scope an API needs and which error refuses it is api/security/principals.py's (shared with HTTP):
topic APIs answer TOPIC_AUTHORIZATION_FAILED for every topic and partition asked, group APIs
GROUP_AUTHORIZATION_FAILED, cluster APIs CLUSTER_AUTHORIZATION_FAILED, as a Kafka broker with ACLs does.
Nothing of the request is carried out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from api.kafka.schemas import APIS, build
from api.security.principals import Principal, kafka_denial

Refusal = Callable[[Any, int, int], dict[str, Any]]


def _produce(req: Any, version: int, code: int) -> dict[str, Any]:
    return dict(throttle_time_ms=0, responses=[
        dict(name=t.name, partition_responses=[dict(index=p.index, error_code=code, base_offset=-1,
                                                    log_append_time_ms=-1, log_start_offset=-1, record_errors=[],
                                                    error_message=None) for p in t.partition_data])
        for t in req.topic_data])


def _fetch(req: Any, version: int, code: int) -> dict[str, Any]:
    return dict(throttle_time_ms=0, error_code=0, session_id=0, responses=[
        dict(topic=t.topic, partitions=[dict(partition_index=p.partition, error_code=code, high_watermark=-1,
                                             last_stable_offset=-1, log_start_offset=-1, aborted_transactions=[],
                                             preferred_read_replica=-1, records=b"") for p in t.partitions])
        for t in req.topics])


def _list_offsets(req: Any, version: int, code: int) -> dict[str, Any]:
    return dict(throttle_time_ms=0, topics=[
        dict(name=t.name, partitions=[dict(partition_index=p.partition_index, error_code=code, timestamp=-1,
                                           offset=-1, leader_epoch=-1) for p in t.partitions])
        for t in req.topics])


def _offset_commit(req: Any, version: int, code: int) -> dict[str, Any]:
    return dict(throttle_time_ms=0, topics=[
        dict(name=t.name, partitions=[dict(partition_index=p.partition_index, error_code=code)
                                      for p in t.partitions]) for t in req.topics])


def _offset_fetch(req: Any, version: int, code: int) -> dict[str, Any]:
    return dict(throttle_time_ms=0, error_code=code, topics=[
        dict(name=t.name, partitions=[dict(partition_index=i, committed_offset=-1, committed_leader_epoch=-1,
                                           metadata="", error_code=code) for i in t.partition_indexes])
        for t in req.topics or []])


def _top_level(**extra: Any) -> Refusal:
    def answer(req: Any, version: int, code: int) -> dict[str, Any]:
        return dict(throttle_time_ms=0, error_code=code, **extra)
    return answer


def _join_group(req: Any, version: int, code: int) -> dict[str, Any]:
    return dict(throttle_time_ms=0, error_code=code, generation_id=-1, protocol_type=None, protocol_name=None,
                leader="", member_id=req.member_id, members=[])


def _leave_group(req: Any, version: int, code: int) -> dict[str, Any]:
    return dict(throttle_time_ms=0, error_code=code, members=[])


def _create_topics(req: Any, version: int, code: int) -> dict[str, Any]:
    return dict(throttle_time_ms=0, topics=[
        dict(name=t.name, error_code=code, error_message="not authorized", topic_config_error_code=0,
             num_partitions=-1, replication_factor=-1, configs=[]) for t in req.topics])


def _delete_topics(req: Any, version: int, code: int) -> dict[str, Any]:
    return dict(throttle_time_ms=0, responses=[dict(name=n, error_code=code, error_message="not authorized")
                                               for n in req.topic_names])


def _describe_configs(req: Any, version: int, code: int) -> dict[str, Any]:
    return dict(throttle_time_ms=0, results=[
        dict(error_code=code, error_message="not authorized", resource_type=r.resource_type,
             resource_name=r.resource_name, configs=[]) for r in req.resources])


def _alter_configs(req: Any, version: int, code: int) -> dict[str, Any]:
    return dict(throttle_time_ms=0, responses=[
        dict(error_code=code, error_message="not authorized", resource_type=r.resource_type,
             resource_name=r.resource_name) for r in req.resources])


REFUSALS: dict[int, Refusal] = {
    0: _produce, 1: _fetch, 2: _list_offsets, 8: _offset_commit, 9: _offset_fetch,
    10: _top_level(error_message="not authorized", node_id=-1, host="", port=-1),
    11: _join_group, 12: _top_level(), 13: _leave_group,
    14: _top_level(protocol_type=None, protocol_name=None, assignment=b""),
    19: _create_topics, 20: _delete_topics, 22: _top_level(producer_id=-1, producer_epoch=-1),
    32: _describe_configs, 33: _alter_configs, 44: _alter_configs,
    15: lambda req, version, code: dict(throttle_time_ms=0, groups=[
        dict(error_code=code, group_id=g, group_state="", protocol_type="", protocol_data="", members=[])
        for g in req.groups]),
    16: _top_level(groups=[]),
    42: lambda req, version, code: dict(throttle_time_ms=0, results=[dict(group_id=g, error_code=code)
                                                                     for g in req.groups_names]),
    47: _top_level(topics=[]),
    24: lambda req, version, code: dict(throttle_time_ms=0, error_code=code, results_by_transaction=[],
                                        results_by_topic_v3_and_below=[
        dict(name=t.name, results_by_partition=[dict(partition_index=p, partition_error_code=code)
                                                for p in t.partitions])
        for t in req.v3_and_below_topics or []]),
    25: _top_level(),
    26: _top_level(producer_id=-1, producer_epoch=-1),
    28: lambda req, version, code: dict(throttle_time_ms=0, topics=[
        dict(name=t.name, partitions=[dict(partition_index=p.partition_index, error_code=code)
                                      for p in t.partitions]) for t in req.topics]),
}


def refusal(api_key: int, req: Any, version: int, principal: Principal) -> Any | None:
    """The response refusing `req` to `principal`, or None when its scopes allow it."""
    api = APIS[api_key]
    code = kafka_denial(api.name, principal)
    if code is None:
        return None
    return build(api.response, version, **REFUSALS[api_key](req, version, code))
