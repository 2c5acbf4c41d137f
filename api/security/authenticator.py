"""One place that answers "who is this?" for both listeners: HTTP bearer tokens, and for Kafka SASL/PLAIN and
SASL/SCRAM-SHA-256 and SCRAM-SHA-512 the configured users (`users` setting) plus the bearer tokens as PLAIN
passwords of the user `token`. Every answer is a Principal with scopes (api/security/principals.py)."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping
from typing import Any

from api.security.principals import Principal, check_scopes
from api.security.sasl_plain import parse_plain
from api.security.scram import (
    DEFAULT_ITERATIONS,
    MECHANISM,
    MECHANISM_512,
    SALT_BYTES,
    SaslError,
    ScramCredential,
    ScramServer,
    verify_password,
)
from api.security.tokens import TokenStore

#: the SASL/PLAIN user name under which a bearer token is given as the password
TOKEN_USER = "token"


class UserError(ValueError):
    pass


#: the `users` fields holding a credential -> its mechanism
CREDENTIAL_FIELDS = {"scram_sha_256": MECHANISM, "scram_sha_512": MECHANISM_512}
Credentials = dict[str, ScramCredential]  # mechanism -> credential


def parse_users(users: Mapping[str, Any]) -> dict[str, tuple[Credentials, frozenset[str]]]:
    """The `users` setting: {name: {"scopes": [...], "scram_sha_256": "scram-sha-256:...",
    "scram_sha_512": "scram-sha-512:..."}}, at least one of the two credentials. A user with only one of them
    logs in with that SCRAM mechanism (and PLAIN); the other mechanism treats it as unknown."""
    out: dict[str, tuple[Credentials, frozenset[str]]] = {}
    for name, spec in users.items():
        if not name or name == TOKEN_USER or not isinstance(spec, Mapping):
            raise UserError(f"user {name!r}: a user is a table with scopes and scram_sha_256 or scram_sha_512 "
                            f"(and may not be named {TOKEN_USER!r})")
        unknown = set(spec) - {"scopes", *CREDENTIAL_FIELDS}
        if unknown:
            raise UserError(f"user {name!r}: unknown field(s) {sorted(unknown)}")
        try:
            given = {f: m for f, m in CREDENTIAL_FIELDS.items() if f in spec} or {"scram_sha_256": MECHANISM}
            credentials = {m: ScramCredential.decode(str(spec.get(f, "")), m) for f, m in given.items()}
            scopes = check_scopes(list(spec.get("scopes", [])), f"user {name!r}")
        except ValueError as exc:
            raise UserError(f"user {name!r}: {exc} (make one with `mqindex security scram-credential`)") from None
        out[str(name)] = (credentials, scopes)
    return out


class Authenticator:
    def __init__(self, tokens: Mapping[str, list[str]], users: Mapping[str, Any] | None = None) -> None:
        self.tokens = TokenStore(tokens)
        self.users = parse_users(users or {})
        # An unknown user must look like a known one, to SCRAM and to PLAIN: SCRAM answers with a salt made from
        # the name with this process's key (the same salt for the same name every time, as a real user's) and
        # the iteration count most users have; PLAIN derives a key at that count before failing (as long as a
        # wrong password of a known user takes).
        self._decoy_key = os.urandom(32)
        counts = Counter(c.iterations for cs, _ in self.users.values() for c in cs.values())
        self._decoy = ScramCredential(b"\0" * SALT_BYTES, counts.most_common(1)[0][0] if counts else DEFAULT_ITERATIONS,
                                      b"\0" * 32, b"\0" * 32)

    @property
    def anonymous(self) -> bool:
        """No credential configured: every caller is allowed everything."""
        return not len(self.tokens) and not self.users

    def bearer(self, token: str) -> Principal | None:
        return self.tokens.authenticate(token)

    def plain(self, message: bytes) -> Principal:
        """Verify a SASL/PLAIN message; raises SaslError (never naming the password) when it fails."""
        m = parse_plain(message)
        if m.user == TOKEN_USER:
            principal = self.tokens.authenticate(m.password)
        else:
            entry = self.users.get(m.user)
            if entry is None:
                verify_password(self._decoy, m.password)  # as long as a known user's wrong password takes
                principal = None
            else:  # the SHA-256 credential when the user has one (the cheaper PBKDF2)
                credential = entry[0].get(MECHANISM) or entry[0][MECHANISM_512]
                principal = Principal(m.user, entry[1]) if verify_password(credential, m.password) else None
        if principal is None:
            raise SaslError(f"authentication failed for {m.user!r}")
        return principal

    def scram(self, mechanism: str = MECHANISM) -> ScramServer:
        """A new SCRAM exchange (SCRAM-SHA-256 or SCRAM-SHA-512); once `final` succeeded, `principal_of(server)`
        is the caller."""
        return ScramServer(lambda name: self.users[name][0].get(mechanism) if name in self.users else None,
                           decoy_key=self._decoy_key, decoy_iterations=self._decoy.iterations, mechanism=mechanism)

    def principal_of(self, server: ScramServer) -> Principal:
        if server.user is None:
            raise SaslError("SCRAM exchange not completed")
        return Principal(server.user, self.users[server.user][1])
