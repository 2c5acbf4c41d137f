"""Server configuration: defaults < config file (TOML) < MQINDEX_* environment variables < command-line flags.

The embedded defaults need no other service: data in ./data, a local-disk object store under it,
SQLite metadata, 127.0.0.1:8080.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from api.node_settings import BY_NAME, coerce
from api.security.tokens import fingerprint


class ConfigError(ValueError):
    pass


@dataclass
class Settings:
    data_dir: str = "./data"
    host: str = "127.0.0.1"
    port: int = 8080
    store: str = ""  # object store URL; default file://<data_dir>/objects
    metadata: str = ""  # metadata database URL; default sqlite:///<data_dir>/metadata.sqlite
    tokens: dict[str, list[str]] = field(default_factory=dict)  # bearer token -> scopes (read, produce, admin)
    node_id: int = 0  # this broker's id; brokers sharing one metadata database need distinct ids
    advertised_url: str = ""  # how the other nodes reach this one; default http://HOST:PORT
    lease_ms: int = 10_000  # a node is dead to the others this long after its last heartbeat
    wal: str = ""  # WAL location: empty/file://DIR = local (DATA_DIR/wal); any store URL = shared WAL (failover)
    cluster_token: str = ""  # bearer token this node presents to the others (needed when tokens are configured)
    # seconds serve waits at start for the object store, the WAL store and the metadata database to answer
    startup_wait_s: float = 10.0
    # -- node and index settings (api/node_settings.py: names, defaults, what each does) --
    node: dict[str, Any] = field(default_factory=dict)  # only the settings given; the rest take defaults
    # free-space floor of the data paths: writes are refused below it (None: 1% of the filesystem or 256 MiB,
    # whichever is smaller), so a clean stop and a restart always have room
    min_free_bytes: int | None = None
    # -- security (api/security/, docs/OPERATIONS.md "Security") --
    # Kafka SASL users: name -> {"scopes": [...], "scram_sha_256": "scram-sha-256:..."} (config file only)
    users: dict[str, Any] = field(default_factory=dict)
    allow_anonymous: bool = False  # serve with no authentication on a non-loopback address (protected mode off)
    tls_cert: str = ""  # PEM certificate (chain) of the HTTP listener; with tls_key, HTTP is served over TLS
    tls_key: str = ""  # its PEM private key
    tls_client_ca: str = ""  # PEM CA bundle: clients must present a certificate it signed
    metrics_auth: bool = False  # /metrics requires a token with the read scope
    access_log: bool = False  # a log line per HTTP request (uvicorn's); /metrics counts requests per route anyway
    # -- Kafka listener (api/kafka/, docs/KAFKA.md) --
    kafka_listener: str = "127.0.0.1:9092"  # HOST:PORT of the Kafka listener; empty: no Kafka listener
    kafka_advertised: str = ""  # HOST:PORT Kafka clients are told to connect to (NAT, proxy); default the listener
    kafka_tls_cert: str = ""  # PEM certificate (chain) of the Kafka listener; with kafka_tls_key: SSL / SASL_SSL
    kafka_tls_key: str = ""  # its PEM private key
    kafka_tls_client_ca: str = ""  # PEM CA bundle: Kafka clients must present a certificate it signed
    # -- access control (api/security/access.py; rules stored in the metadata database) --
    superusers: list[str] = field(default_factory=list)  # principals allowed everything (User:NAME or NAME)
    allow_everyone_if_no_acl_found: bool = False  # once rules exist: a resource no rule covers is open (Kafka's)
    audit_log: str = ""  # admin changes and denials, one JSON line each: "" none, "stdout", or a file path
    # -- value searches (api/http/search_jobs.py): the Spark master they run on; "" = local[2] in this process --
    search_master: str = ""

    def resolved(self) -> Settings:
        data = Path(self.data_dir).resolve()
        return Settings(
            data_dir=str(data),
            host=self.host,
            port=self.port,
            store=self.store or f"file://{data}/objects",
            metadata=self.metadata or f"sqlite:///{data}/metadata.sqlite",
            tokens=dict(self.tokens),
            node_id=self.node_id,
            advertised_url=self.advertised_url or f"{'https' if self.tls_cert else 'http'}://{self.host}:{self.port}",
            lease_ms=self.lease_ms,
            cluster_token=self.cluster_token,
            wal=self.wal,
            startup_wait_s=self.startup_wait_s,
            node=dict(self.node),
            min_free_bytes=self.min_free_bytes,
            users=dict(self.users), allow_anonymous=self.allow_anonymous, tls_cert=self.tls_cert,
            tls_key=self.tls_key, tls_client_ca=self.tls_client_ca, metrics_auth=self.metrics_auth,
            access_log=self.access_log,
            kafka_listener=self.kafka_listener, kafka_advertised=self.kafka_advertised,
            kafka_tls_cert=self.kafka_tls_cert, kafka_tls_key=self.kafka_tls_key,
            kafka_tls_client_ca=self.kafka_tls_client_ca,
            superusers=list(self.superusers), allow_everyone_if_no_acl_found=self.allow_everyone_if_no_acl_found,
            audit_log=self.audit_log, search_master=self.search_master,
        )


def shown_settings(settings: Settings) -> dict[str, Any]:
    """The server's own settings as `GET /v1/config` shows them: URLs with their passwords and keys masked,
    tokens and users by count and name only, never a secret."""
    from api.security.redact import REDACTOR

    return REDACTOR.value({
        "host": settings.host, "port": settings.port, "data_dir": settings.data_dir, "store": settings.store,
        "metadata": settings.metadata, "node_id": settings.node_id, "advertised_url": settings.advertised_url,
        "lease_ms": settings.lease_ms, "startup_wait_s": settings.startup_wait_s,
        "min_free_bytes": settings.min_free_bytes,
        "tokens": len(settings.tokens), "users": sorted(settings.users), "cluster_token": bool(settings.cluster_token),
        "allow_anonymous": settings.allow_anonymous, "tls": bool(settings.tls_cert),
        "tls_client_ca": settings.tls_client_ca or None, "metrics_auth": settings.metrics_auth,
        "access_log": settings.access_log,
        "kafka_listener": settings.kafka_listener or None, "kafka_advertised": settings.kafka_advertised or None,
        "kafka_tls": bool(settings.kafka_tls_cert),
        "kafka_tls_client_ca": settings.kafka_tls_client_ca or None,
    })


_NAMES = {f.name for f in fields(Settings)} - {"node"}
SCOPES = {"read", "produce", "admin"}
_BOOLS = {"allow_anonymous", "metrics_auth", "access_log", "allow_everyone_if_no_acl_found"}


def _coerce(name: str, value: Any) -> Any:
    if name == "port":
        try:
            port = int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"port must be an integer, got {value!r}") from None
        if not 0 <= port <= 65535:
            raise ConfigError(f"port must be 0-65535, got {port}")
        return port
    if name == "lease_ms":
        try:
            lease = int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"lease_ms must be an integer, got {value!r}") from None
        if not 300 <= lease <= 3_600_000:
            raise ConfigError(f"lease_ms must be 300 to 3600000, got {lease}")
        return lease
    if name == "node_id":
        try:
            node = int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"node_id must be an integer, got {value!r}") from None
        if not 0 <= node < 2**31:
            raise ConfigError(f"node_id must be 0 to 2**31-1, got {node}")
        return node
    if name == "startup_wait_s":
        try:
            wait = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"startup_wait_s must be a number of seconds, got {value!r}") from None
        if not 0 <= wait <= 3600:
            raise ConfigError(f"startup_wait_s must be 0 to 3600 seconds, got {value!r}")
        return wait
    if name == "min_free_bytes":
        try:
            floor = int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"min_free_bytes must be an integer, got {value!r}") from None
        if floor < 0:
            raise ConfigError(f"min_free_bytes must be >= 0, got {floor}")
        return floor
    if name in ("kafka_listener", "kafka_advertised"):
        return _host_port(name, value, empty_means="no Kafka listener" if name == "kafka_listener"
                          else "the listener's own address")
    if name == "advertised_url":
        return _http_url(name, value)
    if name in _BOOLS:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off", ""):
            return False
        raise ConfigError(f"{name} must be true or false, got {value!r}")
    if name == "users":
        from api.security.authenticator import UserError, parse_users

        if not isinstance(value, dict):
            raise ConfigError("users must be a table of user name -> {scopes, scram_sha_256} (config file)")
        try:
            parse_users(value)
        except UserError as exc:
            raise ConfigError(str(exc)) from None
        return {str(k): dict(v) for k, v in value.items()}
    if name == "superusers":  # MQINDEX_SUPERUSERS="User:root,admin"
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise ConfigError("superusers must be a list of principal names (User:NAME or NAME)")
        return [i.strip() for i in items if i.strip()]
    if name == "tokens":
        if isinstance(value, str):  # MQINDEX_TOKENS="tok1=read,produce;tok2=admin"
            out: dict[str, list[str]] = {}
            for item in filter(None, (p.strip() for p in value.split(";"))):
                tok, _, scopes = item.partition("=")
                out[tok.strip()] = [s.strip() for s in scopes.split(",") if s.strip()]
            value = out
        if not isinstance(value, dict):
            raise ConfigError("tokens must map a token to a list of scopes")
        for tok, scopes in value.items():
            bad = set(scopes) - SCOPES
            if not tok or bad:
                raise ConfigError(f"token {fingerprint(tok) if tok else '(empty)'} (the start of its sha256): "
                                  f"unknown scopes {sorted(bad)}; use read, produce, admin")
        return {str(k): list(v) for k, v in value.items()}
    if not isinstance(value, str):
        raise ConfigError(f"{name} must be a string")
    return value


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _host_port(name: str, value: Any, empty_means: str) -> str:
    """HOST:PORT (an IPv6 host in brackets), port 0-65535; empty is allowed and means `empty_means`."""
    text = str(value).strip() if isinstance(value, str) else value
    if not isinstance(text, str):
        raise ConfigError(f"{name} ({_flag(name)}) must be a string HOST:PORT")
    if not text:
        return ""
    host, sep, port = text.rpartition(":")
    bare = host.strip("[]")
    if (not sep or not bare or not port.isdigit() or int(port) > 65535 or any(c.isspace() for c in text)
            or (":" in bare and not host.startswith("["))):
        raise ConfigError(f"{name} ({_flag(name)}) {text!r} is not HOST:PORT (for example 127.0.0.1:9092, "
                          f"[::1]:9092 for IPv6, port 0-65535; empty: {empty_means})")
    return text


def _http_url(name: str, value: Any) -> str:
    """http(s)://HOST[:PORT] with a numeric port; empty is allowed (the default applies)."""
    if not isinstance(value, str):
        raise ConfigError(f"{name} ({_flag(name)}) must be a string http(s)://HOST:PORT")
    text = value.strip()
    if not text:
        return ""
    try:
        parts = urlsplit(text)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.path in ("", "/") \
            and not parts.query and not any(c.isspace() for c in text)
        ok = ok and (parts.port is None or parts.port > 0)
    except ValueError:
        ok = False
    if not ok:
        raise ConfigError(f"{name} ({_flag(name)}) {text!r} is not http(s)://HOST:PORT (for example "
                          "http://10.0.0.5:8080)")
    return text


def load_settings(config_file: str | None = None, env: dict[str, str] | None = None,
                  **flags: Any) -> Settings:
    values: dict[str, Any] = {}
    if config_file:
        try:
            with open(config_file, "rb") as f:
                doc = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"config file {config_file}: {exc}") from None
        unknown = set(doc) - _NAMES - set(BY_NAME)
        if unknown:
            raise ConfigError(f"config file {config_file}: unknown setting(s) {sorted(unknown)}")
        values.update(doc)
    env = os.environ if env is None else env
    for name in _NAMES | set(BY_NAME):
        key = f"MQINDEX_{name.upper()}"
        if key in env:
            values[name] = env[key]
    values.update({k: v for k, v in flags.items() if v is not None})
    node = {k: coerce(BY_NAME[k], values.pop(k)) for k in list(values) if k in BY_NAME}
    return Settings(**{k: _coerce(k, v) for k, v in values.items()}, node=node)
