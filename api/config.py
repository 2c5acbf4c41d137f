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

from api.node_settings import BY_NAME, coerce


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
    # -- node and index settings (api/node_settings.py: names, defaults, what each does) --
    node: dict[str, Any] = field(default_factory=dict)  # only the settings given; the rest take defaults
    # free-space floor of the data paths: writes are refused below it (None: 1% of the filesystem or 256 MiB,
    # whichever is smaller), so a clean stop and a restart always have room
    min_free_bytes: int | None = None

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
            advertised_url=self.advertised_url or f"http://{self.host}:{self.port}",
            lease_ms=self.lease_ms,
            cluster_token=self.cluster_token,
            wal=self.wal,
            node=dict(self.node),
            min_free_bytes=self.min_free_bytes,
        )


_NAMES = {f.name for f in fields(Settings)} - {"node"}
SCOPES = {"read", "produce", "admin"}


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
    if name == "min_free_bytes":
        try:
            floor = int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"min_free_bytes must be an integer, got {value!r}") from None
        if floor < 0:
            raise ConfigError(f"min_free_bytes must be >= 0, got {floor}")
        return floor
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
                raise ConfigError(f"token {tok[:4]}...: unknown scopes {sorted(bad)}; use read, produce, admin")
        return {str(k): list(v) for k, v in value.items()}
    if not isinstance(value, str):
        raise ConfigError(f"{name} must be a string")
    return value


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
