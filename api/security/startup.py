"""What `mqindex serve` does about security before it opens anything: register every secret of the settings
with the redactor and filter the log handlers, load the TLS files, apply protected mode, and warn about an
anonymous listener and guessable tokens."""

from __future__ import annotations

import logging
from typing import Any

from api.security.authenticator import Authenticator
from api.security.protected import check_protected_mode, is_loopback
from api.security.redact import REDACTOR, install_log_redaction, secrets_of_url
from api.security.tls import TlsConfig
from api.security.tokens import HASH_PREFIX

log = logging.getLogger("mqindex.security")


def register_secrets(settings: Any) -> None:
    REDACTOR.add([t for t in settings.tokens if not t.startswith(HASH_PREFIX)])
    REDACTOR.add([settings.cluster_token, *secrets_of_url(settings.store), *secrets_of_url(settings.metadata)])


def secure_start(settings: Any) -> TlsConfig | None:
    """Raises (one line saying what to do) when the server must not start; returns the TLS configuration of the
    HTTP listener (None: plain HTTP)."""
    register_secrets(settings)
    install_log_redaction()
    tls = TlsConfig.from_settings(settings.tls_cert, settings.tls_key, settings.tls_client_ca)
    auth = Authenticator(settings.tokens, settings.users)
    if check_protected_mode("HTTP", settings.host, bool(len(auth.tokens)), settings.allow_anonymous):
        log.warning("HTTP on %s:%s runs with no authentication: every caller may read, produce and administer "
                    "(configure tokens to require them)", settings.host, settings.port,
                    extra={"host": settings.host, "port": settings.port})
    if auth.tokens.weak:
        log.warning("tokens shorter than 16 characters can be guessed: %s", ", ".join(auth.tokens.weak))
    if not tls and len(auth.tokens) and not is_loopback(settings.host):
        log.warning("bearer tokens travel in clear on %s:%s: serve TLS (--tls-cert/--tls-key) or put a TLS proxy "
                    "in front", settings.host, settings.port)
    return tls


def kafka_start(settings: Any) -> tuple[TlsConfig | None, Authenticator | None]:
    """The Kafka listener's TLS configuration (None: plaintext) and its authenticator (None: anonymous, no SASL).
    With tokens or users configured the listener requires SASL (SASL_PLAINTEXT, or SASL_SSL over TLS); with none
    protected mode applies as for HTTP. Raises (one line saying what to do) when it must not start."""
    tls = TlsConfig.from_settings(settings.kafka_tls_cert, settings.kafka_tls_key, settings.kafka_tls_client_ca,
                                  prefix="kafka_")
    auth = Authenticator(settings.tokens, settings.users)
    host = settings.kafka_listener.rpartition(":")[0].strip("[]")
    if check_protected_mode("Kafka", host, not auth.anonymous, settings.allow_anonymous):
        log.warning("Kafka on %s runs with no authentication: every client may read, produce and administer "
                    "(configure tokens or users to require SASL)", settings.kafka_listener,
                    extra={"kafka_listener": settings.kafka_listener})
        return tls, None
    if not tls and not is_loopback(host):
        log.warning("Kafka SASL on %s runs without TLS: PLAIN passwords travel in clear (serve TLS with "
                    "--kafka-tls-cert/--kafka-tls-key)", settings.kafka_listener)
    return tls, auth
