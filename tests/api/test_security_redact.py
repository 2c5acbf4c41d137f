"""Redaction of secrets (URLs, known secrets, log records) and protected mode's loopback rule."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.security.protected import ProtectedModeError, check_protected_mode, is_loopback
from api.security.redact import RedactingFilter, Redactor, redact_url, secrets_of_url

SECRETISH = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/_-", min_size=1, max_size=30)


def test_redact_store_and_database_urls() -> None:
    s3 = "s3://bucket/pre?endpoint=http://127.0.0.1:8333&access_key=AKIA1234&secret_key=wJalr/XUt+nF"
    assert redact_url(s3) == "s3://bucket/pre?endpoint=http://127.0.0.1:8333&access_key=***&secret_key=***"
    pg = "postgresql://app:p%40ss@db.example:5432/meta?schema=x&sslpassword=k3y"
    assert redact_url(pg) == "postgresql://app:***@db.example:5432/meta?schema=x&sslpassword=***"
    assert redact_url("file:///data/objects") == "file:///data/objects"
    assert secrets_of_url(s3) == ["AKIA1234", "wJalr/XUt nF"] or secrets_of_url(s3)[0] == "AKIA1234"
    assert secrets_of_url(pg)[0] == "p%40ss"
    text = f"could not open {pg!r} (from {s3})"
    out = Redactor().text(text)
    assert "p%40ss" not in out and "wJalr" not in out and "AKIA1234" not in out and "db.example" in out


@settings(max_examples=200, deadline=None)
@given(user=st.text("abcdefgh", min_size=1, max_size=8), password=SECRETISH, key=SECRETISH,
       other=st.text(max_size=40))
def test_no_url_secret_survives(user: str, password: str, key: str, other: str) -> None:
    url = f"postgresql://{user}:{password}@host:5432/db?secret_key={key}&x=1"
    out = redact_url(f"{other} {url} {other}")
    assert f":{password}@" not in out and f"secret_key={key}" not in out
    assert "postgresql://" + user + ":***@host:5432/db?secret_key=***&x=1" in out


def test_known_secrets_and_log_records() -> None:
    r = Redactor(["tok-0123456789abcdef", "short"])  # under 8 characters: not replaced (would blank words)
    assert r.text("Bearer tok-0123456789abcdef short") == "Bearer *** short"
    assert r.value({"a": ["x tok-0123456789abcdef"], "n": 3}) == {"a": ["x ***"], "n": 3}
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(self.format(record) + repr(getattr(record, "store", "")))

    handler = Keep()
    handler.addFilter(RedactingFilter(r))
    log = logging.getLogger("test.redact")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        log.warning("store %s token %s n=%d", "s3://b?secret_key=SEKRET1", "tok-0123456789abcdef", 5,
                    extra={"store": "postgresql://u:pw123456@h/db"})
        # uvicorn's access formatter reads record.args as a 5-tuple: the shape is kept
        log.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:1", "GET", "/x?token=tok-0123456789abcdef", "1.1", 200)
        try:
            raise RuntimeError("cannot reach postgresql://u:pw123456@h/db")
        except RuntimeError:
            log.exception("failed with %r", ValueError("tok-0123456789abcdef"))
    finally:
        log.removeHandler(handler)
    text = "\n".join(records)
    for secret in ("SEKRET1", "tok-0123456789abcdef", "pw123456"):
        assert secret not in text
    assert "secret_key=***" in text and "n=5" in text and '"GET /x?token=*** HTTP/1.1" 200' in text
    assert "postgresql://u:***@h/db" in text and "RuntimeError" in text


def test_protected_mode_rule() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("")
    assert not is_loopback("192.0.2.7") and not is_loopback("no-such-host.invalid")
    with pytest.raises(ProtectedModeError) as err:
        check_protected_mode("HTTP", "0.0.0.0", authenticated=False, allow_anonymous=False)
    msg = str(err.value)
    assert "\n" not in msg and "MQINDEX_TOKENS" in msg and "--allow-anonymous" in msg
    assert check_protected_mode("HTTP", "0.0.0.0", authenticated=False, allow_anonymous=True) is True
    assert check_protected_mode("HTTP", "127.0.0.1", authenticated=False, allow_anonymous=False) is True
    assert check_protected_mode("HTTP", "0.0.0.0", authenticated=True, allow_anonymous=False) is False
