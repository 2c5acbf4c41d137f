"""Fixtures of the broker tests: metadata URLs on SQLite and on the real PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


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
