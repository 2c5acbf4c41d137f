"""Bearer tokens with scopes (read, produce, admin; `admin` includes the others), checked through the shared
Authenticator (api/security/): tokens kept as SHA-256 hashes, compared in constant time. With no tokens
configured every request is allowed; `mqindex serve` refuses that on a non-loopback address unless
--allow-anonymous is given (api/security/protected.py).

A route's scope is checked by its dependency (`require`), which FastAPI runs only after it has read and parsed
the request's body. So `AuthenticateFirst` refuses a request with a body (POST, PUT, PATCH) and no known token
before any of the body is read: an anonymous caller cannot make the server read and parse up to the body limit
(every such route needs a scope).

Past the scope, the access control rules (api/security/access.py, the same as the Kafka listener's) decide per
resource: `require` checks the route's topic (path or query parameter `topic`) or group (path `group`) with the
operation its scope and method mean (read: READ, or DESCRIBE for a topic's description; produce: WRITE; admin:
DELETE, ALTER_CONFIGS, or ALTER/DESCRIBE on the cluster for the other admin routes). A refusal is a 403 whose body
is the same whether the topic exists or not. Routes answering for many topics filter with `may`. Every admin
change made over HTTP (and its result) is one audit line (`AuthenticateFirst` writes it once answered)."""

from __future__ import annotations

import json
from collections.abc import Callable

from fastapi import FastAPI, HTTPException, Request
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from api.security.access import OPEN, AccessControl
from api.security.authenticator import Authenticator
from api.security.principals import ANONYMOUS, Principal
from broker.metadata.acls import CLUSTER_NAME
from broker.partitions.message_id import decode_message_id


def authenticator(app: FastAPI) -> Authenticator:
    """The app's Authenticator, made from its settings on first use."""
    auth: Authenticator | None = getattr(app.state, "authenticator", None)
    if auth is None:
        settings = app.state.settings
        auth = app.state.authenticator = Authenticator(settings.tokens, getattr(settings, "users", {}))
    return auth


UNAUTHENTICATED = {"error": "missing or unknown bearer token", "field": "authorization"}


def _bearer(auth: Authenticator, header: str) -> Principal | None:
    scheme, _, token = header.partition(" ")
    return auth.bearer(token.strip()) if scheme.lower() == "bearer" and token.strip() else None


def principal(request: Request) -> Principal:
    """The caller of `request`, or a 401 when tokens are configured and none (or an unknown one) is given."""
    auth = authenticator(request.app)
    if not len(auth.tokens):
        return ANONYMOUS
    found = _bearer(auth, request.headers.get("authorization", ""))
    if found is None:
        raise HTTPException(401, detail=UNAUTHENTICATED, headers={"WWW-Authenticate": "Bearer"})
    return found


def access(app: FastAPI) -> AccessControl:
    """The process's access control (set by `mqindex serve`; none: every check allows)."""
    return getattr(app.state, "access", None) or OPEN


FORBIDDEN = {"error": "not authorized", "field": "authorization"}
_TOPIC_OPS = {"read": "read", "produce": "write"}


def _client_host(request: Request) -> str:
    return request.client.host if request.client else "*"


def may(request: Request, operation: str, resource_type: str, name: str) -> bool:
    """Whether the caller may do `operation` on the resource (no audit line: for filtering lists)."""
    control = access(request.app)
    return not control.active or control.allowed(principal(request).name, _client_host(request), operation,
                                                 resource_type, name)


def cluster_refusal(who: str, operation: str) -> str:
    """Why `who` may not do `operation` on the cluster once rules exist, and the two ways to grant it. Named for
    the cluster only: it always exists, so the answer tells nothing a topic's refusal must not (its existence)."""
    return (f"not authorized: {who} is not a superuser and no rule allows it {operation.upper()} on the cluster "
            f"(access rules exist, so a token's admin scope is not enough): add \"{who}\" to superusers in the "
            f"server's config, or have a superuser run `mqindex acls add --principal User:{who} --cluster "
            f"--operation {operation}`")


