"""Request and response bodies of the HTTP API (pydantic), and the text/base64 encoding of bytes."""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    SerializerFunctionWrapHandler,
    WithJsonSchema,
    model_serializer,
)
from pydantic.json_schema import SkipJsonSchema

MAX_VALUE_BYTES = 1024 * 1024  # one message's value
MAX_MESSAGES_PER_REQUEST = 1000
MAX_PAGE = 1000  # `max` of one page of a key lookup or fetch
MAX_HITS_PAGE = 10_000  # `max` of one page of /v1/index/hits (no record is read). A cluster-wide page asks each
# node for one hit more, and a node answers at most 100,000 (routes.local_index_query); when one store millisecond
# holds more hits than asked, the ask doubles (partitions/key_lookup._candidates), for /v1/messages too, and past
# 100,000 such hits a lookup fails (503)
# 1-249 of [a-zA-Z0-9._-], but not "." or ".." (Kafka refuses those two; the broker answers them 400, so the
# schema says it too). Written without a lookahead, which pydantic's regex engine does not have.
TOPIC_PATTERN = (r"^(?:[a-zA-Z0-9_-][a-zA-Z0-9._-]{0,248}|\.[a-zA-Z0-9_-][a-zA-Z0-9._-]{0,247}"
                 r"|\.\.[a-zA-Z0-9._-]{1,247})$")
MSG_ID_PATTERN = r"^[0-9a-fA-F]{16}[0-7][0-9a-fA-F]{15}$"  # topic id, partition, offset < 2**63
CURSOR_PATTERN = r"^[A-Za-z0-9_=-]{1,256}$"
MAX_REQUEST_BYTES = 32 << 20  # one request body; larger ones get a 413 before they are read in full
MAX_INT = (1 << 63) - 1  # offsets, times: what the store's 64-bit fields hold
MAX_PARTITION = (1 << 31) - 1


