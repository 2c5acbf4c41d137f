"""JSON bodies of whole-record reads, rendered straight from the stored record batches.

A page of up to 1000 whole messages is the largest answer the API gives; validating each message through a
pydantic model and serialising it with the standard library costs more than reading the records. Each stored
batch's messages are rendered by the C renderer (`_record_json`, built with the package) from the batch's
record bytes, without decoding them into Python objects; where it is not built (a source tree run without
`pip install`) the batch is decoded and each message serialised by orjson, with the same bytes. The body is
byte-for-byte the document `FetchOut` describes (same fields, same order, same text/base64 rule as
`encode_bytes`), and the route still declares `FetchOut` for the OpenAPI schema.

Headers (docs/MESSAGES.md): `headers` is the name -> text object it always was; when it cannot hold a message's
headers exactly (a value that is not UTF-8, a null value, a name given twice) `header_list` follows it with every
header in record order, each value text or base64 as a key is (`header_fields`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import orjson
import pybase64

from api.backend import OutMessage
from broker.partitions.damage import BatchTaker
from broker.partitions.message_id import encode_message_id
from broker.partitions.reads import Rendered, out_messages
from broker.partitions.records import (
    LOG_APPEND_TIME,
    BatchHeader,
    decode_records,
    walk_records,
)

try:
    from api.http import _record_json
except ImportError:  # not built: batches are decoded and serialised in Python (tests/api checks CI builds it)
    _record_json = None

# Bytes that never occur in UTF-8 (overlong lead bytes, leads past U+10FFFF). One of them in a value's first 64
# bytes proves it binary without the failing decode, whose exception costs more than encoding 1 KiB in base64;
# random binary data has one there 96% of the time.
_NEVER_UTF8 = re.compile(rb"[\xc0\xc1\xf5-\xff]")
_PROBE = 64


def text_or_base64(data: bytes | None) -> tuple[str | None, str]:
    """Text when the bytes are UTF-8, base64 otherwise (the rule of `api.http.models.encode_bytes`), with
    pybase64's SIMD encoder (3x the standard library's on 1 KiB values) and no exception for most binary values."""
    if data is None:
        return None, "utf-8"
    if data.isascii():
        return data.decode("ascii"), "utf-8"
    if _NEVER_UTF8.search(data, 0, _PROBE) is None:
        try:
            return data.decode(), "utf-8"
        except UnicodeDecodeError:
            pass
    return pybase64.b64encode_as_string(data), "base64"


def header_fields(headers: Sequence[tuple[str, bytes | None]]) -> tuple[dict[str, str], list[dict[str, Any]] | None]:
    """The `headers` object (name -> text: a null value as "", bytes that are not UTF-8 with U+FFFD, a name given
    twice with its last value at its first place) and, when that object does not hold the headers exactly, the
    `header_list`: every header in order as {"name", "value" (text, base64 or null), "encoding"}."""
    if not headers:
        return {}, None
    shown: dict[str, str] = {}
    exact = True
    for name, raw in headers:
        if raw is None:
            shown[name] = ""
            exact = False
            continue
        text, encoding = text_or_base64(raw)
        if encoding == "base64":
            shown[name] = raw.decode(errors="replace")
            exact = False
        else:
            shown[name] = text  # type: ignore[assignment]
    if exact and len(shown) == len(headers):
        return shown, None
    listed = []
    for name, raw in headers:
        value, encoding = text_or_base64(raw)
        listed.append({"name": name, "value": value, "encoding": encoding})
    return shown, listed


def message_dict(m: OutMessage) -> dict[str, Any]:
    value, encoding = text_or_base64(m.value)
    key, key_encoding = text_or_base64(m.key)
    headers, header_list = header_fields(m.headers)
    out = {"topic": m.topic, "partition": m.partition, "offset": m.offset, "msg_id": m.msg_id,
           "key": key, "key_encoding": key_encoding, "headers": headers}
    if header_list is not None:
        out["header_list"] = header_list
    out["value"], out["encoding"], out["timestamp"] = value, encoding, m.timestamp
    return out


def messages_json(messages: list[OutMessage]) -> bytes:
    """The messages' JSON objects, comma-separated (a part of a page's "messages" array)."""
    return b",".join([orjson.dumps(message_dict(m)) for m in messages])


class Page:
    """A whole-record page's JSON built in one buffer: each stored batch's messages appended as rendered,
    `body` the document once the broker says which batches are served and the offset to go on from."""

    PREFIX = b'{"messages":['

    def __init__(self) -> None:
        self.out = bytearray(self.PREFIX)

    def renderer(self, topic: str, topic_id: int, partition: int, start: int, end: int) -> BatchTaker[Rendered]:
        """What renders the messages of [start, end) of each stored batch of a partition into this page
        (`Backend.fetch_rendered`). Records that do not decode raise RecordFormatError (the broker reports the
        object as damaged) and add nothing."""
        out = self.out
        head = b"".join([b'{"topic":', orjson.dumps(topic), b',"partition":', str(partition).encode(),
                         b',"offset":'])
        id_prefix = encode_message_id(topic_id, partition, 0)[:16].encode()

        def take(h: BatchHeader, raw: bytes, pos: int) -> list[Rendered]:
            comma = len(out) > len(self.PREFIX)
            if _record_json is None:
                records = [r for r in decode_records(raw, h, pos, check_crc=False) if start <= r.offset < end]
                if not records:
                    return []
                if comma:
                    out.extend(b",")
                out.extend(messages_json(out_messages(topic, topic_id, partition, records)))
                return [Rendered(len(records), records[-1].offset, len(out))]
            count, last = walk_records(_record_json.render, raw, h, pos, out, comma, h.base_offset, h.first_timestamp,
                                       h.max_timestamp, bool(h.attributes & LOG_APPEND_TIME), start, end, head,
                                       id_prefix)
            return [Rendered(count, last, len(out))] if count else []

        return take

    def body(self, served: list[Rendered], next_offset: int) -> bytearray:
        """The JSON of `FetchOut`: the served batches' messages (anything rendered after them dropped) and the
        offset to go on from."""
        del self.out[served[-1].end if served else len(self.PREFIX):]
        self.out += b'],"next_offset":%d}' % next_offset
        return self.out
