"""JSON bodies of whole-record reads built with orjson straight from the stored messages.

A page of up to 1000 whole messages is the largest answer the API gives; validating each message through a
pydantic model and serialising it with the standard library costs more than reading and decoding the
records. The body here is byte-for-byte the same document `FetchOut` describes (same fields, same order,
same text/base64 rule as `encode_bytes`), and the route still declares `FetchOut` for the OpenAPI schema.
"""

from __future__ import annotations

from typing import Any

import orjson

from api.backend import OutMessage
from api.http.models import encode_bytes


def message_dict(m: OutMessage) -> dict[str, Any]:
    value, encoding = encode_bytes(m.value)
    return {"topic": m.topic, "partition": m.partition, "offset": m.offset, "msg_id": m.msg_id,
            "key": m.key.decode(errors="replace") if m.key is not None else None,
            "headers": {k: v.decode(errors="replace") for k, v in m.headers} if m.headers else {},
            "value": value, "encoding": encoding, "timestamp": m.timestamp}


def fetch_body(messages: list[OutMessage], next_offset: int) -> bytes:
    """The JSON of `FetchOut(messages=..., next_offset=...)`."""
    return orjson.dumps({"messages": [message_dict(m) for m in messages], "next_offset": next_offset})
