"""Request-level test apps: an in-process app over a real BrokerNode (local-disk objects, SQLite metadata), and
a real `mqindex serve` with an admin and a read-only token for the console tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.config import Settings
from api.http.app import app_for_node
from broker.node import BrokerNode
from tests.api.server import TOKENS, ServerProcess


@pytest.fixture
def make_client(tmp_path: Path) -> Iterator[Callable[..., TestClient]]:
    made: list[tuple[TestClient, BrokerNode]] = []

    def make(tokens: dict[str, list[str]] | None = None) -> TestClient:
        settings = Settings(data_dir=str(tmp_path / f"data{len(made)}"), tokens=tokens or {}).resolved()
        node = BrokerNode.open(settings.data_dir, settings.store, settings.metadata)
        client = TestClient(app_for_node(settings, node))
        made.append((client, node))
        return client

    yield make
    for client, node in made:
        client.close()
        node.close()


@pytest.fixture
def client(make_client: Callable[..., TestClient]) -> TestClient:
    return make_client()


@pytest.fixture(scope="module")
def console_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A real `mqindex serve` with an admin token and a read-only one (server.TOKENS), shared by a module's tests."""
    s = ServerProcess(tmp_path_factory.mktemp("console") / "data", env=TOKENS).start()
    try:
        yield s
    finally:
        s.stop()
