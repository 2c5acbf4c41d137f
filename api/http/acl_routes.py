"""/v1/admin/acls: the access control rules over HTTP, the same rules as Kafka's CreateAcls/DescribeAcls/
DeleteAcls (api/security/access.py; stored in the metadata database, enforced by every node within a second).

- GET    /v1/admin/acls?principal=&resource_type=&resource_name=&pattern_type=&operation=&permission=&host=
         the rules matching every given field (pattern_type=match: the rules applying to resource_name)
- POST   /v1/admin/acls    {"rules": [{principal, resource_type, resource_name, operation, permission?,
         pattern_type?, host?}]} -> 201 {"added": N, "rules": [...]}; a bad field is a 400 naming it
- DELETE /v1/admin/acls?...  the same filter as GET, at least one field -> {"removed": [...]}
- GET    /v1/admin/acls/my-rights?topic=T&group=G (each repeatable)  what the caller may do, as the routes check
         it (its scope and the rules): on the cluster, and on each topic and group named; any authenticated
         caller may ask (the console shows and enables only what it may do from this answer)

The caller needs the admin scope and, once rules exist, DESCRIBE (GET) or ALTER (POST, DELETE) on the cluster
(api/http/auth.py `require`). Every change is an audit line.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, Field, field_validator

from api.http.auth import access, may, principal, require
from api.http.errors import client_error
from api.http.routes import ERRORS
from api.security.authorizer import kafka_principal
from api.security.principals import SCOPES
from broker.metadata.acls import (
    CLUSTER_NAME,
    OPERATIONS,
    PATTERN_TYPES,
    PERMISSIONS,
    RESOURCE_TYPES,
    WILDCARD,
    AclError,
    AclFilter,
    AclRule,
)

router = APIRouter(responses=ERRORS)


class RuleIn(BaseModel):
    """A rule as the OpenAPI document states it; names are also taken in any case and with '-' for '_'."""

    principal: str = Field(pattern=r"^[^:]*:.+$", description="User:NAME, or User:* for everyone")
    resource_type: Literal[RESOURCE_TYPES]  # type: ignore[valid-type]
    resource_name: str = Field(min_length=1)
    operation: Literal[OPERATIONS]  # type: ignore[valid-type]
    permission: Literal[PERMISSIONS] = "allow"  # type: ignore[valid-type]
    pattern_type: Literal[PATTERN_TYPES] = "literal"  # type: ignore[valid-type]
    host: str = WILDCARD

    @field_validator("resource_type", "operation", "permission", "pattern_type", mode="before")
    @classmethod
    def _name(cls, value: Any) -> Any:
        return value.strip().lower().replace("-", "_") if isinstance(value, str) else value


class RulesIn(BaseModel):
    rules: list[RuleIn] = Field(min_length=1, max_length=10_000)


Opt = Annotated[str | None, Query()]


def _filter(principal: str | None, resource_type: str | None, resource_name: str | None, pattern_type: str | None,
            operation: str | None, permission: str | None, host: str | None) -> AclFilter:
    return AclFilter(principal=principal, host=host, resource_type=resource_type, pattern_type=pattern_type,
                     resource_name=resource_name, operation=operation, permission=permission)


def _store(request: Request) -> Any:
    control = access(request.app)
    if control.table is None:
        # as compaction on a server without a broker: the resource is not there (a 404, not a server fault)
        raise client_error("acls", "this server keeps no access rules (it has no metadata database)", status=404)
    return control


@router.get("/v1/admin/acls", dependencies=[Depends(require("admin"))])
async def list_acls(request: Request, principal_: Annotated[str | None, Query(alias="principal")] = None,
                    resource_type: Opt = None, resource_name: Opt = None, pattern_type: Opt = None,
                    operation: Opt = None, permission: Opt = None, host: Opt = None) -> dict[str, Any]:
    f = _filter(principal_, resource_type, resource_name, pattern_type, operation, permission, host)
    return {"rules": [r.as_dict() for r in access(request.app).rules(f)]}


@router.post("/v1/admin/acls", status_code=201, dependencies=[Depends(require("admin"))])
async def add_acls(body: RulesIn, request: Request) -> dict[str, Any]:
    rules = []
    for i, r in enumerate(body.rules):
        try:
            rules.append(AclRule.make(r.principal, r.resource_type, r.resource_name, r.operation, r.permission,
                                      r.pattern_type, r.host))
        except AclError as exc:
            raise client_error(f"rules.{i}", str(exc)) from None
    control = _store(request)
    who, was_active = principal(request).name, control.active
    added = control.add(rules, who, "http")
    out: dict[str, Any] = {"added": added, "rules": [r.as_dict() for r in rules]}
    if not was_active and not may(request, "alter", "cluster", CLUSTER_NAME):
        # as Kafka, the first rule turns access control on and the caller may lose what its scope gave it: said
        # now, not at its next request (Kafka's tools say nothing)
        out["warning"] = (f"access control is on from this rule: {who} is not a superuser and no rule allows it "
                          f"ALTER on the cluster, so it cannot add, list or remove rules any more; add \"{who}\" to "
                          f"superusers in the server's config (docs/OPERATIONS.md, Security)")
    return out


@router.delete("/v1/admin/acls", dependencies=[Depends(require("admin"))])
async def remove_acls(request: Request, principal_: Annotated[str | None, Query(alias="principal")] = None,
                      resource_type: Opt = None, resource_name: Opt = None, pattern_type: Opt = None,
                      operation: Opt = None, permission: Opt = None, host: Opt = None) -> dict[str, Any]:
    f = _filter(principal_, resource_type, resource_name, pattern_type, operation, permission, host)
    if f == AclFilter():
        raise client_error("filter", "give at least one field (principal, resource_type, ...) to remove rules")
    control = _store(request)
    removed = control.remove([f], principal(request).name, "http")[0]
    return {"removed": [r.as_dict() for r in removed]}


#: what the console offers and what each needs, as the HTTP routes check it: (scope, operation)
CLUSTER_RIGHTS = {"describe": ("admin", "describe"), "alter": ("admin", "alter"), "create_topics": ("admin", "create")}
TOPIC_RIGHTS = {"describe": ("read", "describe"), "read": ("read", "read"), "produce": ("produce", "write"),
                "delete": ("admin", "delete"), "alter_configs": ("admin", "alter_configs")}
GROUP_RIGHTS = {"describe": ("read", "describe"), "reset_offsets": ("admin", "read"), "delete": ("admin", "delete")}
MAX_NAMED = 2000
Names = Annotated[list[str], Query(max_length=MAX_NAMED)]


class MyRights(BaseModel):
    principal: str = Field(description="the caller as the rules name it (User:NAME)")
    scopes: list[str] = Field(description="the scopes of the caller's token")
    rules_active: bool = Field(description="whether any rule exists (without one, the scopes alone decide)")
    superuser: bool
    cluster: dict[str, bool] = Field(description="describe (list rules), alter (change rules, reassign, compact), "
                                                 "create_topics")
    topics: dict[str, dict[str, bool]] = Field(description="per topic named: describe, read, produce, delete, "
                                                           "alter_configs")
    groups: dict[str, dict[str, bool]] = Field(description="per group named: describe, reset_offsets, delete")


@router.get("/v1/admin/acls/my-rights", response_model=MyRights)
async def my_rights(request: Request, topic: Names = [], group: Names = []) -> dict[str, Any]:  # noqa: B006
    """What the caller may do on the cluster and on each topic and group named (its scope and the rules; the
    answer tells nothing of whether a topic or group exists)."""
    caller = principal(request)
    control = access(request.app)

    def rights(table: dict[str, tuple[str, str]], rtype: str, name: str) -> dict[str, bool]:
        return {right: caller.allows(scope) and may(request, op, rtype, name)
                for right, (scope, op) in table.items()}

    return {"principal": kafka_principal(caller.name), "scopes": sorted(s for s in SCOPES if caller.allows(s)),
            "rules_active": control.active, "superuser": kafka_principal(caller.name) in control.authorizer.superusers,
            "cluster": rights(CLUSTER_RIGHTS, "cluster", CLUSTER_NAME),
            "topics": {t: rights(TOPIC_RIGHTS, "topic", t) for t in topic},
            "groups": {g: rights(GROUP_RIGHTS, "group", g) for g in group}}
