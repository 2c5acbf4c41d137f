"""SASL/PLAIN (RFC 4616): the message is `authzid NUL authcid NUL password`, UTF-8. Only ever over TLS in
production: the password travels as is (docs/OPERATIONS.md, Security)."""

from __future__ import annotations

from dataclasses import dataclass

from api.security.scram import SaslError

MECHANISM = "PLAIN"
MAX_FIELD_BYTES = 255  # RFC 4616


@dataclass(frozen=True)
class PlainMessage:
    authzid: str
    user: str
    password: str

    def __repr__(self) -> str:  # never the password
        return f"PlainMessage(authzid={self.authzid!r}, user={self.user!r}, password=***)"


def parse_plain(message: bytes) -> PlainMessage:
    parts = message.split(b"\0")
    if len(parts) != 3:
        raise SaslError("a SASL/PLAIN message is authzid NUL user NUL password")
    if any(len(p) > MAX_FIELD_BYTES for p in parts):
        raise SaslError(f"a SASL/PLAIN field is longer than {MAX_FIELD_BYTES} bytes")
    try:
        authzid, user, password = (p.decode() for p in parts)
    except UnicodeDecodeError:
        raise SaslError("a SASL/PLAIN message is not UTF-8") from None
    if not user or not password:
        raise SaslError("a SASL/PLAIN message needs a user and a password")
    if authzid and authzid != user:
        raise SaslError("SASL/PLAIN authorization identity must be the user")
    return PlainMessage(authzid, user, password)
