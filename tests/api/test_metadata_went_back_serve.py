"""A `mqindex serve` whose PostgreSQL metadata database went back (a failover to a standby that had not received
the last commits) stops using it, says so in /healthz/ready and in every 503 that needs it, writes nothing more
into it, and serves again from the database's log as it is once restarted. Every wait is on a condition with a
bound."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import httpx
import psycopg

from tests.api.server import ServerProcess, free_port, wait_for


def _rows(pg_dsn: str, schema: str) -> list[tuple[int, str]]:
    with psycopg.connect(pg_dsn) as conn:
        return [(int(o), str(r)) for o, r in
                conn.execute(f'SELECT log_offset, record FROM "{schema}".meta_log ORDER BY log_offset').fetchall()]


def _topics(c: httpx.Client) -> list[str]:
    r = c.get("/v1/topics")
    assert r.status_code == 200, r.text
    return sorted(t["name"] for t in r.json())


def test_a_node_whose_metadata_database_went_back_stops_and_says_so(tmp_path: Path, pg_dsn: str,
                                                                     pg_url: Callable[[], str]) -> None:
    url = pg_url()
    schema = url.rsplit("schema=", 1)[1]
    server = ServerProcess(tmp_path / "data", "--metadata", url).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            assert c.post("/v1/topics", json={"name": "orders", "partitions": 1}).status_code == 201
            kept = _rows(pg_dsn, schema)[-1][0]
            assert c.post("/v1/topics", json={"name": "payments", "partitions": 1}).status_code == 201
            assert _topics(c) == ["orders", "payments"]
            applied = _rows(pg_dsn, schema)[-1][0]  # the node applied every record up to here
            with psycopg.connect(pg_dsn, autocommit=True) as conn:  # the promoted standby lacks the payments
                conn.execute(f'DELETE FROM "{schema}".meta_log WHERE log_offset > %s', (kept,))

            def not_ready() -> bool:
                r = c.get("/healthz/ready")
                return r.status_code == 503 and "the metadata database went back" in r.json()["status"]

            wait_for("/healthz/ready says the metadata database went back", not_ready, timeout=30)
            status = c.get("/healthz/ready").json()["status"]
            # the node appends nothing once it found the log short: it still ends at `kept`, before what the node
            # applied (`applied`, or a background write of the node's made after it was read here)
            found = re.search(rf"its log ends at offset {kept}, before offset (\d+), the last record this node applied",
                              status)
            assert found is not None and int(found.group(1)) >= applied, status
            lost = _rows(pg_dsn, schema)
            for r in (c.get("/v1/topics"), c.post("/v1/topics/orders/messages",
                                                  json={"messages": [{"key": "k", "value": "v"}]})):
                assert r.status_code == 503, r.text
                assert "the metadata database went back" in r.json()["error"], r.text
                assert r.headers.get("Retry-After"), r.headers
            assert _rows(pg_dsn, schema) == lost  # nothing written into it since
        assert server.stop() == 0
        assert server.log.read_text().count("the metadata database went back: metadata reads and writes stopped") \
            == 1
        server.port = free_port()
        server.start()  # a restart loads the database's log as it is now
        with httpx.Client(base_url=server.url, timeout=30) as c:
            assert c.get("/healthz/ready").status_code == 200
            assert _topics(c) == ["orders"]
            r = c.post("/v1/topics/orders/messages", json={"messages": [{"key": "k", "value": "v"}]})
            assert r.status_code == 200, r.text
    finally:
        server.stop()
