"""An in-process app over a real BrokerNode (local-disk objects, SQLite metadata) for request-level tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.config import Settings
from api.http.app import app_for_node
from broker.node import BrokerNode


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
