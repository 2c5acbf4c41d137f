"""A Kafka connection speaking raw requests (the schema classes of api/kafka/schemas.py) to a real listener, for
tests that need exact error codes or a request left waiting (a JoinGroup) while others go on elsewhere."""

from __future__ import annotations

import socket
import struct
from collections import deque
from typing import Any

from api.kafka.framing import read_unsigned_varint
from api.kafka.schemas import APIS, build

# the versions the group tests speak: recent enough for every field they use
JOIN, SYNC, HEARTBEAT, LEAVE, COMMIT, FETCH_OFFSETS = (11, 5), (14, 3), (12, 3), (13, 3), (8, 7), (9, 5)


class Wire:
    """One connection. `send` queues a request without waiting for its answer; `recv` reads the answers in the
    order the requests were sent (the listener answers a connection's requests in order). Every read is
    bounded by `timeout` seconds: an answer that never comes fails the test instead of hanging it."""

    def __init__(self, port: int, timeout: float = 20.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.correlation = 0
        self.waiting: deque[tuple[int, int, int]] = deque()

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Wire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, api: tuple[int, int], **fields: Any) -> None:
        api_key, version = api
        self.correlation += 1
        req = build(APIS[api_key].request, version, **{k: v for k, v in fields.items() if v is not None})
        for k, v in fields.items():
            if v is None:  # a null field (build() wants a value for arrays): set on the built request
                setattr(req, k, None)
        req.with_header(correlation_id=self.correlation, client_id="wire-test")
        body = bytes(req.encode(header=True))
        self.sock.sendall(struct.pack(">i", len(body)) + body)
        self.waiting.append((api_key, version, self.correlation))

    def recv(self) -> Any:
        api_key, version, correlation = self.waiting.popleft()
        size, got = struct.unpack(">ii", self._exact(8))
        assert got == correlation, f"answer {got} while waiting for {correlation}"
        body = self._exact(size - 4)
        if APIS[api_key].flexible(version) and api_key != 18:  # response header v1: its tagged fields
            tags, pos = read_unsigned_varint(body, 0)
            for _ in range(tags):
                _, pos = read_unsigned_varint(body, pos)
                n, pos = read_unsigned_varint(body, pos)
                pos += n
            body = body[pos:]
        return APIS[api_key].response.decode(body, version=version)

    def call(self, api: tuple[int, int], **fields: Any) -> Any:
        self.send(api, **fields)
        return self.recv()

    def raw(self, token: bytes) -> bytes:
        """A raw SASL token (after SaslHandshake v0) and the server's raw answer."""
        self.sock.sendall(struct.pack(">i", len(token)) + token)
        (size,) = struct.unpack(">i", self._exact(4))
        return self._exact(size)

    def _exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            try:
                chunk = self.sock.recv(n - len(out))
            except TimeoutError:
                raise AssertionError(f"no answer from the listener within {self.sock.gettimeout()} s") from None
            assert chunk, f"connection closed after {len(out)} of {n} bytes"
            out += chunk
        return bytes(out)

    # -- the group requests, with what the tests vary ---------------------------------------------
    def send_join(self, group: str, member_id: str = "", session_timeout_ms: int = 30_000,
                  rebalance_timeout_ms: int = 60_000) -> None:
        self.send(JOIN, group_id=group, session_timeout_ms=session_timeout_ms,
                  rebalance_timeout_ms=rebalance_timeout_ms, member_id=member_id, group_instance_id=None,
                  protocol_type="consumer", protocols=[dict(name="range", metadata=b"m")])

    def join(self, group: str, member_id: str = "", **kw: int) -> Any:
        self.send_join(group, member_id, **kw)
        return self.recv()

    def send_sync(self, group: str, generation: int, member_id: str,
                  assignments: dict[str, bytes] | None = None) -> None:
        self.send(SYNC, group_id=group, generation_id=generation, member_id=member_id, group_instance_id=None,
                  assignments=[dict(member_id=m, assignment=a) for m, a in (assignments or {}).items()])

    def sync(self, group: str, generation: int, member_id: str, assignments: dict[str, bytes] | None = None) -> Any:
        self.send_sync(group, generation, member_id, assignments)
        return self.recv()

    def heartbeat(self, group: str, generation: int, member_id: str) -> int:
        return int(self.call(HEARTBEAT, group_id=group, generation_id=generation, member_id=member_id,
                             group_instance_id=None).error_code)

    def leave(self, group: str, member_id: str) -> Any:
        return self.call(LEAVE, group_id=group, members=[dict(member_id=member_id, group_instance_id=None)])

    def commit(self, group: str, generation: int, member_id: str, offsets: dict[tuple[str, int], int]) -> list[int]:
        """OffsetCommit; the error code of each partition, in the order given."""
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, part), off in offsets.items():
            by_topic.setdefault(topic, []).append(dict(partition_index=part, committed_offset=off,
                                                       committed_leader_epoch=-1, committed_metadata=""))
        resp = self.call(COMMIT, group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
                         group_instance_id=None, topics=[dict(name=t, partitions=ps) for t, ps in by_topic.items()])
        return [p.error_code for t in resp.topics for p in t.partitions]

    def committed(self, group: str, topic: str, partitions: list[int]) -> Any:
        return self.call(FETCH_OFFSETS, group_id=group, topics=[dict(name=topic, partition_indexes=partitions)])
