"""Malformed, truncated and oversized frames against the framing and decoding: a clear FrameError, never
another exception; and against a live listener: the connection is closed and the server goes on."""

from __future__ import annotations

import asyncio
import socket
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from api.kafka.framing import FrameError, parse_header, read_frame
from api.kafka.server import decode_request
from tests.kafka.conftest import KafkaServerProcess


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.booleans())
def test_header_parser_raises_only_frame_error(data: bytes, flexible: bool) -> None:
    try:
        h = parse_header(data, flexible)
    except FrameError:
        return
    assert h.body_offset <= len(data)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 18, 19, 20, 22, 99]), st.integers(0, 15),
       st.binary(max_size=120))
def test_decode_request_raises_only_frame_error(api_key: int, version: int, body: bytes) -> None:
    data = struct.pack(">hhih", api_key, version, 1, 1) + b"c" + body
    try:
        decode_request(data)
    except FrameError:
        pass
    for cut in range(0, len(data), 7):  # every truncation too
        try:
            decode_request(data[:cut])
        except FrameError:
            pass


def test_read_frame_bounds() -> None:
    async def run(raw: bytes, limit: int = 1000) -> bytes | None:
        r = asyncio.StreamReader()
        r.feed_data(raw)
        r.feed_eof()
        return await read_frame(r, limit)

    assert asyncio.run(run(b"")) is None
    for bad in (struct.pack(">i", 5000) + b"x" * 20, struct.pack(">i", 3) + b"abc", struct.pack(">i", 50) + b"x",
                b"\x00\x00"):
        try:
            asyncio.run(run(bad))
            raise AssertionError(f"{bad!r} accepted")
        except FrameError:
            pass


def test_listener_survives_garbage(kafka_server: KafkaServerProcess) -> None:
    port = kafka_server.kafka_port
    for junk in (b"\xff\xff\xff\xff", struct.pack(">i", 200 << 20), struct.pack(">i", 12) + b"\x00\x63" + b"\x00" * 10,
                 struct.pack(">i", 12) + b"\x00\x00\x00\x63" + b"\x00" * 8):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(junk)
            s.settimeout(10)
            assert s.recv(100) == b""  # closed by the server
    # still serving: ApiVersions v0 answers
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        body = struct.pack(">hhih", 18, 0, 42, 1) + b"t"
        s.sendall(struct.pack(">i", len(body)) + body)
        size, corr = struct.unpack(">ii", s.recv(8))
        assert corr == 42 and size > 6
