"""SASL on the Kafka listener: SaslHandshake and SaslAuthenticate, PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, one
Session per connection holding who the client is.

On a listener with an authenticator, a connection must complete SASL before any request other than ApiVersions,
SaslHandshake and SaslAuthenticate (the server closes it otherwise, as Kafka does). SaslHandshake v1 is followed
by SaslAuthenticate requests; after SaslHandshake v0 the SASL tokens travel as raw size-prefixed frames (the
exchange of Kafka before 1.0). A failed authentication is answered SASL_AUTHENTICATION_FAILED and the
connection closed. The credentials and scopes are api/security's, the same as the HTTP tokens'.
"""

from __future__ import annotations

import logging
from typing import Any

from api.kafka.schemas import APIS, build
from api.security.authenticator import Authenticator
from api.security.principals import (
    ANONYMOUS,
    ILLEGAL_SASL_STATE,
    SASL_AUTHENTICATION_FAILED,
    UNSUPPORTED_SASL_MECHANISM,
    Principal,
)
from api.security.sasl_plain import MECHANISM as PLAIN
from api.security.scram import MECHANISM as SCRAM
from api.security.scram import MECHANISM_512 as SCRAM_512
from api.security.scram import SaslError, ScramServer

log = logging.getLogger("mqindex.kafka.sasl")

MECHANISMS = [PLAIN, SCRAM, SCRAM_512]
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


def peer_host(peer: str) -> str:
    """The address of a peer given as str((host, port)) or str((host, port, flow, scope))."""
    text = peer.strip("()[]")
    return text.split(",")[0].strip().strip("'\"") or "*"


class Session:
    """One connection's authentication state. Without an authenticator every caller is ANONYMOUS."""

    def __init__(self, authenticator: Authenticator | None, peer: str) -> None:
        self.authenticator = authenticator
        self.peer = peer
        self.host = peer_host(peer)  # the client's address, as the access control rules name hosts
        self.principal: Principal | None = ANONYMOUS if authenticator is None else None
        self.mechanism: str | None = None
        self.raw = False  # after SaslHandshake v0: the next frames are raw SASL tokens
        self.failed = False  # the connection is closed once the answer is sent
        self.caller: Any = None  # api.kafka.authorization.Caller, made by the server once authenticated
        self._scram: ScramServer | None = None
        self._scram_steps = 0

    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    def handshake(self, req: Any, version: int) -> Any:
        code = 0
        if self.authenticator is None or self.mechanism is not None:
            code = ILLEGAL_SASL_STATE
            self.failed = True
        elif req.mechanism not in MECHANISMS:
            code = UNSUPPORTED_SASL_MECHANISM
            self.failed = True
        else:
            self.mechanism = req.mechanism
            self.raw = version == 0
            if self.mechanism in (SCRAM, SCRAM_512):
                self._scram = self.authenticator.scram(self.mechanism)
        return build(APIS[SASL_HANDSHAKE].response, version, error_code=code, mechanisms=MECHANISMS)

    def step(self, token: bytes) -> bytes:
        """One SASL token of the client -> the server's token; SaslError when authentication fails."""
        if self.authenticator is None or self.mechanism is None or self.authenticated:
            raise SaslError("SaslAuthenticate without a SaslHandshake before it")
        if self.mechanism == PLAIN:
            self.principal = self.authenticator.plain(token)
            out = b""
        else:
            assert self._scram is not None
            self._scram_steps += 1
            if self._scram_steps == 1:
                return self._scram.first(token)
            out = self._scram.final(token)
            self.principal = self.authenticator.principal_of(self._scram)
        log.info("kafka client authenticated", extra={"peer": self.peer, "principal": self.principal.name,
                                                      "mechanism": self.mechanism})
        return out

    def authenticate(self, req: Any, version: int) -> Any:
        resp = APIS[SASL_AUTHENTICATE].response
        try:
            token = self.step(bytes(req.auth_bytes))
        except SaslError as exc:
            self.failed = True
            log.warning("kafka SASL authentication failed", extra={"peer": self.peer, "error": str(exc),
                                                                   "mechanism": self.mechanism})
            return build(resp, version, error_code=SASL_AUTHENTICATION_FAILED, error_message=str(exc),
                         auth_bytes=b"", session_lifetime_ms=0)
        return build(resp, version, error_code=0, error_message=None, auth_bytes=token, session_lifetime_ms=0)

    def raw_token(self, token: bytes) -> bytes:
        """A raw SASL token (after SaslHandshake v0); SaslError closes the connection."""
        out = self.step(token)
        if self.authenticated:
            self.raw = False
        return out
