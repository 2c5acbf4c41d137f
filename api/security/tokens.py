"""Bearer tokens kept hashed: only the SHA-256 of each token is held in memory, and the configuration may give
the hash instead of the token (`sha256:<64 hex>`, made by `mqindex security hash-token`).

A plain SHA-256 (not a slow, salted KDF) is right for tokens: they are long random strings, not passwords a
person chose, so there is nothing to guess from the hash. A presented token is hashed and compared with every
known hash with hmac.compare_digest, without stopping at the first match, so the time taken does not say which
token (or how much of one) matched."""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping

from api.security.principals import Principal, check_scopes

HASH_PREFIX = "sha256:"
_HASH = re.compile(r"sha256:[0-9a-f]{64}")
#: tokens shorter than this are accepted but named in a warning at start: they could be guessed
WEAK_TOKEN_CHARS = 16


class TokenError(ValueError):
    pass


def hash_token(token: str) -> str:
    """`sha256:<hex>`: the form to put in the configuration instead of the token."""
    return HASH_PREFIX + hashlib.sha256(token.encode()).hexdigest()


def fingerprint(entry: str) -> str:
    """A name for a configured token that reveals nothing of it: the first 8 hex digits of its hash."""
    digest = entry if _HASH.fullmatch(entry) else hash_token(entry)
    return digest[len(HASH_PREFIX):][:8]


class TokenStore:
    """token (or its `sha256:` hash) -> scopes, from the `tokens` setting; answers the principal of a token."""

    def __init__(self, tokens: Mapping[str, list[str] | tuple[str, ...]]) -> None:
        self._entries: list[tuple[bytes, Principal]] = []
        self.weak: list[str] = []  # names of the tokens given in clear and shorter than WEAK_TOKEN_CHARS
        for entry, scopes in tokens.items():
            name = f"token-{fingerprint(entry)}"
            if entry.startswith(HASH_PREFIX):
                if not _HASH.fullmatch(entry):
                    raise TokenError(f"{name}: a hashed token is sha256: and 64 lowercase hex digits")
                digest = entry
            else:
                if not entry:
                    raise TokenError("an empty token")
                if len(entry) < WEAK_TOKEN_CHARS:
                    self.weak.append(name)
                digest = hash_token(entry)
            self._entries.append((bytes.fromhex(digest[len(HASH_PREFIX):]),
                                  Principal(name, check_scopes(scopes, name))))

    def __len__(self) -> int:
        return len(self._entries)

    def authenticate(self, token: str) -> Principal | None:
        presented = hashlib.sha256(token.encode()).digest()
        found: Principal | None = None
        for digest, principal in self._entries:  # no early exit: same work whichever entry matches
            if hmac.compare_digest(digest, presented):
                found = principal
        return found