def check(request: Request, operation: str, resource_type: str, name: str) -> None:
    """A 403 (audited) unless the caller may do `operation` on the resource."""
    control = access(request.app)
    who = principal(request).name
    if control.active and not control.check(who, _client_host(request), operation, resource_type, name, "http"):
        if resource_type == "cluster":
            raise HTTPException(403, detail={**FORBIDDEN, "error": cluster_refusal(who, operation)})
        raise HTTPException(403, detail=FORBIDDEN)


async def check_message_id(request: Request, msg_id: str) -> None:
    """A 403 before anything is read when the message id names a topic the caller may not read: the answer is
    then the same whether the message exists or not."""
    control = access(request.app)
    parts = getattr(request.app.state.backend, "partitions", None)
    if not control.active or parts is None:
        return
    name = await run_in_threadpool(parts.name_of, decode_message_id(msg_id).topic_id)
    if name is not None:
        check(request, "read", "topic", name)


def _resource_of(request: Request, scope: str) -> tuple[str, str, str]:
    """The resource a route's request names and the operation its scope and method mean (module doc)."""
    method = request.method
    topic = request.path_params.get("topic") or request.query_params.get("topic")
    if topic:
        if scope == "admin":
            return "topic", topic, {"DELETE": "delete", "PATCH": "alter_configs"}.get(method, "alter")
        if scope == "read" and request.url.path.rstrip("/").endswith("/topics/" + topic):
            return "topic", topic, "describe"
        return "topic", topic, _TOPIC_OPS.get(scope, "read")
    group = request.path_params.get("group")
    if group:
        return "group", group, {"read": "describe"}.get(scope, "delete" if method == "DELETE" else "read")
    if scope == "admin":
        if request.url.path.rstrip("/") == "/v1/topics" and method == "POST":
            return "cluster", CLUSTER_NAME, "create"
        return "cluster", CLUSTER_NAME, "describe" if method == "GET" else "alter"
    return "", "", ""


_AUDITED_METHODS = {"POST", "PUT", "PATCH", "DELETE"}


def _audited(path: str, method: str) -> bool:
    """An admin change: a mutating request on topics (not a produce), groups or /v1/admin."""
    return method in _AUDITED_METHODS and not path.endswith("/messages") and path.startswith(
        ("/v1/topics", "/v1/groups", "/v1/admin"))


class AuthenticateFirst:
    """A request with a body and no known bearer token is answered 401 before its body is read (module doc); an
    admin change is written to the audit log with its answer's status once answered."""

    METHODS = {"POST", "PUT", "PATCH"}

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and _audited(scope["path"], scope["method"]):
            send = self._auditing(scope, send)
        if scope["type"] == "http" and scope["method"] in self.METHODS:
            auth = authenticator(scope["app"])
            header = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
            if len(auth.tokens) and _bearer(auth, header) is None:
                body = json.dumps(UNAUTHENTICATED).encode()
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)

    @staticmethod
    def _auditing(scope: Scope, send: Send) -> Send:
        app = scope["app"]

        async def send_and_audit(message: dict[str, object]) -> None:
            if message["type"] == "http.response.start":
                auth = authenticator(app)
                header = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
                who = (_bearer(auth, header) if len(auth.tokens) else ANONYMOUS) or Principal("unauthenticated",
                                                                                             frozenset())
                status = int(str(message["status"]))
                path = scope["path"]
                if status not in (401, 403):  # refusals are audited as denials where they are decided
                    access(app).audit.record(
                        "http_admin", f"User:{who.name}", "http", path, scope["method"].lower(),
                        "ok" if status < 400 else f"failed {status}", interface="http")
            await send(message)

        return send_and_audit


def require(scope: str) -> Callable[[Request], None]:
    def check_request(request: Request) -> None:
        if not principal(request).allows(scope):
            raise HTTPException(403, detail={"error": f"token lacks the {scope!r} scope", "field": "authorization"})
        rtype, name, operation = _resource_of(request, scope)
        if rtype:
            check(request, operation, rtype, name)

    return check_request
