"""The answer to a request the caller may not make, in the shape of that API's response.

Two checks, in order. The scopes (api/security/principals.py, shared with HTTP): which scope an API needs and
which error refuses it. Then the access control rules (api/security/access.py), as Kafka applies them (its table
of operations per API: Produce WRITE topic, Fetch READ topic, OffsetCommit READ group and topic, ...):
- the request's one group, transactional id or the cluster (`RESOURCES`): refused, the whole request is answered
  with the resource's code (group: GROUP_AUTHORIZATION_FAILED, transactional id:
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED, cluster: CLUSTER_AUTHORIZATION_FAILED) and nothing of it is carried out;
- the topics, groups or config resources a request lists (`ITEMS`: Produce, Fetch, ListOffsets, OffsetCommit,
  OffsetFetch, CreateTopics, DeleteTopics, TxnOffsetCommit, OffsetDelete, DescribeGroups, DeleteGroups,
  Describe/Alter/IncrementalAlterConfigs): each refused one is answered with its code (a topic
  TOPIC_AUTHORIZATION_FAILED on each of its partitions) and the others are served (`split` hands the handler the
  request without the refused ones, `merge` puts their answers back in request order; Produce and Fetch take the
  refused topics' names, `refused_topics`). When every one is refused the request is answered here;
- AddPartitionsToTxn is all or nothing, as Kafka's: a refused topic's partitions are answered
  TOPIC_AUTHORIZATION_FAILED and the others OPERATION_NOT_ATTEMPTED;
- InitProducerId without a transactional id (an idempotent producer) needs IDEMPOTENT_WRITE on the cluster or
  WRITE on some topic (Kafka's rule), else CLUSTER_AUTHORIZATION_FAILED.

Lists are filtered instead (`filter_response`): Metadata for every topic lists only the topics the caller may
DESCRIBE and answers a named one it may not with TOPIC_AUTHORIZATION_FAILED and no partitions; ListGroups
lists only the groups it may DESCRIBE (all with DESCRIBE on the cluster); OffsetFetch for all of a group's
topics answers only those the caller may DESCRIBE.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from api.kafka.errors import UNKNOWN_TOPIC_OR_PARTITION
from api.kafka.schemas import APIS, build
from api.security.access import AccessControl
from api.security.authorizer import kafka_principal
from api.security.principals import (
    CLUSTER_AUTHORIZATION_FAILED,
    GROUP_AUTHORIZATION_FAILED,
    TOPIC_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    Principal,
    kafka_denial,
)
from broker.metadata.acls import CLUSTER_NAME

Refusal = Callable[[Any, int, int], dict[str, Any]]


def _why(code: int) -> str | None:
    """The error message beside `code`: "not authorized" for a refusal, none for a fault that heals
    (`error_answer`: the code says it)."""
    return "not authorized" if code in CODES.values() else None


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


def _top_level(message: bool = False, **extra: Any) -> Refusal:
    """A response with one top-level code (and `error_message` with `message`) and the fields `extra`."""
    def answer(req: Any, version: int, code: int) -> dict[str, Any]:
        return dict(throttle_time_ms=0, error_code=code, **({"error_message": _why(code)} if message else {}),
                    **extra)
    return answer


def _join_group(req: Any, version: int, code: int) -> dict[str, Any]:
    return dict(throttle_time_ms=0, error_code=code, generation_id=-1, protocol_type=None, protocol_name=None,
                leader="", member_id=req.member_id, members=[])


def _leave_group(req: Any, version: int, code: int) -> dict[str, Any]:
    return dict(throttle_time_ms=0, error_code=code, members=[])


def _create_topics(req: Any, version: int, code: int) -> dict[str, Any]:
    return dict(throttle_time_ms=0, topics=[
        dict(name=t.name, error_code=code, error_message=_why(code), topic_config_error_code=0,
             num_partitions=-1, replication_factor=-1, configs=[]) for t in req.topics])


def _delete_topics(req: Any, version: int, code: int) -> dict[str, Any]:
    return dict(throttle_time_ms=0, responses=[dict(name=n, error_code=code, error_message=_why(code))
                                               for n in req.topic_names])


def _create_partitions(req: Any, version: int, code: int) -> dict[str, Any]:
    return dict(throttle_time_ms=0, results=[dict(name=t.name, error_code=code, error_message=_why(code))
                                             for t in req.topics])


def _describe_configs(req: Any, version: int, code: int) -> dict[str, Any]:
    return dict(throttle_time_ms=0, results=[
        dict(error_code=code, error_message=_why(code), resource_type=r.resource_type,
             resource_name=r.resource_name, configs=[]) for r in req.resources])


def _alter_configs(req: Any, version: int, code: int) -> dict[str, Any]:
    return dict(throttle_time_ms=0, responses=[
        dict(error_code=code, error_message=_why(code), resource_type=r.resource_type,
             resource_name=r.resource_name) for r in req.resources])


REFUSALS: dict[int, Refusal] = {
    0: _produce, 1: _fetch, 2: _list_offsets, 8: _offset_commit, 9: _offset_fetch,
    10: _top_level(message=True, node_id=-1, host="", port=-1),
    11: _join_group, 12: _top_level(), 13: _leave_group,
    14: _top_level(protocol_type=None, protocol_name=None, assignment=b""),
    19: _create_topics, 20: _delete_topics, 22: _top_level(producer_id=-1, producer_epoch=-1),
    37: _create_partitions,
    32: _describe_configs, 33: _alter_configs, 44: _alter_configs,
    29: _top_level(message=True, resources=[]),
    30: lambda req, version, code: dict(throttle_time_ms=0, results=[dict(error_code=code,
                                                                         error_message=_why(code))
                                                                    for _ in req.creations]),
    31: lambda req, version, code: dict(throttle_time_ms=0, filter_results=[
        dict(error_code=code, error_message=_why(code), matching_acls=[]) for _ in req.filters]),
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


Resource = tuple[str, str, str]  # (resource type, name, operation)
CODES = {"topic": TOPIC_AUTHORIZATION_FAILED, "group": GROUP_AUTHORIZATION_FAILED,
         "cluster": CLUSTER_AUTHORIZATION_FAILED, "transactional_id": TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
_CONFIG_TYPES = {2: "topic", 4: "cluster"}  # DescribeConfigs/AlterConfigs resource types: topic, broker
METADATA, OFFSET_FETCH, LIST_GROUPS = 3, 9, 16


def _txn(txn_id: str | None) -> list[Resource]:
    return [("transactional_id", txn_id, "write")] if txn_id else []


def _topic(op: str, attr: str = "name") -> Callable[[Any], Resource | None]:
    return lambda t: ("topic", getattr(t, attr), op)


def _config(op: str) -> Callable[[Any], Resource | None]:
    def resource(r: Any) -> Resource | None:  # other resource types (broker loggers, ...) are not checked
        rtype = _CONFIG_TYPES.get(r.resource_type)
        return None if rtype is None else (rtype, r.resource_name if rtype == "topic" else CLUSTER_NAME, op)
    return resource


_GROUP_READ = {11, 12, 13, 14}
#: the one group, transactional id or cluster a request names: refused, the whole request is
RESOURCES: dict[int, Callable[[Any], list[Resource]]] = {
    0: lambda r: _txn(r.transactional_id),
    8: lambda r: [("group", r.group_id, "read")],
    9: lambda r: [("group", r.group_id, "describe")],
    10: lambda r: [("transactional_id" if r.key_type == 1 else "group", r.key, "describe")],
    **{k: (lambda r: [("group", r.group_id, "read")]) for k in _GROUP_READ},
    22: lambda r: _txn(r.transactional_id),
    24: lambda r: _txn(r.v3_and_below_transactional_id),
    25: lambda r: [*_txn(r.transactional_id), ("group", r.group_id, "read")],
    26: lambda r: _txn(r.transactional_id),
    28: lambda r: [*_txn(r.transactional_id), ("group", r.group_id, "read")],
    47: lambda r: [("group", r.group_id, "delete")],
    29: lambda r: [("cluster", CLUSTER_NAME, "describe")],
    30: lambda r: [("cluster", CLUSTER_NAME, "alter")], 31: lambda r: [("cluster", CLUSTER_NAME, "alter")],
}
#: the topics, groups or config resources a request lists, each answered on its own: api key -> (the request's
#: list, the resource of an item, the response's list, the field naming an item in both)
ITEMS: dict[int, tuple[str, Callable[[Any], Resource | None], str, str]] = {
    0: ("topic_data", _topic("write"), "responses", "name"),
    1: ("topics", _topic("read", "topic"), "responses", "topic"),
    2: ("topics", _topic("describe"), "topics", "name"),
    8: ("topics", _topic("read"), "topics", "name"),
    9: ("topics", _topic("describe"), "topics", "name"),
    15: ("groups", lambda g: ("group", g, "describe"), "groups", "group_id"),
    19: ("topics", _topic("create"), "topics", "name"),
    20: ("topic_names", lambda n: ("topic", n, "delete"), "responses", "name"),
    28: ("topics", _topic("read"), "topics", "name"),
    37: ("topics", _topic("alter"), "results", "name"),
    32: ("resources", _config("describe_configs"), "results", "resource_name"),
    33: ("resources", _config("alter_configs"), "responses", "resource_name"),
    42: ("groups_names", lambda g: ("group", g, "delete"), "results", "group_id"),
    44: ("resources", _config("alter_configs"), "responses", "resource_name"),
    47: ("topics", _topic("read"), "topics", "name"),
}
ADD_PARTITIONS_TO_TXN, INIT_PRODUCER_ID, CREATE_TOPICS, PRODUCE, FETCH = 24, 22, 19, 0, 1
OPERATION_NOT_ATTEMPTED = 55


class Caller:
    """Who sends a connection's requests: the principal, its host, and the process's access control; one per
    connection once authenticated. It remembers its decisions for as long as the rules are the same (a check is
    then one lookup in a small dict: the cost per request `mqindex bench security` measures)."""

    __slots__ = ("principal", "host", "access", "_memo", "_rules", "_who")

    def __init__(self, principal: Principal, host: str, access: AccessControl) -> None:
        self.principal, self.host, self.access = principal, host, access
        self._memo: dict[tuple[str, str, str], bool] = {}
        self._rules: object = None
        self._who = kafka_principal(principal.name)  # as the rules name it

    def allowed(self, rtype: str, name: str, op: str, quiet: bool = False) -> bool:
        """The decision; a denial is written to the audit log (each time, unless `quiet`: a first look at a
        request's items, audited when they are answered) and counted."""
        rules = self.access.authorizer
        if rules is not self._rules:
            self._memo, self._rules = {}, rules
        key = (op, rtype, name)
        found = self._memo.get(key)
        if found is None:
            found = self._memo[key] = rules.authorize(self._who, self.host, op, rtype, name)
        if not found and not quiet:
            self.access.check(self.principal.name, self.host, op, rtype, name, "kafka")  # the audit line
        return found

    def allowed_quietly(self, rtype: str, name: str, op: str) -> bool:
        """The decision without an audit line (one alternative of several: CREATE on the cluster, ...)."""
        return self.access.allowed(self.principal.name, self.host, op, rtype, name)

    def allowed_any(self, rtype: str, op: str) -> bool:
        """Whether `op` is allowed on some resource of the type (Kafka's authorizeByResourceType)."""
        return self.access.allowed_any(self.principal.name, self.host, op, rtype)


def _allowed(caller: Caller, rtype: str, name: str, op: str) -> bool:
    return caller.allowed(rtype, name, op)


def _denied_code(api_key: int, req: Any, caller: Caller) -> int | None:
    """The code refusing the whole request for its group, transactional id or the cluster (module doc)."""
    if api_key == PRODUCE:  # the hot path: no lists made
        txn = req.transactional_id
        if txn and not caller.allowed("transactional_id", txn, "write"):
            return TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        for t in req.topic_data:
            if caller.allowed("topic", t.name, "write", quiet=True):
                return None  # some topic allowed: the refused ones are answered (and audited) per topic
        for t in req.topic_data:
            caller.allowed("topic", t.name, "write")  # each one's audit line
        return TOPIC_AUTHORIZATION_FAILED if req.topic_data else None
    if api_key == INIT_PRODUCER_ID and not req.transactional_id:  # an idempotent producer (Kafka's rule)
        if caller.allowed_quietly("cluster", CLUSTER_NAME, "idempotent_write") or caller.allowed_any("topic", "write"):
            return None
        caller.allowed("cluster", CLUSTER_NAME, "idempotent_write")  # the denial's audit line
        return CLUSTER_AUTHORIZATION_FAILED
    find = RESOURCES.get(api_key)
    for rtype, name, op in find(req) if find else ():
        if not _allowed(caller, rtype, name, op):
            return CODES[rtype]
    return None


def _refused(api_key: int, req: Any, caller: Caller, quiet: bool = False) -> dict[int, int]:
    """The items (by position in the request's list) of a request listing several resources that the rules
    refuse, with each one's code (audited unless `quiet`)."""
    attr, resource, _, _ = ITEMS[api_key]
    if api_key == CREATE_TOPICS and caller.allowed_quietly("cluster", CLUSTER_NAME, "create"):
        return {}  # CREATE on the cluster: any topic
    out: dict[int, int] = {}
    for i, item in enumerate(getattr(req, attr) or ()):
        r = resource(item)
        if r is not None and not caller.allowed(*r, quiet=quiet):
            out[i] = CODES[r[0]]
    return out


def _items_refusal(api_key: int, req: Any, version: int, refused: dict[int, int]) -> Any:
    """A response answering only the refused items of `req`, each with its code (no request-level error)."""
    attr, _, answers, _ = ITEMS[api_key]
    items = getattr(req, attr) or []
    body: dict[str, Any] | None = None
    for code in sorted(set(refused.values())):
        part = SimpleNamespace(**{attr: [items[i] for i, c in sorted(refused.items()) if c == code]})
        d = REFUSALS[api_key](part, version, code)
        if body is None:
            body = d
        else:
            body[answers].extend(d[answers])
    assert body is not None
    if "error_code" in body:
        body["error_code"] = 0
    return build(APIS[api_key].response, version, **body)


def _add_partitions_refusal(req: Any, version: int, refused: set[str]) -> Any:
    return build(APIS[ADD_PARTITIONS_TO_TXN].response, version, throttle_time_ms=0, error_code=0,
                 results_by_transaction=[], results_by_topic_v3_and_below=[
        dict(name=t.name, results_by_partition=[dict(
            partition_index=p, partition_error_code=TOPIC_AUTHORIZATION_FAILED if t.name in refused
            else OPERATION_NOT_ATTEMPTED) for p in t.partitions]) for t in req.v3_and_below_topics or []])


def refused_topics(req: Any, caller: Caller, api_key: int = PRODUCE) -> frozenset[str]:
    """The topics of a Produce or Fetch request (allowed as a whole) that the rules refuse: answered per topic
    by the handler."""
    if not caller.access.authorizer.rules:
        return frozenset()
    attr, resource, _, _ = ITEMS[api_key]
    items = getattr(req, attr)
    return frozenset(resource(items[i])[1] for i in _refused(api_key, req, caller))  # type: ignore[index]


def split(api_key: int, req: Any, caller: Caller) -> tuple[Any, dict[int, int]]:
    """The request without the items the rules refuse (for its handler), and those items with their codes
    (for `merge`); `req` itself and nothing refused when the request lists no such items."""
    if api_key not in ITEMS or not caller.access.authorizer.rules:
        return req, {}
    refused = _refused(api_key, req, caller)
    if not refused:
        return req, {}
    attr = ITEMS[api_key][0]
    allowed = copy.copy(req)
    setattr(allowed, attr, [x for i, x in enumerate(getattr(req, attr)) if i not in refused])
    return allowed, refused


def merge(api_key: int, req: Any, version: int, resp: Any, refused: dict[int, int]) -> Any:
    """The handler's response to the allowed items with the refused items' answers, in the request's order."""
    if not refused or resp is None:
        return resp
    attr, resource, answers, field = ITEMS[api_key]
    got = list(getattr(resp, answers)) + list(getattr(_items_refusal(api_key, req, version, refused), answers))
    order: dict[str, int] = {}
    for i, item in enumerate(getattr(req, attr)):
        r = resource(item)
        order.setdefault(str(getattr(item, field, r[1] if r else item)), i)
    got.sort(key=lambda x: order.get(str(getattr(x, field)), len(order)))
    setattr(resp, answers, got)
    return resp


def refusal(api_key: int, req: Any, version: int, principal: Principal, caller: Caller | None = None) -> Any | None:
    """The response refusing `req` to `principal` (its scopes, then with `caller` the access control rules),
    or None when it may go on (maybe in part: `split`)."""
    api = APIS[api_key]
    code = kafka_denial(api.name, principal)
    if code is None and caller is not None and caller.access.authorizer.rules:
        code = _denied_code(api_key, req, caller)
        if code is None and api_key == ADD_PARTITIONS_TO_TXN:
            refused = {t.name for t in req.v3_and_below_topics or [] if not caller.allowed("topic", t.name, "write")}
            return _add_partitions_refusal(req, version, refused) if refused else None
        if code is None and api_key in ITEMS and api_key != PRODUCE:
            items = getattr(req, ITEMS[api_key][0]) or []
            refused_items = _refused(api_key, req, caller, quiet=True) if items else {}
            if items and len(refused_items) == len(items):  # every one refused: nothing for the handler
                return _items_refusal(api_key, req, version, _refused(api_key, req, caller))
            # else the handler gets the allowed items, the refused ones audited then (split, refused_topics)
    if code is None:
        return None
    return build(api.response, version, **REFUSALS[api_key](req, version, code))


def error_answer(api_key: int, req: Any, version: int, code: int) -> Any | None:
    """The response answering every item of `req` with `code`, in the shape of the API's response (a fault that
    heals met by its handler: api/kafka/server.py); None for an API without such an answer (Metadata, ApiVersions,
    SASL)."""
    shape = REFUSALS.get(api_key)
    return None if shape is None else build(APIS[api_key].response, version, **shape(req, version, code))


def filter_response(api_key: int, req: Any, resp: Any, caller: Caller) -> Any:
    """A Metadata or ListGroups response cut to what the caller may DESCRIBE (module doc); others as they are."""
    access, who, host = caller.access, caller.principal.name, caller.host
    if not access.active:
        return resp
    if api_key == METADATA:
        listing = req.topics is None or not req.topics
        kept = []
        for t in resp.topics:
            if access.allowed(who, host, "describe", "topic", t.name):
                kept.append(t)
            elif not listing:  # named: refused, nothing about the topic told
                _allowed(caller, "topic", t.name, "describe")  # the denial's audit line
                t.error_code, t.partitions = TOPIC_AUTHORIZATION_FAILED, []
                if hasattr(t, "is_internal"):
                    t.is_internal = False
                kept.append(t)
        resp.topics = kept
    elif api_key == OFFSET_FETCH and not req.topics and getattr(resp, "topics", None):  # all of a group's offsets
        resp.topics = [t for t in resp.topics if access.allowed(who, host, "describe", "topic", t.name)]
    elif api_key == LIST_GROUPS and not access.allowed(who, host, "describe", "cluster", CLUSTER_NAME):
        resp.groups = [g for g in resp.groups if access.allowed(who, host, "describe", "group", g.group_id)]
    return resp


#: admin APIs -> (event, operation, resource type, the response's list, its name field) for the audit log
_ADMIN_CHANGES: dict[int, tuple[str, str, str, str, str]] = {
    19: ("topic_create", "create", "topic", "topics", "name"),
    20: ("topic_delete", "delete", "topic", "responses", "name"),
    37: ("topic_partitions_add", "alter", "topic", "results", "name"),
    33: ("config_alter", "alter_configs", "config", "responses", "resource_name"),
    44: ("config_alter", "alter_configs", "config", "responses", "resource_name"),
    42: ("group_delete", "delete", "group", "results", "group_id"),
}


def may_create_topic(caller: Caller, name: str) -> int | None:
    """None when a Metadata request of `caller` may create the topic `name` (node setting auto_create_topics), as
    its CreateTopics would be allowed; else the code that topic is answered with. Scopes that do not allow
    CreateTopics leave it UNKNOWN_TOPIC_OR_PARTITION (as with auto-creation off: a read-only consumer keeps
    waiting for it); access control rules need CREATE on the cluster or on the topic, and refuse it with
    TOPIC_AUTHORIZATION_FAILED (Kafka's answer), the denial audited. An allowed creation is audited as
    CreateTopics' are (topic_create)."""
    if kafka_denial(APIS[CREATE_TOPICS].name, caller.principal) is not None:
        return UNKNOWN_TOPIC_OR_PARTITION
    if caller.access.authorizer.rules and not (caller.allowed_quietly("cluster", CLUSTER_NAME, "create")
                                               or caller.allowed("topic", name, "create")):
        return TOPIC_AUTHORIZATION_FAILED
    return None


def audit_topic_created(caller: Caller, name: str, code: int) -> None:
    """The audit line of a topic a Metadata request created (or failed to), as audit_admin writes CreateTopics'."""
    caller.access.admin_change("topic_create", caller.principal.name, "topic", name, "create", "kafka",
                               **({} if code == 0 else {"error_code": code}))


def audit_admin(api_key: int, resp: Any, caller: Caller) -> None:
    """One audit line per resource an admin API changed (or failed to), with its error code as the result."""
    change = _ADMIN_CHANGES.get(api_key)
    if change is None or resp is None:
        return
    event, op, rtype, items, field = change
    for item in getattr(resp, items, None) or []:
        code = int(getattr(item, "error_code", 0) or 0)
        caller.access.admin_change(event, caller.principal.name, rtype, str(getattr(item, field, "")), op, "kafka",
                                   **({} if code == 0 else {"error_code": code}))
