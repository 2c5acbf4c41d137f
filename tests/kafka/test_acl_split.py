"""Per-item answers of Kafka requests under ACL rules, as the listener composes them (api/kafka/authorization.py):
hypothesis over requests naming topics (ListOffsets, OffsetCommit) or groups (DescribeGroups, DeleteGroups),
each item allowed or refused by real rules. The handler is handed exactly the allowed items; the merged answer
holds every item in request order, the refused ones with their code and nothing else of theirs; with every item
refused the request is answered without its handler; with none refused the request is handed on untouched."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from api.kafka.authorization import ITEMS, Caller, merge, refusal, split
from api.kafka.schemas import APIS, build
from api.security.access import AccessControl
from api.security.authorizer import Authorizer
from api.security.principals import Principal
from broker.metadata.acls import AclRule

WHO = Principal("alice", frozenset({"read", "produce", "admin"}))
TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED = 29, 30
# api key, version, the operation the items need, the item's resource type, the request built from item names,
# the handler's answer built from the items it was handed
CASES: dict[int, tuple[int, str, str, Any, Any]] = {
    2: (5, "describe", "topic",
        lambda names: dict(replica_id=-1, isolation_level=0, topics=[
            dict(name=n, partitions=[dict(partition_index=0, timestamp=-1)]) for n in names]),
        lambda req: dict(throttle_time_ms=0, topics=[
            dict(name=t.name, partitions=[dict(partition_index=0, error_code=0, timestamp=-1, offset=7,
                                               leader_epoch=-1)]) for t in req.topics])),
    8: (7, "read", "topic",
        lambda names: dict(group_id="g", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                           topics=[dict(name=n, partitions=[dict(partition_index=0, committed_offset=1,
                                                                 committed_leader_epoch=-1,
                                                                 committed_metadata="")]) for n in names]),
        lambda req: dict(throttle_time_ms=0, topics=[
            dict(name=t.name, partitions=[dict(partition_index=0, error_code=0)]) for t in req.topics])),
    15: (5, "describe", "group",
         lambda names: dict(groups=list(names), include_authorized_operations=False),
         lambda req: dict(throttle_time_ms=0, groups=[
             dict(error_code=0, group_id=g, group_state="Empty", protocol_type="consumer", protocol_data="",
                  members=[]) for g in req.groups])),
    42: (2, "delete", "group",
         lambda names: dict(groups_names=list(names)),
         lambda req: dict(throttle_time_ms=0, results=[dict(group_id=g, error_code=0) for g in req.groups_names])),
}
NAMES = [f"t{i}" for i in range(8)]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(CASES)), st.lists(st.sampled_from(NAMES), min_size=1, max_size=6, unique=True),
       st.sets(st.sampled_from(NAMES)))
def test_refused_items_answered_apart_in_request_order(api_key: int, names: list[str], allowed: set[str]) -> None:
    version, op, rtype, request, answer = CASES[api_key]
    rules = [AclRule.make("User:alice", rtype, n, op) for n in sorted(allowed)]
    rules += [AclRule.make("User:alice", "group", "g", "all")]  # the OffsetCommit's group
    control = AccessControl(None)
    control.authorizer = Authorizer(rules)
    caller = Caller(WHO, "10.0.0.1", control)
    req = build(APIS[api_key].request, version, **request(names))
    code = TOPIC_AUTHORIZATION_FAILED if rtype == "topic" else GROUP_AUTHORIZATION_FAILED
    attr, _, answers, field = ITEMS[api_key]

    def name_of(item: Any) -> str:
        return item if isinstance(item, str) else str(getattr(item, field))

    def codes_of(item: Any) -> set[int]:
        parts = getattr(item, "partitions", None)
        return {p.error_code for p in parts} if parts is not None else {item.error_code}

    whole = refusal(api_key, req, version, WHO, caller)
    if not set(names) & allowed:  # every item refused: answered here
        assert whole is not None
        assert [name_of(x) for x in getattr(whole, answers)] == names
        assert all(codes_of(x) == {code} for x in getattr(whole, answers))
        return
    assert whole is None
    handed, refused = split(api_key, req, caller)
    assert [name_of(x) for x in getattr(handed, attr)] == [n for n in names if n in allowed]
    assert [name_of(x) for x in getattr(req, attr)] == names  # the request itself is left as it came
    if set(names) <= allowed:
        assert handed is req and refused == {}
    resp = merge(api_key, req, version, build(APIS[api_key].response, version, **answer(handed)), refused)
    got = getattr(resp, answers)
    assert [name_of(x) for x in got] == names
    for item in got:
        assert codes_of(item) == ({0} if name_of(item) in allowed else {code})
        if name_of(item) not in allowed and hasattr(item, "partitions") and api_key == 2:
            assert [p.offset for p in item.partitions] == [-1]  # nothing of a refused topic told
