"""CreateAcls, DescribeAcls and DeleteAcls (versions 1-3, the ones kafka-python's and librdkafka's admin clients
send): the Kafka face of the access control rules (api/security/access.py, stored in the metadata database).

The wire enums are Kafka's (org.apache.kafka.common.acl / resource): resource types, pattern types (ANY and
MATCH only in filters), operations and permissions; a rule or filter with a value outside them, or ANY where a
rule needs a value, is answered INVALID_REQUEST with a message naming the field. The callers' rights to these
APIs (ALTER on the cluster to change, DESCRIBE to list) are checked before (authorization.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from api.kafka import errors
from api.kafka.authorization import Caller
from api.kafka.context import Context
from api.kafka.schemas import APIS, build
from broker.metadata.acls import AclError, AclFilter, AclRule

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
SECURITY_DISABLED = 54
ANY = 1
RESOURCE_TYPES = {2: "topic", 3: "group", 4: "cluster", 5: "transactional_id"}
PATTERN_TYPES = {3: "literal", 4: "prefixed"}
MATCH = 2
OPERATIONS = {2: "all", 3: "read", 4: "write", 5: "create", 6: "delete", 7: "alter", 8: "describe",
              9: "cluster_action", 10: "describe_configs", 11: "alter_configs", 12: "idempotent_write"}
PERMISSIONS = {2: "deny", 3: "allow"}
_CODES = {name: {v: k for k, v in table.items()} for name, table in (
    ("resource_type", RESOURCE_TYPES), ("pattern_type", PATTERN_TYPES), ("operation", OPERATIONS),
    ("permission", PERMISSIONS))}


def _value(table: dict[int, str], code: int, field: str) -> str:
    if code not in table:
        raise AclError(f"{field} {code} is not one of {sorted(table)}")
    return table[code]


def _any(table: dict[int, str], code: int, field: str) -> str | None:
    return None if code == ANY else _value(table, code, field)


def rule_of(c: Any) -> AclRule:
    return AclRule.make(c.principal, _value(RESOURCE_TYPES, c.resource_type, "resource_type"), c.resource_name,
                        _value(OPERATIONS, c.operation, "operation"),
                        _value(PERMISSIONS, c.permission_type, "permission_type"),
                        _value(PATTERN_TYPES, c.resource_pattern_type, "pattern_type"), c.host)


def filter_of(f: Any) -> AclFilter:
    pattern = "match" if f.pattern_type_filter == MATCH else _any(PATTERN_TYPES, f.pattern_type_filter,
                                                                      "pattern_type_filter")
    return AclFilter(principal=f.principal_filter, host=f.host_filter,
                     resource_type=_any(RESOURCE_TYPES, f.resource_type_filter, "resource_type_filter"),
                     pattern_type=pattern, resource_name=f.resource_name_filter,
                     operation=_any(OPERATIONS, f.operation, "operation"),
                     permission=_any(PERMISSIONS, f.permission_type, "permission_type"))


def _binding(r: AclRule) -> dict[str, Any]:
    return dict(principal=r.principal, host=r.host, operation=_CODES["operation"][r.operation],
                permission_type=_CODES["permission"][r.permission])


def _resource(r: AclRule) -> dict[str, Any]:
    return dict(resource_type=_CODES["resource_type"][r.resource_type], resource_name=r.resource_name,
                pattern_type=_CODES["pattern_type"][r.pattern_type])


async def create_acls(ctx: Context, caller: Caller, req: Any, version: int) -> Any:
    results = []
    rules = []
    for c in req.creations:
        try:
            rules.append(rule_of(c))
            results.append(dict(error_code=errors.NONE, error_message=None))
        except AclError as exc:
            results.append(dict(error_code=errors.INVALID_REQUEST, error_message=str(exc)))
    if caller.access.table is None:
        results = [dict(error_code=SECURITY_DISABLED, error_message="no rules store") for _ in results]
    elif rules:
        await ctx.run(caller.access.add, rules, caller.principal.name, "kafka")
    return build(APIS[CREATE_ACLS].response, version, throttle_time_ms=0, results=results)


async def describe_acls(ctx: Context, caller: Caller, req: Any, version: int) -> Any:
    resp = APIS[DESCRIBE_ACLS].response
    try:
        f = filter_of(req)
    except AclError as exc:
        return build(resp, version, throttle_time_ms=0, error_code=errors.INVALID_REQUEST, error_message=str(exc),
                     resources=[])
    by_resource: dict[tuple[str, str, str], list[AclRule]] = {}
    for r in await ctx.run(caller.access.rules, f):
        by_resource.setdefault((r.resource_type, r.resource_name, r.pattern_type), []).append(r)
    return build(resp, version, throttle_time_ms=0, error_code=errors.NONE, error_message=None, resources=[
        dict(_resource(rs[0]), acls=[_binding(r) for r in rs]) for rs in by_resource.values()])


async def delete_acls(ctx: Context, caller: Caller, req: Any, version: int) -> Any:
    filters: list[AclFilter | AclError] = []
    for f in req.filters:
        try:
            filters.append(filter_of(f))
        except AclError as exc:
            filters.append(exc)
    good = [f for f in filters if isinstance(f, AclFilter)]
    if caller.access.table is None:
        filters = [AclError("no rules store") for _ in filters]
        good = []
    removed = iter(await ctx.run(caller.access.remove, good, caller.principal.name, "kafka") if good else [])
    out = []
    for f in filters:
        if isinstance(f, AclError):
            out.append(dict(error_code=errors.INVALID_REQUEST, error_message=str(f), matching_acls=[]))
            continue
        out.append(dict(error_code=errors.NONE, error_message=None, matching_acls=[
            dict(_resource(r), **_binding(r), error_code=errors.NONE, error_message=None) for r in next(removed)]))
    return build(APIS[DELETE_ACLS].response, version, throttle_time_ms=0, filter_results=out)


HANDLERS: dict[int, Callable[[Context, Caller, Any, int], Awaitable[Any]]] = {
    CREATE_ACLS: create_acls, DESCRIBE_ACLS: describe_acls, DELETE_ACLS: delete_acls}
