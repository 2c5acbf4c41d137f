"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) for the server side: credential derivation and the
two-step exchange.

Written here rather than taken from a library: the Python SCRAM packages are client-side or tied to a driver;
the server side is a few lines of hashlib/hmac, checked against RFC 7677's example exchange and against the
SCRAM client of kafka-python in the tests.

The stored credential is what the RFC calls StoredKey and ServerKey with the salt and the iteration count:
the password cannot be read back from it, and a stolen credential does not let one log in (the proof needs
ClientKey, which only the password gives)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections.abc import Callable
from dataclasses import dataclass

MECHANISM = "SCRAM-SHA-256"
MECHANISM_512 = "SCRAM-SHA-512"  # the default of several clients and managed Kafka services
#: mechanism -> hashlib name; a credential's stored form starts with the mechanism in lower case
HASHES = {MECHANISM: "sha256", MECHANISM_512: "sha512"}
PREFIX = "scram-sha-256"
DEFAULT_ITERATIONS = 4096  # the RFC 7677 minimum and Kafka's default
MAX_ITERATIONS = 1_000_000  # clients (kafka-python) refuse more
SALT_BYTES = 16


class SaslError(ValueError):
    """Authentication failed or the client broke the exchange; the message never holds a secret."""


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes
    mechanism: str = MECHANISM

    @property
    def hash_name(self) -> str:
        return HASHES[self.mechanism]

    def encode(self) -> str:
        """`scram-sha-256:ITERATIONS:SALT:STOREDKEY:SERVERKEY` (base64 parts; `scram-sha-512:` for SHA-512): the
        form kept in the config."""
        b64 = (base64.b64encode(x).decode() for x in (self.salt, self.stored_key, self.server_key))
        return f"{self.mechanism.lower()}:{self.iterations}:" + ":".join(b64)

    @classmethod
    def decode(cls, text: str, mechanism: str = MECHANISM) -> ScramCredential:
        parts = text.split(":")
        prefix = mechanism.lower()
        if len(parts) != 5 or parts[0] != prefix:
            raise ValueError(f"a {mechanism} credential is {prefix}:ITERATIONS:SALT:STOREDKEY:SERVERKEY")
        try:
            iterations = int(parts[1])
            salt, stored, server = (base64.b64decode(p, validate=True) for p in parts[2:])
        except (ValueError, binascii.Error):
            raise ValueError("a SCRAM credential has an integer iteration count and base64 keys") from None
        if not DEFAULT_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ValueError(f"SCRAM iterations must be {DEFAULT_ITERATIONS} to {MAX_ITERATIONS}, got {iterations}")
        size = hashlib.new(HASHES[mechanism]).digest_size
        if not salt or len(stored) != size or len(server) != size:
            raise ValueError(f"a {mechanism} credential has a salt and two {size}-byte keys")
        return cls(salt, iterations, stored, server, mechanism)


def _hmac(key: bytes, msg: bytes, hash_name: str = "sha256") -> bytes:
    return hmac.new(key, msg, hash_name).digest()


def salted_password(password: str, salt: bytes, iterations: int, hash_name: str = "sha256") -> bytes:
    # RFC 5802 asks for SASLprep of the password; passwords are taken as given (UTF-8), as Kafka does
    return hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)


def derive_credential(password: str, salt: bytes | None = None, iterations: int = DEFAULT_ITERATIONS,
                      mechanism: str = MECHANISM) -> ScramCredential:
    """The stored credential of a password: salted (random 16 bytes unless given) and iterated."""
    if not DEFAULT_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"SCRAM iterations must be {DEFAULT_ITERATIONS} to {MAX_ITERATIONS}, got {iterations}")
    h = HASHES[mechanism]
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    salted = salted_password(password, salt, iterations, h)
    client_key = _hmac(salted, b"Client Key", h)
    return ScramCredential(salt, iterations, hashlib.new(h, client_key).digest(), _hmac(salted, b"Server Key", h),
                           mechanism)


def verify_password(credential: ScramCredential, password: str) -> bool:
    """Whether `password` is the one the credential was derived from (for SASL/PLAIN), in constant time."""
    h = credential.hash_name
    client_key = _hmac(salted_password(password, credential.salt, credential.iterations, h), b"Client Key", h)
    return hmac.compare_digest(hashlib.new(h, client_key).digest(), credential.stored_key)


def _attrs(message: str, what: str) -> list[tuple[str, str]]:
    out = []
    for part in message.split(","):
        key, eq, value = part.partition("=")
        if len(key) != 1 or not eq:
            raise SaslError(f"malformed SCRAM {what}")
        out.append((key, value))
    return out


