"""Produce requests carrying damaged record batches, sent over a raw socket to a live listener: each
partition answers CORRUPT_MESSAGE, nothing is stored (the next good batch gets offset 0, consumers read
only it), and the listener goes on serving."""

from __future__ import annotations

import socket
import struct

import httpx

from broker.partitions.records import ProducerRecord, build_batch
from tests.kafka.conftest import KafkaServerProcess
from tests.kafka.test_confluent import create, read

CORRUPT_MESSAGE = 2


def _str(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def produce_v3(port: int, topic: str, partition: int, records: bytes, corr: int) -> tuple[int, int]:
    """One Produce v3 request (acks=-1); returns (error code, base offset) of the partition."""
    body = (struct.pack(">hhi", 0, 3, corr) + _str("raw-test") + struct.pack(">h", -1) + struct.pack(">hi", -1, 30000)
            + struct.pack(">i", 1) + _str(topic) + struct.pack(">i", 1) + struct.pack(">i", partition)
            + struct.pack(">i", len(records)) + records)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        head = b""
        while len(head) < 4:
            chunk = s.recv(4 - len(head))
            assert chunk, "connection closed"
            head += chunk
        size = struct.unpack(">i", head)[0]
        resp = b""
        while len(resp) < size:
            chunk = s.recv(size - len(resp))
            assert chunk, "connection closed"
            resp += chunk
    got_corr, topics = struct.unpack_from(">ii", resp, 0)
    assert got_corr == corr and topics == 1
    pos = 8
    name_len = struct.unpack_from(">h", resp, pos)[0]
    pos += 2 + name_len
    parts, index, code, base = struct.unpack_from(">iihq", resp, pos)
    assert parts == 1 and index == partition
    return code, base


def test_damaged_batches_get_corrupt_message_and_store_nothing(kafka_server: KafkaServerProcess) -> None:
    create(kafka_server.bootstrap, "dmg", 1)
    good = build_batch([ProducerRecord(b"value-%d" % i, b"key-%d" % i, timestamp_ms=1_700_000_000_000 + i)
                        for i in range(20)])
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0x40  # inside a record: the CRC-32C no longer matches
    miscounted = bytearray(good)
    struct.pack_into(">i", miscounted, 57, 21)  # header says 21 records, the framing holds 20
    truncated = good[:-5]
    port = kafka_server.kafka_port
    for i, bad in enumerate((bytes(flipped), bytes(miscounted), truncated, good + good[:40])):
        code, base = produce_v3(port, "dmg", 0, bad, 100 + i)
        assert (code, base) == (CORRUPT_MESSAGE, -1), i
    assert produce_v3(port, "dmg", 0, good, 200) == (0, 0)  # nothing was stored before
    got = read(kafka_server.bootstrap, "dmg", 1, 20)
    assert [m.value() for m in got] == [b"value-%d" % i for i in range(20)]
    r = httpx.get(kafka_server.url + "/v1/topics/dmg/partitions/0/messages", params={"offset": 0, "max": 100},
                  timeout=30)
    assert r.status_code == 200 and len(r.json()["messages"]) == 20, r.text
