"""Per-topic configs, as in Kafka: `retention.ms` and `retention.bytes`, stored in the controller metadata KV.

    topic_configs/<name>   {"retention.ms": 172800000}      (only the keys set; absent = server default)

Values follow Kafka: an integer, -1 = unlimited; unset = the server default (which itself defaults to
keep forever). `merge` applies an alteration: a value sets the key, None removes it (back to the
default), like IncrementalAlterConfigs' SET and DELETE.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from broker.errors import InvalidField

RETENTION_MS = "retention.ms"
RETENTION_BYTES = "retention.bytes"
KNOWN = (RETENTION_MS, RETENTION_BYTES)
_MAX = (1 << 63) - 1


def kv_key(topic: str) -> str:
    return f"topic_configs/{topic}"


def check_configs(configs: object, field: str = "configs", allow_unset: bool = False) -> dict[str, int | None]:
    """Validated configs: known keys only, integers -1 (unlimited) or >= 1 (None when allow_unset)."""
    if not isinstance(configs, Mapping):
        raise InvalidField(field, f"must be an object of config names to values, got {type(configs).__name__}")
    out: dict[str, int | None] = {}
    for k, v in configs.items():
        if k not in KNOWN:
            raise InvalidField(f"{field}.{k}", f"is not a topic config; known: {', '.join(KNOWN)}")
        if v is None and allow_unset:
            out[k] = None
            continue
        if isinstance(v, bool) or not isinstance(v, int) or not (v == -1 or 1 <= v <= _MAX):
            raise InvalidField(f"{field}.{k}", f"must be an integer, -1 (unlimited) or 1 to 2**63-1, got {v!r}")
        out[k] = v
    return out


def decode(topic: str, raw: str | None) -> dict[str, int]:
    """The stored configs of a topic; damage is a server-side error naming the key."""
    if raw is None:
        return {}
    try:
        body = json.loads(raw)
        checked = check_configs(body)
    except (ValueError, InvalidField) as exc:
        raise RuntimeError(f"metadata KV {kv_key(topic)!r} is damaged: {exc}") from None
    return {k: v for k, v in checked.items() if v is not None}


def encode(configs: Mapping[str, int]) -> str:
    return json.dumps(dict(configs), sort_keys=True)


def merge(current: Mapping[str, int], change: Mapping[str, int | None]) -> dict[str, int]:
    out = dict(current)
    for k, v in change.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


@dataclass(frozen=True)
class ServerDefaults:
    """The server's retention for topics that set none (None: keep forever)."""

    retention_ms: int | None = None
    retention_bytes: int | None = None


def effective(configs: Mapping[str, int], defaults: ServerDefaults) -> tuple[int | None, int | None]:
    """(retention_ms, retention_bytes) a topic gets: its own value, else the server default; -1 -> None."""
    ms = configs.get(RETENTION_MS, defaults.retention_ms if defaults.retention_ms is not None else -1)
    by = configs.get(RETENTION_BYTES, defaults.retention_bytes if defaults.retention_bytes is not None else -1)
    return (None if ms == -1 else ms), (None if by == -1 else by)


def describe(configs: Mapping[str, int], defaults: ServerDefaults) -> dict[str, dict[str, object]]:
    """Every known config with its value and where it comes from (the shape DescribeConfigs reports)."""
    ms, by = effective(configs, defaults)
    eff = {RETENTION_MS: -1 if ms is None else ms, RETENTION_BYTES: -1 if by is None else by}
    return {k: {"value": eff[k], "source": "topic" if k in configs else "default"} for k in KNOWN}