def _unescape_name(name: str) -> str:
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise SaslError("malformed SCRAM user name")
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """One SCRAM exchange (`mechanism`: SCRAM-SHA-256 or SCRAM-SHA-512). `lookup(user)` gives the user's
    credential or None. Call `first` with the client-first message and send back what it returns; call `final`
    with the client-final message: it returns the server-final message and sets `user`, or raises SaslError. An
    unknown user gets a made-up salt so the exchange does not say which users exist."""

    def __init__(self, lookup: Callable[[str], ScramCredential | None], nonce: str | None = None,
                 decoy_key: bytes | None = None, decoy_iterations: int = DEFAULT_ITERATIONS,
                 mechanism: str = MECHANISM) -> None:
        """decoy_key: the key an unknown user's salt is made from; give one that lasts (Authenticator keeps one
        per process), or every exchange answers the same unknown name with another salt, which tells it apart
        from a real user. decoy_iterations: the count an unknown user is answered with (most users' count)."""
        self._lookup = lookup
        self._hash = HASHES[mechanism]
        self.mechanism = mechanism
        self._nonce = nonce or base64.b64encode(os.urandom(18)).decode()
        self._decoy_key = decoy_key or os.urandom(32)
        self._decoy_iterations = decoy_iterations
        self._state = "first"
        self.user: str | None = None  # set once authenticated

    def first(self, client_first: bytes) -> bytes:
        if self._state != "first":
            raise SaslError("SCRAM client-first message out of order")
        self._state = "final"
        try:
            text = client_first.decode()
        except UnicodeDecodeError:
            raise SaslError("SCRAM client-first message is not UTF-8") from None
        cbind, _, rest = text.partition(",")
        authzid, _, bare = rest.partition(",")
        if cbind not in ("n", "y"):
            raise SaslError("SCRAM channel binding is not supported")
        attrs = _attrs(bare, "client-first message")
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1]:
            raise SaslError("malformed SCRAM client-first message")
        name = _unescape_name(attrs[0][1])
        if authzid and _unescape_name(authzid.removeprefix("a=")) != name:
            raise SaslError("SCRAM authorization identity must be the user")
        credential = self._lookup(name)
        self._credential = credential
        self._name = name
        if credential is None:  # go on with a decoy so the answer does not reveal that the user is unknown
            seed = name if self.mechanism == MECHANISM else f"{self.mechanism}:{name}"  # one salt per mechanism
            salt = _hmac(self._decoy_key, seed.encode())[:SALT_BYTES]
            size = hashlib.new(self._hash).digest_size
            credential = ScramCredential(salt, self._decoy_iterations, b"\0" * size, b"\0" * size, self.mechanism)
        self._gs2 = f"{cbind},{authzid},"
        self._client_nonce = attrs[1][1]
        self._combined = self._client_nonce + self._nonce
        server_first = (f"r={self._combined},s={base64.b64encode(credential.salt).decode()},"
                        f"i={credential.iterations}")
        self._auth_prefix = f"{bare},{server_first}"
        return server_first.encode()

    def final(self, client_final: bytes) -> bytes:
        if self._state != "final":
            raise SaslError("SCRAM client-final message out of order")
        self._state = "done"
        try:
            text = client_final.decode()
        except UnicodeDecodeError:
            raise SaslError("SCRAM client-final message is not UTF-8") from None
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        if not sep:
            raise SaslError("SCRAM client-final message has no proof")
        attrs = dict(_attrs(without_proof, "client-final message"))
        if attrs.get("c") != base64.b64encode(self._gs2.encode()).decode():
            raise SaslError("SCRAM channel binding does not match the client-first message")
        # librdkafka before 2.6.1 (Debian 12's kcat among them) sends its own nonce once more in front of the
        # combined one (confluentinc/librdkafka#4895). That form still carries this exchange's fresh server
        # nonce, which is what guards against a replay, so it is taken; nothing else but the exact nonce is.
        if attrs.get("r") not in (self._combined, self._client_nonce + self._combined):
            raise SaslError("SCRAM nonce does not match")
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except binascii.Error:
            raise SaslError("SCRAM proof is not base64") from None
        auth_message = f"{self._auth_prefix},{without_proof}".encode()
        credential = self._credential
        h = self._hash
        if credential is None or len(proof) != hashlib.new(h).digest_size:
            raise SaslError(f"authentication failed for {self._name!r}")
        signature = _hmac(credential.stored_key, auth_message, h)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(h, client_key).digest(), credential.stored_key):
            raise SaslError(f"authentication failed for {self._name!r}")
        self.user = self._name
        return b"v=" + base64.b64encode(_hmac(credential.server_key, auth_message, h))
