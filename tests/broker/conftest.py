"""Fixtures of the broker tests: metadata URLs on SQLite and on the real PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from api.config import Settings
from broker.node import BrokerNode


@pytest.fixture(params=["sqlite", "postgresql"])
def meta_url_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], str]:
    """A function returning the URL of one fresh metadata database of the parametrized kind.

    Calling it again gives the same database (several brokers share it)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/meta.sqlite"
    else:
        dsn = request.getfixturevalue("pg_dsn")
        schema = request.getfixturevalue("pg_schema_factory")()
        url = f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"
    return lambda: url


@pytest.fixture
def local_node(tmp_path: Path) -> Iterator[BrokerNode]:
    """A broker node on the embedded defaults (local object store, SQLite metadata) under `tmp_path`, closed
    after the test."""
    s = Settings(data_dir=str(tmp_path / "data")).resolved()
    n = BrokerNode.open(s.data_dir, s.store, s.metadata)
    yield n
    n.close()
