"""Kafka request framing: a 4-byte big-endian size, then the request header and body.

Written by hand (the schema library encodes bodies, not a server's framing): `read_frame` reads one
size-prefixed frame with a bound on its size; `parse_header` decodes the request header (v1, or v2 with tagged
fields for flexible versions) and returns where the body starts. Any violation is a FrameError: the server
answers it by closing the connection, as a Kafka broker does.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass

DEFAULT_MAX_REQUEST = 100 << 20  # Kafka's socket.request.max.bytes
MIN_HEADER = 10  # api key, api version, correlation id, client id length


class FrameError(Exception):
    """A frame that is not a Kafka request: the connection is closed."""


@dataclass(frozen=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int


async def read_frame(reader: asyncio.StreamReader, max_size: int = DEFAULT_MAX_REQUEST) -> bytes | None:
    """The next frame's bytes; None at a clean end of stream (between frames)."""
    try:
        head = await reader.readexactly(4)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise FrameError("connection closed inside a frame size") from None
    (size,) = struct.unpack(">i", head)
    if size < MIN_HEADER:
        raise FrameError(f"frame size {size} is smaller than a request header")
    if size > max_size:
        raise FrameError(f"frame of {size} bytes exceeds the {max_size}-byte request limit")
    try:
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError as exc:
        raise FrameError(f"connection closed after {len(exc.partial)} of {size} frame bytes") from None


def read_unsigned_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise FrameError("truncated varint in the request header")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise FrameError("varint longer than 5 bytes in the request header")


def parse_header(frame: bytes, flexible: bool) -> RequestHeader:
    """Decode the request header of `frame`; `flexible` says whether it carries tagged fields (header v2)."""
    if len(frame) < MIN_HEADER:
        raise FrameError(f"request of {len(frame)} bytes is shorter than a request header")
    api_key, api_version, correlation_id, n = struct.unpack_from(">hhih", frame, 0)
    pos = MIN_HEADER
    client_id = None
    if n >= 0:
        if pos + n > len(frame):
            raise FrameError(f"client id of {n} bytes runs past the request")
        try:
            client_id = frame[pos:pos + n].decode("utf-8")
        except UnicodeDecodeError:
            raise FrameError("client id is not UTF-8") from None
        pos += n
    elif n != -1:
        raise FrameError(f"client id length {n}")
    if flexible:
        count, pos = read_unsigned_varint(frame, pos)
        for _ in range(count):
            _tag, pos = read_unsigned_varint(frame, pos)
            size, pos = read_unsigned_varint(frame, pos)
            pos += size
            if pos > len(frame):
                raise FrameError("tagged field runs past the request header")
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def peek_api(frame: bytes) -> tuple[int, int, int]:
    """(api key, api version, correlation id) of a frame, before its header is fully decoded."""
    if len(frame) < 8:
        raise FrameError(f"request of {len(frame)} bytes is shorter than a request header")
    return struct.unpack_from(">hhi", frame, 0)


def frame(payload: bytes | bytearray) -> bytes:
    return struct.pack(">i", len(payload)) + bytes(payload)
