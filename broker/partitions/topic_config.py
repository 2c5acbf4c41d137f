"""Per-topic configs, as in Kafka: `retention.ms`, `retention.bytes` and `max.message.bytes`, stored in the
controller metadata KV.

    topic_configs/<name>   {"retention.ms": 172800000}      (only the keys set; absent = server default)

Values follow Kafka: the retention configs are integers, -1 = unlimited, and unset = the server default (which
itself defaults to keep forever); `max.message.bytes` (the largest record batch a producer may send, Kafka's
int config) is 0 to 2**31-1, and unset = the server's `message_max_bytes` (Kafka's `message.max.bytes`,
1,048,588 by default). `merge` applies an alteration: a value sets the key, None removes it (back to the
default), like IncrementalAlterConfigs' SET and DELETE.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from broker.errors import InvalidField

RETENTION_MS = "retention.ms"
RETENTION_BYTES = "retention.bytes"
MAX_MESSAGE_BYTES = "max.message.bytes"
KNOWN = (RETENTION_MS, RETENTION_BYTES, MAX_MESSAGE_BYTES)
_MAX = (1 << 63) - 1
MAX_INT32 = (1 << 31) - 1  # the largest value of Kafka's int configs
#: Kafka's `message.max.bytes` default: 1 MiB of record batch plus the 12 bytes of log overhead (base offset and
#: length) that Kafka counts in a batch's size
DEFAULT_MAX_MESSAGE_BYTES = 1_048_588


def kv_key(topic: str) -> str:
    return f"topic_configs/{topic}"


def _in_range(name: str, v: int) -> bool:
    if name == MAX_MESSAGE_BYTES:
        return 0 <= v <= MAX_INT32
    return v == -1 or 1 <= v <= _MAX


def rule(name: str) -> str:
    """What a config's value must be, as the refusal of another value says it."""
    if name == MAX_MESSAGE_BYTES:
        return f"must be an integer from 0 to {MAX_INT32} (bytes of a record batch)"
    return "must be an integer, -1 (unlimited) or 1 to 2**63-1"


def check_configs(configs: object, field: str = "configs", allow_unset: bool = False) -> dict[str, int | None]:
    """Validated configs: known keys only; integers in each one's range (`rule`); None when allow_unset."""
    if not isinstance(configs, Mapping):
        raise InvalidField(field, f"must be an object of config names to values, got {type(configs).__name__}")
    out: dict[str, int | None] = {}
    for k, v in configs.items():
        if k not in KNOWN:
            raise InvalidField(f"{field}.{k}", f"is not a topic config; known: {', '.join(KNOWN)}")
        if v is None and allow_unset:
            out[k] = None
            continue
        if isinstance(v, bool) or not isinstance(v, int) or not _in_range(k, v):
            raise InvalidField(f"{field}.{k}", f"{rule(k)}, got {v!r}")
        out[k] = v
    return out


def decode(topic: str, raw: str | None) -> dict[str, int]:
    """The stored configs of a topic that this version knows; damage is a server-side error naming the key. A
    config name it does not know was set by a later version (a rolling upgrade): it is left out here, kept in the
    store (`later_versions`), and no damage."""
    if raw is None:
        return {}
    try:
        body = json.loads(raw)
        if not isinstance(body, dict):
            raise ValueError(f"not an object: {raw[:80]!r}")
        checked = check_configs({k: v for k, v in body.items() if k in KNOWN})
    except (ValueError, InvalidField) as exc:
        raise RuntimeError(f"metadata KV {kv_key(topic)!r} is damaged: {exc}") from None
    return {k: v for k, v in checked.items() if v is not None}


def later_versions(raw: str | None) -> dict[str, object]:
    """The stored configs of names this version does not know (set by a later version), as stored: an alteration
    made here writes them back unchanged."""
    if raw is None:
        return {}
    body = json.loads(raw)
    return {k: v for k, v in body.items() if k not in KNOWN} if isinstance(body, dict) else {}


def encode(configs: Mapping[str, object]) -> str:
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
    """The server's configs for topics that set none: retention (None: keep forever) and the largest record
    batch (the node setting `message_max_bytes`)."""

    retention_ms: int | None = None
    retention_bytes: int | None = None
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES


def effective(configs: Mapping[str, int], defaults: ServerDefaults) -> tuple[int | None, int | None]:
    """(retention_ms, retention_bytes) a topic gets: its own value, else the server default; -1 -> None."""
    ms = configs.get(RETENTION_MS, defaults.retention_ms if defaults.retention_ms is not None else -1)
    by = configs.get(RETENTION_BYTES, defaults.retention_bytes if defaults.retention_bytes is not None else -1)
    return (None if ms == -1 else ms), (None if by == -1 else by)


def max_message_bytes(configs: Mapping[str, int], defaults: ServerDefaults) -> int:
    """The largest record batch (bytes, as Kafka counts them) a topic takes: its own, else the server's."""
    return configs.get(MAX_MESSAGE_BYTES, defaults.max_message_bytes)


def describe(configs: Mapping[str, int], defaults: ServerDefaults) -> dict[str, dict[str, object]]:
    """Every known config with its value and where it comes from (the shape DescribeConfigs reports)."""
    ms, by = effective(configs, defaults)
    eff = {RETENTION_MS: -1 if ms is None else ms, RETENTION_BYTES: -1 if by is None else by,
           MAX_MESSAGE_BYTES: max_message_bytes(configs, defaults)}
    return {k: {"value": eff[k], "source": "topic" if k in configs else "default"} for k in KNOWN}
