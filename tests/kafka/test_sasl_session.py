"""The Kafka listener's SASL session (api/kafka/sasl.py) on arbitrary client tokens: whatever a client sends,
the answer is an authentication or a SaslError (the connection is closed), never another failure, and no
garbage authenticates."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.kafka.sasl import Session
from api.security.authenticator import Authenticator
from api.security.scram import SaslError, derive_credential

AUTH = Authenticator({"read-token-0123456789abcdef": ["read"]},
                     {"alice": {"scopes": ["read"], "scram_sha_256": derive_credential("pw-alice-1").encode()}})


class _Handshake:
    def __init__(self, mechanism: str) -> None:
        self.mechanism = mechanism


def session(mechanism: str) -> Session:
    s = Session(AUTH, "test")
    s.handshake(_Handshake(mechanism), 1)
    assert not s.failed
    return s


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=600))
def test_plain_garbage_is_refused(token: bytes) -> None:
    s = session("PLAIN")
    with pytest.raises(SaslError):
        s.step(token)
    assert not s.authenticated


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=300), st.binary(max_size=300))
def test_scram_garbage_is_refused(first: bytes, final: bytes) -> None:
    s = session("SCRAM-SHA-256")
    try:
        s.step(first)
        s.step(final)
    except SaslError:
        pass
    assert not s.authenticated


def test_plain_token_and_unknown_mechanism() -> None:
    s = session("PLAIN")
    assert s.step(b"\0token\0read-token-0123456789abcdef") == b""
    assert s.authenticated and s.principal is not None and s.principal.allows("read")
    assert not s.principal.allows("produce")
    other = Session(AUTH, "test")
    resp = other.handshake(_Handshake("GSSAPI"), 1)
    assert other.failed and resp.error_code == 33 and "SCRAM-SHA-256" in resp.mechanisms
