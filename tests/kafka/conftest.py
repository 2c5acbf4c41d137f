"""A real `mqindex serve` process with its Kafka listener on a free port (tests/api/server.py's ServerProcess)."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.server import ServerProcess, free_port


class KafkaServerProcess(ServerProcess):
    def __init__(self, data_dir: Path, *extra: str, env: dict[str, str] | None = None) -> None:
        self.kafka_port = free_port()
        super().__init__(data_dir, "--kafka-listener", f"127.0.0.1:{self.kafka_port}", "--upload-interval-s", "0.5",
                         *extra, env=env)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"


@pytest.fixture
def kafka_server(tmp_path: Path) -> Iterator[KafkaServerProcess]:
    server = KafkaServerProcess(tmp_path / "node").start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def kafka_nodes(base: Path, count: int, topics: dict[str, int], *flags: str) -> Iterator[list[KafkaServerProcess]]:
    """`count` nodes (node ids 0..count-1, data dirs base/node<i>) started with `flags` (store, WAL, metadata,
    lease), seeing each other, with `topics` (name -> partitions) created through CreateTopics; every node still
    running is killed (SIGKILL) at the end, also when the start fails."""
    from api.kafka import errors
    from tests.api.server import wait_for
    from tests.kafka.wire import Wire

    made: list[KafkaServerProcess] = []
    try:
        for i in range(count):
            made.append(KafkaServerProcess(base / f"node{i}", *flags, "--node-id", str(i)))
            made[-1].start()
        with Wire(made[0].kafka_port) as w:
            wait_for(f"the {count} nodes see each other", lambda: len(w.call((3, 1), topics=[]).brokers) == count,
                     timeout=30)
            made_topics = w.call((19, 7), topics=[dict(name=n, num_partitions=k, replication_factor=1, assignments=[],
                                                       configs=[]) for n, k in topics.items()],
                                 timeout_ms=30_000, validate_only=False)
            assert all(t.error_code == errors.NONE for t in made_topics.topics), made_topics
        yield made
    finally:
        for s in made:
            if s.proc is not None and s.proc.poll() is None:
                s.stop(signal.SIGKILL)


def read_until_quiet(bootstrap: str, partitions: list[tuple[str, int]], expect: int, timeout: float = 60,
                     isolation: str = "read_uncommitted") -> list[Any]:
    """Every message of `partitions` (topic, partition) from offset 0 (confluent-kafka Messages), read until
    `expect` are in and one more second passes without another; fewer if `timeout` runs out first."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "isolation.level": isolation})
    try:
        c.assign([TopicPartition(t, p, 0) for t, p in partitions])
        out: list[Any] = []
        deadline, quiet_until = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                if len(out) >= expect:
                    quiet_until = quiet_until or time.monotonic() + 1.0
                    if time.monotonic() >= quiet_until:
                        break
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(m.error())
            out.append(m)
            quiet_until = None
        return out
    finally:
        c.close()
