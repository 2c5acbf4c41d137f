"""The messages of a produce request's JSON body read with orjson, for the bodies that need no error report.

pydantic's JSON validation builds a `MessageIn` model per message and runs the text check per string: most of
the cost of a 256-message request. A body made only of what `ProduceIn` accepts without coercion (an object
whose `messages` is a list of 1 to MAX_MESSAGES_PER_REQUEST objects with a UTF-8 `value` string or null, an
optional UTF-8 `key` string or null, a string-to-string `headers` object, an integer `partition` in range,
`encoding` "utf-8", and no other field) gives the same messages here; anything else (base64 values or keys,
`key_encoding` at all, a lone surrogate,
which orjson refuses, a wrong type, an oversized value, a field `ProduceIn` would coerce, a missing `value`, an
unknown field) returns None and the route validates the body with pydantic, which refuses it naming the field at
fault. The per-message checks run in C where api/http/_produce_json is compiled (the same answers).

Before orjson, api/http/_produce_scan (where compiled) reads the common body straight from its bytes, each
value copied once from the body; a body it does not read goes to orjson as above (the same messages either way).
"""

from __future__ import annotations

from typing import Any

import orjson

from api.backend import InMessage, Produced
from api.http.models import MAX_MESSAGES_PER_REQUEST, MAX_PARTITION, MAX_VALUE_BYTES

_compiled: Any
_scan: Any
try:
    from api.http import _produce_json as _compiled  # built by pip install (setup.py); optional
except ImportError:  # not built: the messages are read in Python (tests/api checks CI builds it)
    _compiled = None
try:
    from api.http import _produce_scan as _scan  # built by pip install (setup.py); optional
except ImportError:  # not built: every body goes through orjson
    _scan = None

_FIELDS = frozenset({"key", "value", "headers", "partition", "encoding"})


def _message(m: Any) -> InMessage | None:
    if type(m) is not dict or "value" not in m or not m.keys() <= _FIELDS or m.get("encoding", "utf-8") != "utf-8":
        return None
    value, key, headers, partition = m.get("value"), m.get("key"), m.get("headers", {}), m.get("partition")
    if value is not None:
        if type(value) is not str:
            return None
        value = value.encode()
        if len(value) > MAX_VALUE_BYTES:
            return None
    if key is not None:
        if type(key) is not str:
            return None
        key = key.encode()
    if type(headers) is not dict or any(type(v) is not str for v in headers.values()):
        return None
    if partition is not None and (type(partition) is not int or not 0 <= partition <= MAX_PARTITION):
        return None
    return InMessage(value=value, key=key, headers=[(k, v.encode()) for k, v in headers.items()],
                     partition=partition)


def produce_messages(raw: bytes) -> list[InMessage] | None:
    """The messages of a plain produce body, or None when pydantic has to validate it (see the module)."""
    if _scan is not None and type(raw) is bytes:
        scanned = _scan.messages(raw, MAX_VALUE_BYTES, MAX_PARTITION, MAX_MESSAGES_PER_REQUEST)
        if scanned is not None:
            return scanned  # type: ignore[no-any-return]
    return parsed_messages(raw)


def parsed_messages(raw: bytes) -> list[InMessage] | None:
    """produce_messages through orjson's objects (what the scan must agree with)."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if type(data) is not dict or data.keys() != {"messages"}:
        return None
    msgs = data["messages"]
    if type(msgs) is not list or not 1 <= len(msgs) <= MAX_MESSAGES_PER_REQUEST:
        return None
    if _compiled is not None:
        return _compiled.messages(msgs, MAX_VALUE_BYTES, MAX_PARTITION)  # type: ignore[no-any-return]
    out = []
    for m in msgs:
        message = _message(m)
        if message is None:
            return None
        out.append(message)
    return out


def produced_answer(produced: list[Produced]) -> bytes:
    """The produce answer's JSON, {"results": [{"partition", "offset", "msg_id", "timestamp"}, ...]}: written
    in C where api/http/_produce_json is compiled (the same bytes as orjson's, which writes the rest)."""
    if _compiled is not None and type(produced) is list:
        out = _compiled.produced_json(produced)
        if out is not None:
            return out  # type: ignore[no-any-return]
    return orjson.dumps({"results": [{"partition": p.partition, "offset": p.offset, "msg_id": p.msg_id,
                                      "timestamp": p.timestamp} for p in produced]})
