"""A node whose PostgreSQL metadata connections are lost serves again once the database answers, without a restart
(new-user walkthrough: after `pg_terminate_backend` of its connections, or a 1-second network cut, every lookup,
topic list and produce answered 500 OperationalError until the node was restarted, /healthz/ready said ok, a
traceback was logged per request and SIGTERM ended with "error: the connection is closed").

Real `mqindex serve` processes on a PostgreSQL database of the test's own, so that the test can make that database
refuse connections (`ALTER DATABASE ... ALLOW_CONNECTIONS false`) and end its node's connections
(`pg_terminate_backend`) without touching any other test's: while it refuses, requests that need the metadata
answer 503 naming the metadata database and /healthz/ready says not ready naming it; once it accepts again, every
request is served with nothing lost. Every wait is on a condition with a bound."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
from confluent_kafka.admin import AdminClient

from storage_tier.seaweedfs_server import SeaweedFS
from tests.api.server import ServerProcess, free_port, wait_for
from tests.kafka.proxy import CuttingProxy

TOPIC = "p1"
LEASE_MS = 3000


def _admin(dsn: str, sql: str) -> int:
    import psycopg

    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        cur = conn.execute(sql)
        row = cur.fetchone() if cur.description is not None else None
    return int(row[0]) if row is not None and row[0] is not None else 0


class OwnDatabase:
    """A database only this test uses: `refuse()` makes it refuse new connections and ends those it has."""

    def __init__(self, pg_dsn: str) -> None:
        self.admin = pg_dsn
        self.name = f"mqt_reconnect_{uuid.uuid4().hex[:10]}"
        parts = urlsplit(pg_dsn)
        self.dsn = urlunsplit(("postgresql", parts.netloc, f"/{self.name}", "", ""))

    def terminate(self) -> int:
        """End every connection to the database (the server's answer to a restart, a failover, an operator)."""
        return _admin(self.admin, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                  f"WHERE datname = '{self.name}'")

    def connections(self) -> int:
        return _admin(self.admin, f"SELECT count(*) FROM pg_stat_activity WHERE datname = '{self.name}'")

    def refuse(self) -> None:
        _admin(self.admin, f'ALTER DATABASE "{self.name}" ALLOW_CONNECTIONS false')
        self.terminate()

    def accept(self) -> None:
        _admin(self.admin, f'ALTER DATABASE "{self.name}" ALLOW_CONNECTIONS true')


@pytest.fixture
def own_db(pg_dsn: str) -> Iterator[OwnDatabase]:
    db = OwnDatabase(pg_dsn)
    _admin(pg_dsn, f'CREATE DATABASE "{db.name}"')
    try:
        yield db
    finally:
        db.accept()
        _admin(pg_dsn, f'DROP DATABASE "{db.name}" WITH (FORCE)')


def _server(tmp_path: Path, db: OwnDatabase, kafka_port: int | None = None, dsn: str | None = None) -> ServerProcess:
    kafka = f"127.0.0.1:{kafka_port}" if kafka_port is not None else ""
    return ServerProcess(tmp_path / "data", "--metadata", f"{dsn or db.dsn}?schema=m", "--lease-ms", str(LEASE_MS),
                         "--kafka-listener", kafka)


def _produce(c: httpx.Client, key: str) -> httpx.Response:
    return c.post(f"/v1/topics/{TOPIC}/messages", json={"messages": [{"key": key, "value": f"v-{key}"}]})


def _keys(c: httpx.Client) -> list[str] | None:
    """The keys of every message of the topic (None: not answered 200)."""
    r = c.get(f"/v1/topics/{TOPIC}/partitions/0/messages", params={"offset": 0, "max": 1000})
    if r.status_code != 200:
        return None
    return [m["key"] for m in r.json()["messages"]]


def _served(c: httpx.Client, key: str, produced: list[str]) -> bool:
    """A lookup of `key`, a produce and a topic list all answer 200 (the produce's key added to `produced`)."""
    lookup = c.get("/v1/messages", params={"topic": TOPIC, "key": key})
    if lookup.status_code != 200 or [m["key"] for m in lookup.json()["messages"]] != [key]:
        return False
    if c.get("/v1/topics").status_code != 200:
        return False
    new = f"after-{len(produced)}"
    if _produce(c, new).status_code != 200:
        return False
    produced.append(new)
    return True


def _ready(c: httpx.Client) -> httpx.Response:
    return c.get("/healthz/ready")


def test_a_node_serves_again_after_its_metadata_connections_are_terminated(tmp_path: Path,
                                                                              own_db: OwnDatabase) -> None:
    server = _server(tmp_path, own_db).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            assert c.post("/v1/topics", json={"name": TOPIC, "partitions": 1}).status_code == 201
            assert _produce(c, "before").status_code == 200
            produced = ["before"]
            for _round in range(3):  # each time every connection of the node is ended under it
                assert own_db.terminate() >= 1
                before = len(produced)
                wait_for("lookup, produce and topic list served after the connections ended",
                         lambda: _served(c, "before", produced), timeout=30, interval=0.2)
                assert len(produced) == before + 1
            assert own_db.connections() >= 1  # reconnected
            assert _ready(c).status_code == 200
            assert _keys(c) == produced
        assert server.stop() == 0
        log = server.log.read_text()
        assert "Traceback" not in log and "OperationalError" not in log, log[-3000:]
        server.port = free_port()
        server.start()
        with httpx.Client(base_url=server.url, timeout=30) as c:
            assert _keys(c) == produced  # nothing lost
    finally:
        server.stop()


def test_while_the_metadata_database_refuses_requests_answer_503_naming_it_and_it_recovers(
        tmp_path: Path, own_db: OwnDatabase, kafka_clients: contextlib.ExitStack) -> None:
    kafka_port = free_port()
    server = _server(tmp_path, own_db, kafka_port).start()
    admin = kafka_clients.enter_context(AdminClient({"bootstrap.servers": f"127.0.0.1:{kafka_port}",
                                                     "log_level": 0}))
    try:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            assert c.post("/v1/topics", json={"name": TOPIC, "partitions": 1}).status_code == 201
            assert _produce(c, "before").status_code == 200
            acknowledged = ["before"]
            assert TOPIC in admin.list_topics(timeout=10).topics
            log_at = server.log.stat().st_size

            own_db.refuse()
            wait_for("/healthz/ready names the metadata database",
                     lambda: _ready(c).status_code == 503
                     and "metadata database (--metadata) does not answer" in _ready(c).json()["status"],
                     timeout=30)
            assert _ready(c).headers.get("Retry-After") == "2"
            for r in (c.get("/v1/topics"), c.get("/v1/messages", params={"topic": TOPIC, "key": "before"})):
                assert r.status_code == 503, r.text
                assert r.json()["error"].startswith("the metadata database (--metadata) does not answer"), r.text
                assert r.headers.get("Retry-After") == "2", r.headers  # every 503, whichever way it is answered

            # acknowledged while the node surely holds its lease, refused once it may have lost it (not a 500); a
            # produce whose lease lapsed while it was written is refused saying its messages may be kept
            written: list[str] = []

            def refused() -> bool:
                key = f"during-{len(acknowledged) + len(written)}"
                r = _produce(c, key)
                assert r.status_code in (200, 503), r.text
                if r.status_code == 200:
                    acknowledged.append(key)
                else:
                    assert r.headers.get("Retry-After"), r.headers
                    if "written before it lapsed and are not acknowledged" in r.json()["error"]:
                        written.append(key)
                return r.status_code == 503

            wait_for("produce refused while the lease cannot be renewed", refused, timeout=LEASE_MS / 1000 + 30)
            # a Kafka client's metadata request is answered (with the nodes and topics last read), not a closed
            # connection
            assert TOPIC in admin.list_topics(timeout=10).topics

            own_db.accept()
            wait_for("ready again", lambda: _ready(c).status_code == 200, timeout=30)
            produced = list(acknowledged)
            wait_for("lookup, produce and topic list served again", lambda: _served(c, "before", produced),
                     timeout=LEASE_MS / 1000 + 30, interval=0.2)
            kept = _keys(c)
            assert kept is not None and [k for k in kept if k not in written] == produced, (kept, produced, written)

            outage = server.log.read_bytes()[log_at:].decode()
            assert "Traceback" not in outage and "kafka request failed" not in outage, outage[-3000:]
            assert outage.count("the metadata database does not answer") <= 10, outage[-3000:]

            # stopped while the database refuses: a clean exit; the WAL keeps what was not uploaded
            own_db.refuse()
            wait_for("not ready", lambda: _ready(c).status_code == 503, timeout=30)
        assert server.stop() == 0
        assert "mqindex serve: error" not in server.log.read_text()
        own_db.accept()
        server.port = free_port()
        server.start()
        with httpx.Client(base_url=server.url, timeout=30) as c:
            # what was read before the stop: the acknowledged records in order, among them those of a produce refused
            # as written while the lease lapsed, if the node kept them (it renewed its lease)
            try:
                wait_for("every record read before the stop read after the restart", lambda: _keys(c) == kept,
                         timeout=30)
            except AssertionError as exc:
                raise AssertionError(f"{exc}: read {_keys(c)}, before {kept}, written {written}") from None
    finally:
        server.stop()


def test_a_network_cut_under_requests_in_flight_is_answered_and_healed(tmp_path: Path, own_db: OwnDatabase) -> None:
    """The node reaches PostgreSQL through a TCP proxy that stops relaying the database's answers for a second (the
    node's statements hang, as on a cut network) and then closes every connection: requests in flight meanwhile are
    answered 200 or 503 (never a 500), and the node serves again on new connections."""
    parts = urlsplit(own_db.dsn)
    host, _, port = parts.netloc.rpartition("@")[2].partition(":")
    proxy = CuttingProxy((host, int(port or 5432)), itertools.repeat(None))
    user = parts.netloc.rpartition("@")[0]
    dsn = urlunsplit(("postgresql", f"{user}@{proxy.address}", parts.path, "", ""))
    server = _server(tmp_path, own_db, dsn=dsn).start()
    statuses: list[int] = []
    try:
        with httpx.Client(base_url=server.url, timeout=60) as c:
            assert c.post("/v1/topics", json={"name": TOPIC, "partitions": 1}).status_code == 201
            assert _produce(c, "before").status_code == 200
            acknowledged = ["before"]
            stop = threading.Event()

            def traffic() -> None:  # lookups and topic lists while the network is cut
                with httpx.Client(base_url=server.url, timeout=60) as t:
                    while not stop.is_set():
                        statuses.append(t.get("/v1/topics").status_code)
                        statuses.append(t.get("/v1/messages", params={"topic": TOPIC, "key": "before"}).status_code)

            worker = threading.Thread(target=traffic)
            worker.start()
            try:
                wait_for("traffic under way", lambda: len(statuses) >= 4, timeout=30)
                proxy.hold()
                time.sleep(1)  # the cut's length: the walkthrough's 1-second network cut
                proxy.cut_all()
                wait_for("requests answered after the cut", lambda: len(statuses) >= 40, timeout=60)
            finally:
                stop.set()
                worker.join(60)
            assert set(statuses) <= {200, 503}, statuses
            produced = list(acknowledged)
            wait_for("lookup, produce and topic list served after the cut", lambda: _served(c, "before", produced),
                     timeout=LEASE_MS / 1000 + 30, interval=0.2)
            assert _keys(c) == produced
            assert _ready(c).status_code == 200
        assert server.stop() == 0
        assert "Traceback" not in server.log.read_text(), server.log.read_text()[-3000:]
    finally:
        server.stop()
        proxy.close()


def test_a_metadata_outage_shorter_than_the_lease_fails_no_group_commit_of_the_shared_wal(
        tmp_path: Path, own_db: OwnDatabase, seaweedfs: SeaweedFS) -> None:
    """With the WAL on the object store (`--wal s3://...`), a group commit is stored, then this node asks the metadata
    whether it is still the current incarnation before acknowledging it. That question met the outage and failed
    the WAL for good (every later produce refused, /healthz/live 503) although the lease still held; it is now
    asked again until the database answers, within the lease."""
    prefix = f"shared-wal-{uuid.uuid4().hex[:8]}"
    server = ServerProcess(tmp_path / "data", "--metadata", f"{own_db.dsn}?schema=m", "--lease-ms", "20000",
                           "--kafka-listener", "", "--store", seaweedfs.store_url("mqindex", prefix),
                           "--wal", seaweedfs.store_url("mqindex", prefix + "-wal")).start()
    try:
        with httpx.Client(base_url=server.url, timeout=60) as c:
            assert c.post("/v1/topics", json={"name": TOPIC, "partitions": 1}).status_code == 201
            assert _produce(c, "before").status_code == 200
            own_db.refuse()
            wait_for("the node sees the outage", lambda: _ready(c).status_code == 503, timeout=30, interval=0.2)
            answers: list[int] = []
            during = threading.Thread(target=lambda: answers.append(_produce(c, "during").status_code))
            during.start()  # stored in the WAL, then its acknowledgement waits for the metadata's answer
            try:
                during.join(2)
                assert during.is_alive(), f"the produce during the outage answered {answers} at once"
            finally:
                own_db.accept()
                during.join(60)
            assert answers == [200], answers
            produced = ["before", "during"]
            wait_for("lookup, produce and topic list served after the outage",
                     lambda: _served(c, "before", produced), timeout=30, interval=0.2)
            assert c.get("/healthz/live").status_code == 200
            assert _keys(c) == produced
        assert server.stop() == 0
    finally:
        server.stop()
