"""/v1/admin/acls: the access control rules over HTTP, the same rules as Kafka's CreateAcls/DescribeAcls/
DeleteAcls (api/security/access.py; stored in the metadata database, enforced by every node within a second).

- GET    /v1/admin/acls?principal=&resource_type=&resource_name=&pattern_type=&operation=&permission=&host=
         the rules matching every given field (pattern_type=match: the rules applying to resource_name)
- POST   /v1/admin/acls    {"rules": [{principal, resource_type, resource_name, operation, permission?,
         pattern_type?, host?}]} -> 201 {"added": N, "rules": [...]}; a bad field is a 400 naming it
- DELETE /v1/admin/acls?...  the same filter as GET, at least one field -> {"removed": [...]}

The caller needs the admin scope and, once rules exist, DESCRIBE (GET) or ALTER (POST, DELETE) on the cluster
(api/http/auth.py `require`). Every change is an audit line.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, Field

from api.http.auth import access, principal, require
from api.http.errors import client_error
from broker.metadata.acls import WILDCARD, AclError, AclFilter, AclRule

router = APIRouter()


class RuleIn(BaseModel):
    principal: str = Field(description="User:NAME, or User:* for everyone")
    resource_type: str = Field(description="topic, group, cluster or transactional_id")
    resource_name: str = Field(min_length=1)
    operation: str = Field(description="all, read, write, create, delete, alter, describe, describe_configs, "
                                       "alter_configs, ...")
    permission: str = "allow"
    pattern_type: str = "literal"
    host: str = WILDCARD


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
        raise client_error("acls", "this server has no rules store", status=503)
    return control


@router.get("/v1/admin/acls", dependencies=[Depends(require("admin"))])
async def list_acls(request: Request, principal_: Annotated[str | None, Query(alias="principal")] = None,
                    resource_type: Opt = None, resource_name: Opt = None, pattern_type: Opt = None,
                    operation: Opt = None, permission: Opt = None, host: Opt = None) -> dict[str, Any]:
    f = _filter(principal_, resource_type, resource_name, pattern_type, operation, permission, host)
    return {"rules": [r.as_dict() for r in access(request.app).rules(f)]}


@router.post("/v1/admin/acls", status_code=201, dependencies=[Depends(require("admin"))])
async def add_acls(body: RulesIn, request: Request) -> dict[str, Any]:
    control = _store(request)
    rules = []
    for i, r in enumerate(body.rules):
        try:
            rules.append(AclRule.make(r.principal, r.resource_type, r.resource_name, r.operation, r.permission,
                                      r.pattern_type, r.host))
        except AclError as exc:
            raise client_error(f"rules.{i}", str(exc)) from None
    added = control.add(rules, principal(request).name, "http")
    return {"added": added, "rules": [r.as_dict() for r in rules]}


@router.delete("/v1/admin/acls", dependencies=[Depends(require("admin"))])
async def remove_acls(request: Request, principal_: Annotated[str | None, Query(alias="principal")] = None,
                      resource_type: Opt = None, resource_name: Opt = None, pattern_type: Opt = None,
                      operation: Opt = None, permission: Opt = None, host: Opt = None) -> dict[str, Any]:
    control = _store(request)
    f = _filter(principal_, resource_type, resource_name, pattern_type, operation, permission, host)
    if f == AclFilter():
        raise client_error("filter", "give at least one field (principal, resource_type, ...) to remove rules")
    removed = control.remove([f], principal(request).name, "http")[0]
    return {"removed": [r.as_dict() for r in removed]}
