"""Three `mqindex serve` nodes started at the same moment on a fresh PostgreSQL metadata schema, as a StatefulSet
with parallel pod management or systemd starts them: every node comes up and sees the others alive.

Processes started together still reach their first statement a few hundred milliseconds apart, more than the
race between two `CREATE SCHEMA IF NOT EXISTS` lasts. So that every round races, a session of the test creates the
schema in a transaction it keeps open while the nodes start: each node's first start-up DDL waits behind it, and
once all three are waiting the test rolls back, releasing them at the same instant onto a schema still missing.

A node's start budget is the time it may take to reach its first start-up DDL (three Python processes importing at
once took ~40 s at load 16-22 on the 2-core test machine) plus the time it may take to come up once released: the
hold is the test's own doing, and with one 60 s budget from the start a node held 50 s had 10 s left to come up."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import psycopg

from storage_tier.seaweedfs_server import SeaweedFS
from tests.api.server import ServerProcess
from tests.cluster.harness import Cluster, wait_until

ROUNDS = 1  # the race is forced (all three wait on one held CREATE SCHEMA), so one round shows it
NODES = 3
REACH_S = 150  # bound: every node started reaches its first start-up DDL (and waits there)
UP_S = 60  # bound: a node released from the hold answers /healthz


def _alive(url: str) -> list[int]:
    try:
        body = httpx.get(f"{url}/v1/cluster/nodes", timeout=10).json()
    except httpx.HTTPError:
        return []
    return sorted(n["node_id"] for n in body["nodes"] if n["state"] == "alive")


def _waiting(conn: psycopg.Connection, schema: str) -> int:
    """Sessions of the nodes waiting on a lock at their first start-up DDL (on the schema, or on the lock that
    serializes start-up DDL)."""
    row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND wait_event_type = 'Lock' AND (position(%s in query) > 0 "
                       "OR position('pg_advisory_xact_lock' in query) > 0)", (f'"{schema}"',)).fetchone()
    return int(row[0]) if row else 0


def _one_round(r: int, tmp: Path, store: str, pg_dsn: str, schema: str) -> None:
    meta = f"{pg_dsn}{'&' if '?' in pg_dsn else '?'}schema={schema}"
    tmp.mkdir()
    c = Cluster(tmp, store, meta)
    errors: dict[int, BaseException] = {}

    def start(i: int) -> None:
        try:  # as c.start(i), with the hold added to the start budget
            s = c.nodes[i] = ServerProcess(tmp / f"node{i}", "--store", store, "--metadata", meta,
                                           "--node-id", str(i), "--lease-ms", "3000")
            s.start(timeout=REACH_S + UP_S)  # starts the process, then waits until it answers (fails when it exits)
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors[i] = exc

    threads = [threading.Thread(target=start, args=(i,)) for i in range(NODES)]
    holder = psycopg.connect(pg_dsn)  # not autocommit: the CREATE SCHEMA below stays uncommitted
    watcher = psycopg.connect(pg_dsn, autocommit=True)
    try:
        holder.execute(f'CREATE SCHEMA "{schema}"')
        for t in threads:
            t.start()
        wait_until(lambda: _waiting(watcher, schema) >= NODES or bool(errors), REACH_S,
                   f"round {r}: all {NODES} nodes reach their first start-up DDL")
        holder.rollback()  # every node goes on at once, the schema not there yet
        for t in threads:
            t.join(UP_S + 60)
        assert not any(t.is_alive() for t in threads), "a node neither came up nor exited"
        assert errors == {}, f"round {r}: nodes started at once did not all come up: {errors}"
        for i in range(NODES):
            wait_until(lambda i=i: _alive(c.url(i)) == list(range(NODES)), 30,  # type: ignore[misc]
                       f"round {r}: node {i} sees all {NODES} nodes alive")
    finally:
        holder.rollback()
        holder.close()
        watcher.close()
        for t in threads:
            if t.ident is not None:
                t.join(120)
        c.stop_all()


def test_nodes_started_at_once_on_a_fresh_schema_all_come_up(
        tmp_path: Path, seaweedfs: SeaweedFS, pg_dsn: str, pg_schema_factory: Callable[[], str]) -> None:
    for r in range(ROUNDS):
        _one_round(r, tmp_path / f"round{r}", seaweedfs.store_url("mqindex", f"together-{uuid.uuid4().hex[:8]}"),
                   pg_dsn, pg_schema_factory())
