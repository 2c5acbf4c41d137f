"""The shared security pieces the Kafka listener will call: SCRAM-SHA-256 (RFC 7677's example exchange and
kafka-python's SCRAM client), SASL/PLAIN, hashed tokens, the Kafka scope map; corrupt input is a clear error."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.net.sasl.scram import ScramClient

from api.security.authenticator import Authenticator, UserError
from api.security.principals import (
    CLUSTER_AUTHORIZATION_FAILED,
    GROUP_AUTHORIZATION_FAILED,
    TOPIC_AUTHORIZATION_FAILED,
    Principal,
    kafka_denial,
)
from api.security.sasl_plain import parse_plain
from api.security.scram import SaslError, ScramCredential, ScramServer, derive_credential, verify_password
from api.security.tokens import TokenError, TokenStore, hash_token

ALICE = derive_credential("alice-password-1", iterations=4096)
USERS = {"alice": {"scopes": ["read"], "scram_sha_256": ALICE.encode()},
         "root": {"scopes": ["admin"], "scram_sha_256": derive_credential("root-password-2").encode()}}
TOKEN = "tok-produce-0123456789"


def test_rfc7677_example_exchange() -> None:
    # RFC 7677 section 3: user "user", password "pencil"
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cred = derive_credential("pencil", salt=salt, iterations=4096)
    server = ScramServer(lambda name: cred if name == "user" else None, nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first = server.first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = server.final(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                         b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.user == "user"


def scram_login(auth: Authenticator, user: str, password: str) -> Principal:
    client = ScramClient(user, password, "SCRAM-SHA-256")  # kafka-python's client, as a Kafka client runs it
    server = auth.scram()
    client.process_server_first_message(server.first(client.first_message()))
    client.process_server_final_message(server.final(client.final_message()))  # checks the server signature
    return auth.principal_of(server)


def test_scram_with_kafka_python_client() -> None:
    auth = Authenticator({TOKEN: ["produce"]}, USERS)
    p = scram_login(auth, "alice", "alice-password-1")
    assert p.name == "alice" and p.allows("read") and not p.allows("produce")
    with pytest.raises(SaslError, match="authentication failed for 'alice'"):
        scram_login(auth, "alice", "wrong")
    with pytest.raises(SaslError, match="authentication failed"):
        scram_login(auth, "nobody", "x")
    # an unknown user gets an answer shaped like a known one's (salt, 4096 iterations)
    first = auth.scram().first(b"n,,n=nobody,r=abc").decode()
    assert first.startswith("r=abc") and ",s=" in first and first.endswith(",i=4096")


def test_scram_replayed_or_out_of_order_messages_fail() -> None:
    auth = Authenticator({}, USERS)
    client = ScramClient("alice", "alice-password-1", "SCRAM-SHA-256")
    server = auth.scram()
    client.process_server_first_message(server.first(client.first_message()))
    final = client.final_message()
    other = auth.scram()  # the proof of one exchange does not open another (its nonce differs)
    other.first(b"n,,n=alice,r=" + client.nonce[:10])
    with pytest.raises(SaslError, match="nonce"):
        other.final(final)
    server.final(final)
    with pytest.raises(SaslError, match="out of order"):
        server.final(final)
    with pytest.raises(SaslError, match="channel binding"):
        auth.scram().first(b"p=tls-unique,,n=alice,r=x")


def test_credentials_round_trip_and_verify_plain() -> None:
    text = ALICE.encode()
    assert text.startswith("scram-sha-256:4096:") and "alice-password-1" not in text
    assert ScramCredential.decode(text) == ALICE
    assert verify_password(ALICE, "alice-password-1") and not verify_password(ALICE, "alice-password-2")
    assert derive_credential("same").salt != derive_credential("same").salt  # salted at random
    for bad in ("", "scram-sha-256:4096:a:b", "scram-sha-256:10:AAAA:" + "A" * 44 + ":" + "A" * 44,
                "scram-sha-256:x:AAAA:AAAA:AAAA", "scram-sha-256:4096:!!:AAAA:AAAA"):
        with pytest.raises(ValueError, match="SCRAM"):
            ScramCredential.decode(bad)
    with pytest.raises(UserError, match="user 'bob'.*mqindex security scram-credential"):
        Authenticator({}, {"bob": {"scopes": ["read"], "scram_sha_256": "plain-text-password"}})
    with pytest.raises(UserError, match="unknown scopes"):
        Authenticator({}, {"bob": {"scopes": ["write"], "scram_sha_256": text}})


def test_plain_users_and_tokens() -> None:
    auth = Authenticator({TOKEN: ["produce"]}, USERS)
    assert auth.plain(b"\0alice\0alice-password-1").name == "alice"
    assert auth.plain(b"root\0root\0root-password-2").allows("produce")
    token_user = auth.plain(b"\0token\0" + TOKEN.encode())
    assert token_user.allows("produce") and not token_user.allows("admin")
    for bad, msg in ((b"\0alice\0nope", "authentication failed for 'alice'"),
                     (b"\0token\0" + b"x" * 20, "authentication failed for 'token'"),
                     (b"root\0alice\0alice-password-1", "authorization identity"),
                     (b"alice\0alice-password-1", "authzid NUL user NUL password"),
                     (b"\0\xff\0x", "not UTF-8"), (b"\0alice\0" + b"p" * 256, "longer than 255")):
        with pytest.raises(SaslError, match=msg):
            auth.plain(bad)
    assert "alice-password-1" not in repr(parse_plain(b"\0alice\0alice-password-1"))


def _salt_and_iterations(first: bytes) -> tuple[str, str]:
    attrs = dict(part.split("=", 1) for part in first.decode().split(","))
    return attrs["s"], attrs["i"]


def test_an_unknown_user_looks_like_a_known_one() -> None:
    """SCRAM answers an unknown name with the same salt every time, as it does a real user, and with the
    iteration count the users have; PLAIN derives a key at that count before refusing, as for a wrong password."""
    users = {name: {"scopes": ["read"], "scram_sha_256": derive_credential(name, iterations=8192).encode()}
             for name in ("alice", "bob")}
    a = Authenticator({}, users)
    ghost = [_salt_and_iterations(a.scram().first(b"n,,n=ghost,r=abc")) for _ in range(3)]
    assert ghost[0] == ghost[1] == ghost[2] and ghost[0][1] == "8192"
    alice = [_salt_and_iterations(a.scram().first(b"n,,n=alice,r=abc")) for _ in range(2)]
    assert alice[0] == alice[1] and alice[0][1] == "8192"
    assert _salt_and_iterations(a.scram().first(b"n,,n=casper,r=abc"))[0] != ghost[0][0]  # one salt per name
    derived: list[int] = []
    real = verify_password

    def counted(credential: ScramCredential, password: str) -> bool:
        derived.append(credential.iterations)
        return real(credential, password)

    import api.security.authenticator as authenticator_module

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(authenticator_module, "verify_password", counted)
        for user in ("ghost", "alice"):
            with pytest.raises(SaslError):
                a.plain(f"\0{user}\0wrong".encode())
    assert derived == [8192, 8192]


def test_tokens_hashed_and_scoped() -> None:
    store = TokenStore({hash_token("a-hashed-token-0001"): ["read"], "clear-token-000002": ["admin"], "short": []})
    assert store.authenticate("a-hashed-token-0001").allows("read")  # type: ignore[union-attr]
    assert store.authenticate("clear-token-000002").allows("produce")  # type: ignore[union-attr]
    assert store.authenticate("a-hashed-token-0002") is None and store.authenticate("") is None
    assert store.weak == [f"token-{hash_token('short')[7:15]}"]
    # only hashes are held
    assert all(isinstance(d, bytes) and len(d) == 32 for d, _ in store._entries)
    with pytest.raises(TokenError, match="64 lowercase hex"):
        TokenStore({"sha256:abc": ["read"]})


def test_kafka_scopes_and_error_codes() -> None:
    reader, producer = Principal("r", frozenset({"read"})), Principal("p", frozenset({"produce"}))
    admin = Principal("a", frozenset({"admin"}))
    assert kafka_denial("Fetch", reader) is None and kafka_denial("Produce", producer) is None
    assert kafka_denial("Produce", reader) == TOPIC_AUTHORIZATION_FAILED
    assert kafka_denial("Fetch", producer) == TOPIC_AUTHORIZATION_FAILED
    assert kafka_denial("JoinGroup", producer) == GROUP_AUTHORIZATION_FAILED
    assert kafka_denial("CreateTopics", producer) == CLUSTER_AUTHORIZATION_FAILED
    assert kafka_denial("DeleteTopics", reader) == TOPIC_AUTHORIZATION_FAILED
    assert all(kafka_denial(api, admin) is None for api in ("CreateTopics", "Produce", "Fetch", "DeleteTopics"))
    assert kafka_denial("Metadata", producer) is None and kafka_denial("ApiVersions", reader) is None


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_plain_parser_on_any_bytes(data: bytes) -> None:
    try:
        m = parse_plain(data)
    except SaslError as exc:
        assert "\0" not in str(exc)
    else:
        assert m.user and m.password and b"\0".join(
            p.encode() for p in (m.authzid, m.user, m.password)) == data


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.binary(max_size=200))
def test_scram_server_on_any_bytes(first: bytes, final: bytes) -> None:
    server = ScramServer(lambda name: ALICE if name == "alice" else None)
    try:
        server.first(first)
        server.final(final)
    except SaslError:
        pass
    assert server.user is None  # random bytes never authenticate


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=120))
def test_credential_decoder_on_any_text(text: str) -> None:
    try:
        ScramCredential.decode(text)
    except ValueError as exc:
        assert "SCRAM" in str(exc)


def test_security_cli_makes_stored_forms() -> None:
    import subprocess
    import sys
    from pathlib import Path

    mqindex = str(Path(sys.executable).parent / "mqindex")
    out = subprocess.run([mqindex, "security", "hash-token"], input="my-token-0123456789\n", text=True,
                         capture_output=True, check=True).stdout.strip()
    assert out == hash_token("my-token-0123456789")
    assert TokenStore({out: ["read"]}).authenticate("my-token-0123456789") is not None
    cred = subprocess.run([mqindex, "security", "scram-credential"], input="pw-of-carol\n", text=True,
                          capture_output=True, check=True).stdout.strip()
    auth = Authenticator({}, {"carol": {"scopes": ["produce"], "scram_sha_256": cred}})
    assert scram_login(auth, "carol", "pw-of-carol").allows("produce")
    empty = subprocess.run([mqindex, "security", "hash-token"], input="", text=True, capture_output=True)
    assert empty.returncode == 1 and "nothing on stdin" in empty.stderr


def test_scram_sha512_with_kafka_python_client() -> None:
    """SCRAM-SHA-512 beside SCRAM-SHA-256: a user may have either credential or both; each mechanism checks its
    own, PLAIN takes either, and a mechanism the user has no credential for answers as for an unknown user."""
    both = {"scopes": ["read"], "scram_sha_256": derive_credential("pw-both-1").encode(),
            "scram_sha_512": derive_credential("pw-both-1", mechanism="SCRAM-SHA-512").encode()}
    only512 = {"scopes": ["produce"],
               "scram_sha_512": derive_credential("pw-512-1", mechanism="SCRAM-SHA-512").encode()}
    auth = Authenticator({}, {"both": both, "only512": only512})

    def login(user: str, password: str, mechanism: str) -> Principal:
        client = ScramClient(user, password, mechanism)
        server = auth.scram(mechanism)
        client.process_server_first_message(server.first(client.first_message()))
        client.process_server_final_message(server.final(client.final_message()))
        return auth.principal_of(server)

    assert login("both", "pw-both-1", "SCRAM-SHA-512").name == "both"
    assert login("both", "pw-both-1", "SCRAM-SHA-256").name == "both"
    assert login("only512", "pw-512-1", "SCRAM-SHA-512").allows("produce")
    with pytest.raises(SaslError, match="authentication failed"):
        login("only512", "pw-512-1", "SCRAM-SHA-256")
    with pytest.raises(SaslError, match="authentication failed"):
        login("both", "wrong", "SCRAM-SHA-512")
    assert auth.plain(b"\0only512\0pw-512-1").name == "only512"
    assert ScramCredential.decode(only512["scram_sha_512"], "SCRAM-SHA-512").mechanism == "SCRAM-SHA-512"
    with pytest.raises(UserError, match="scram-sha-512"):  # a 256 credential in the 512 field
        Authenticator({}, {"x": {"scopes": [], "scram_sha_512": both["scram_sha_256"]}})
