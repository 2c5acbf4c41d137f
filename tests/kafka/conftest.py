"""A real `mqindex serve` process with its Kafka listener on a free port (tests/api/server.py's ServerProcess)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

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