def check_text(value: str) -> str:
    """Text must be encodable as UTF-8 (JSON lets a client send a lone UTF-16 surrogate such as "\\ud800",
    which no stored byte string can hold): refused with a 400 naming the field, nothing stored."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"is not valid text: {exc.reason} at character {exc.start}") from None
    return value


Text = Annotated[str, AfterValidator(check_text)]


#: a topic config value: -1 (unlimited) or 1 to 2**53 (the integers every JSON number represents exactly; the
#: broker accepts up to 2**63-1: broker/partitions/topic_config.py)
MAX_CONFIG_INT = 2**53
CONFIG_NAMES = ("retention.ms", "retention.bytes", "max.message.bytes")
MAX_MESSAGE_BYTES = (1 << 31) - 1  # max.message.bytes is an int config in Kafka: 0 to 2**31-1


#: a config value given as a string: decimal digits, `-` before them for -1 (Kafka's config values are strings on
#: the wire: `kafka-configs --add-config retention.ms=1000`); no sign +, space, fraction, exponent or underscore
_CONFIG_STRING = re.compile(r"-?[0-9]{1,19}")


def config_number(v: object) -> object:
    """A topic config value as a number: a JSON integer (60, or 60.0 as JSON Schema's integer allows) or a string
    of one (`"60"`, `"-1"`, as Kafka's configs are strings), as an int; anything else as it is, for the caller to
    refuse. The one rule of every config value over HTTP (docs/OPERATIONS.md, "Retention: per topic")."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if type(v) is str and _CONFIG_STRING.fullmatch(v):
        return int(v)
    return v


def whole_count(v: object) -> object:
    """A count (a topic's partitions): a JSON integer only, as Kafka's CreateTopics and CreatePartitions carry it
    (an int32), never a string or a boolean, which are refused naming the rule; other values go on to the field's
    own checks."""
    if isinstance(v, bool):
        raise ValueError("must be an integer (got a boolean)")
    if isinstance(v, str):
        raise ValueError(f"must be an integer, not a string (got {json.dumps(v)[:40]}): counts are JSON numbers; "
                         "only topic config values may be given as strings")
    return v


def _config_int(v: object) -> int:
    """A config value (config_number) that is -1 or 1 to MAX_CONFIG_INT, never a boolean; refused with one
    sentence saying so."""
    n = config_number(v)
    if type(n) is not int or not (n == -1 or 1 <= n <= MAX_CONFIG_INT):
        raise ValueError(f"must be -1 (unlimited) or an integer from 1 to {MAX_CONFIG_INT} ({_config_got(v)})")
    return n


def _config_got(v: object) -> str:
    """What a refused config value was, as its refusal says it; a string that is not the digits of an integer
    is told the form a string takes."""
    got = {bool: "a boolean", type(None): "null", dict: "an object", list: "an array"}.get(type(v)) \
        or json.dumps(v)[:40]
    if type(v) is str and not _CONFIG_STRING.fullmatch(v):
        return f"got {got}; as a string, an integer is its decimal digits: \"1000\", \"-1\""
    return f"got {got}"


# the schema's strings are a part of those taken (up to 15 digits, no leading zero): every string it allows is valid
ConfigInt = Annotated[int, PlainValidator(_config_int), WithJsonSchema(
    {"anyOf": [{"type": "integer", "minimum": 1, "maximum": MAX_CONFIG_INT}, {"type": "integer", "const": -1},
               {"type": "string", "pattern": "^(-1|[1-9][0-9]{0,14})$"}]})]


def _batch_bytes(v: object) -> int:
    """max.message.bytes: a config value (config_number) from 0 to MAX_MESSAGE_BYTES."""
    n = config_number(v)
    if type(n) is not int or not 0 <= n <= MAX_MESSAGE_BYTES:
        raise ValueError(f"must be an integer from 0 to {MAX_MESSAGE_BYTES}, bytes of a record batch "
                         f"({_config_got(v)})")
    return n


BatchBytes = Annotated[int, PlainValidator(_batch_bytes), WithJsonSchema(
    {"anyOf": [{"type": "integer", "minimum": 0, "maximum": MAX_MESSAGE_BYTES},
               {"type": "string", "pattern": "^(0|[1-9][0-9]{0,8})$"}]})]


class TopicConfigsNew(BaseModel):
    """Configs given at creation: absent = the server default."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    retention_ms: ConfigInt = Field(None, alias="retention.ms", description="-1 = unlimited")  # type: ignore[assignment]
    retention_bytes: ConfigInt = Field(None, alias="retention.bytes",  # type: ignore[assignment]
                                       description="-1 = unlimited")
    max_message_bytes: BatchBytes = Field(None, alias="max.message.bytes",  # type: ignore[assignment]
                                          description="the largest record batch a Kafka producer may send, "
                                                      "and the largest value HTTP takes for the topic")

    def as_dict(self) -> dict[str, int | None]:
        return self.model_dump(by_alias=True, exclude_unset=True)


class TopicConfigsChange(TopicConfigsNew):
    """A change of configs: an integer sets, null removes (back to the server default), absent keeps."""

    retention_ms: ConfigInt | None = Field(None, alias="retention.ms", description="-1 = unlimited; null removes")
    retention_bytes: ConfigInt | None = Field(None, alias="retention.bytes",
                                              description="-1 = unlimited; null removes")
    max_message_bytes: BatchBytes | None = Field(None, alias="max.message.bytes",
                                                 description="bytes of a record batch; null removes")


class TopicIn(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt field ("partiton") is a 400 naming it, not a default
    name: str = Field(description="1-249 characters of [a-zA-Z0-9._-]", examples=["orders"],
                      pattern=TOPIC_PATTERN)
    partitions: Annotated[int | None, BeforeValidator(whole_count)] = Field(
        None, ge=1, le=10000, description="a JSON integer (never a string); absent: the server's default_partitions "
                                          "(1 unless set)")
    configs: TopicConfigsNew | None = Field(None, description="topic configs: retention.ms, retention.bytes "
                                                               "(-1 = unlimited), max.message.bytes (absent = the "
                                                               "server default); each a JSON integer or a string of "
                                                               "one (\"1000\", as Kafka's config values are)")


class TopicOut(BaseModel):
    name: str
    partitions: int
    topic_id: int


class HeaderIn(BaseModel):
    """One header of a produce body's `header_list`."""

    model_config = ConfigDict(extra="forbid")
    name: Text
    value: Text | None = Field(description="text, or base64 when encoding is base64; null for a null value")
    encoding: Literal["utf-8", "base64"] = "utf-8"


class MessageIn(BaseModel):
    """One message of a produce body. `value` is required, null for a message without one (a tombstone): a
    message without it (`{}`, `{"key": "k"}`) is refused as the mistake it most likely is, as is a field not
    named here (a misspelled "vaule" would otherwise store a message without its value)."""

    model_config = ConfigDict(extra="forbid")
    key: Text | None = Field(None, description="text, or base64 when key_encoding is base64; null for no key")
    key_encoding: Literal["utf-8", "base64"] = Field(
        "utf-8", description="how `key` is given: its text, or the base64 of its bytes (a key that is not UTF-8: a "
                             "serialised long, a UUID's bytes), as a read's key_encoding says")
    value: Text | None = Field(description="text, or base64 when encoding is base64; null for a message without a "
                                           "value (a tombstone)")
    headers: dict[Text, Text] = Field(default_factory=dict, description="name -> text; header_list for binary or "
                                                                        "null values and names given twice")
    header_list: list[HeaderIn] | None = Field(None, description="the headers in order, instead of headers: a name "
                                                                 "may repeat, a value may be base64 or null")
    partition: int | None = Field(None, ge=0, le=MAX_PARTITION)
    encoding: Literal["utf-8", "base64"] = "utf-8"

    def header_pairs(self, i: int) -> list[tuple[str, bytes | None]]:
        """The headers to store, from `headers` or `header_list` (not both with headers in them: a FieldError
        naming the message's header_list); bad base64 is a FieldError naming the header's value."""
        if not self.header_list:
            return [(k, v.encode()) for k, v in self.headers.items()]
        if self.headers:
            raise FieldError(f"messages.{i}.header_list", "cannot be given with headers: give every header in "
                                                          "header_list")
        return [(h.name, decode_value(h.value, h.encoding, f"messages.{i}.header_list.{j}.value"))
                for j, h in enumerate(self.header_list)]


class ProduceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    messages: list[MessageIn] = Field(min_length=1, max_length=MAX_MESSAGES_PER_REQUEST)


class ProducedOut(BaseModel):
    partition: int
    offset: int
    msg_id: str
    timestamp: int


class ProduceOut(BaseModel):
    results: list[ProducedOut]


class HeaderOut(BaseModel):
    """One header of a message's `header_list`."""

    name: str
    value: str | None = Field(description="text, or base64 when encoding is base64 (a value that is not UTF-8); "
                                           "null for a null value")
    encoding: Literal["utf-8", "base64"]


class MessageOut(BaseModel):
    topic: str
    partition: int
    offset: int
    msg_id: str
    key: str | None = Field(description="text, or base64 when key_encoding is base64 (a key that is not UTF-8)")
    key_encoding: Literal["utf-8", "base64"]
    headers: dict[str, str] = Field(description="name -> text; exact unless header_list is given (then a value "
                                                "that is not UTF-8 has U+FFFD in place of its bytes, a null value "
                                                "is \"\", a name given twice has its last value)")
    header_list: list[HeaderOut] | SkipJsonSchema[None] = Field(
        None, description="only when headers does not hold the headers exactly (a value that is not UTF-8, a null "
                          "value, a name given twice): every header in record order",
        json_schema_extra=lambda schema: schema.pop("default", None))  # absent, never null
    value: str | None
    encoding: Literal["utf-8", "base64"]
    timestamp: int

    @model_serializer(mode="wrap")
    def _without_absent_list(self, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]
        """header_list left out when there is none (never written as null), as the page renderer leaves it out.
        No return annotation: pydantic would take it as the serialized schema (the OpenAPI one), not the model's."""
        out = handler(self)
        if out.get("header_list", 0) is None:
            del out["header_list"]
        return out


class FetchOut(BaseModel):
    messages: list[MessageOut]
    next_offset: int


class UnreadableOut(BaseModel):
    """A hit that could not be read because the store holds it damaged."""

    component: Literal["broker", "index"] = Field(description="broker: an object holding messages; "
                                                              "index: an index file")
    object: str = Field(description="store key of the damaged object or index file")
    check: str = Field(description="the check that failed")
    error: str
    partition: int | None = Field(None, description="the message's partition (broker objects)")
    offset: int | None = Field(None, description="the message's offset (broker objects)")


class LookupOut(BaseModel):
    messages: list[MessageOut]
    next_cursor: str | None
    unreadable: list[UnreadableOut] = Field(default_factory=list, description="hits skipped as damaged in the store")


class KeyHitsOut(BaseModel):
    hits: list[list[int]] = Field(description="[partition, offset] of each candidate, newest first; not checked "
                                              "against the records: the reader checks the records it reads")
    next_cursor: str | None
    unreadable: list[UnreadableOut] = Field(default_factory=list, description="index files skipped as damaged")


class IndexFileOut(BaseModel):
    state: str
    begin_ms: int
    end_ms: int
    items: int
    location: str


class IndexFilesOut(BaseModel):
    files: list[IndexFileOut]


class ErrorOut(BaseModel):
    error: str
    field: str | None = None
    leader: int | None = Field(None, description="421 only: the node that leads the partition")
    leader_url: str | None = Field(None, description="421 only: where to send the request instead")


class ReassignIn(BaseModel):
    topic: str = Field(pattern=TOPIC_PATTERN)
    partition: int = Field(ge=0)
    to: int = Field(ge=0, lt=2**31, description="the node that leads the partition from now on")


class RebalanceIn(BaseModel):
    execute: bool = False
    by: Literal["load", "count"] = "load"


class IndexHitsOut(BaseModel):
    hits: list[list[int]] = Field(description="[partition, offset, size, store_time_ms] each, newest first")


class DamageOut(ErrorOut):
    """Damage in the store (502): the object key and the check that failed."""

    object: str
    check: str


class ScrubOut(BaseModel):
    """What `mqindex scrub` prints with --json (jobs/scrub.py)."""

    objects_checked: int
    index_files_checked: int
    filters_checked: int
    filters_missing: list[str]
    bytes_read: int
    damaged: list[dict[str, Any]]


def decode_value(value: str | None, encoding: str, field: str) -> bytes | None:
    """The bytes a client sent; raises ValueError naming the field for bad base64."""
    if value is None:
        return None
    if encoding == "base64":
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise FieldError(field, "is not valid base64 (standard alphabet, with its = padding)") from None
    return value.encode()


def encode_bytes(data: bytes | None) -> tuple[str | None, Literal["utf-8", "base64"]]:
    """Text when the bytes are UTF-8, base64 otherwise (the response says which)."""
    from api.http.message_json import text_or_base64  # the one implementation of the rule

    value, encoding = text_or_base64(data)
    return value, "base64" if encoding == "base64" else "utf-8"


class FieldError(ValueError):
    """Bad input in one named field of a request."""

    def __init__(self, field: str, message: str, status: int = 400) -> None:
        super().__init__(f"{field} {message}")
        self.field = field
        self.status = status
