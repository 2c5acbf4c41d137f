"""Node leases: which broker nodes are alive, where to reach them, until when.

One row per node in `node_leases` beside the metadata log (same database): node id, node epoch, advertised
HTTP and Kafka addresses, lease expiry and state (`alive` or `shut_down`). Heartbeats update the row in
place instead of appending to the metadata log, so a cluster's idle heartbeats do not grow the log.
`expires_ms` is written with the database server's clock (PostgreSQL `clock_timestamp()`, SQLite `julianday`)
and `nodes()` states each row as that clock sees it. That verdict does not survive a step of the database
host's clock (a forward step makes every lease look expired at once, a backward one keeps a dead node alive
for the length of the step), so the nodes do not fail a node over on it: they watch each row's version (its
epoch, `expires_ms` and stored state, which change with every renewal whatever the clock did) over their own
monotonic clock, and a lease is expired when its row has not changed for a whole lease (cluster/membership.py,
LeaseObserver). `expire` and `fence` store the state `expired`, which holds whatever the clocks say.

`software` says what the node's incarnation can read (JSON {"v": 1, "epoch", "version", "reads": [...]}; a
row registered by a version without that column, 0.3.0, has none): during a rolling upgrade the new nodes
write a format only once every live node announces it reads it (cluster/membership.py). The column was added
after 0.3.0 (`ALTER TABLE ... ADD COLUMN`); 0.3.0 nodes name their columns, so they neither see nor clear it,
which is why the announcement carries the epoch it was made at: a row re-registered by an older version
(a new epoch) has no valid announcement.

The table's schema version is recorded as `node_leases` in `mqindex_schema` (see pg_schema.Family): a table
stored at a newer version than this build reads raises `NewerSchema` at open.

A heartbeat only succeeds for the row's current epoch, on a row not expired: a node whose id re-registered with
a newer epoch (a new incarnation), or whose row a survivor expired to fail it over (`expire_if`, `fence`), learns
from its failed heartbeat that it is fenced.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from dataclasses import dataclass
from typing import Any

from broker.metadata import pg_schema

ALIVE = "alive"
EXPIRED = "expired"
SHUT_DOWN = "shut_down"

_PG_NOW = "(extract(epoch from clock_timestamp()) * 1000)::bigint"
_SQLITE_NOW = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"
_CREATE = ("CREATE TABLE IF NOT EXISTS node_leases (node_id BIGINT PRIMARY KEY, epoch BIGINT NOT NULL, "
           "http TEXT, kafka TEXT, expires_ms BIGINT NOT NULL, state TEXT NOT NULL, software TEXT)")
_ADD_SOFTWARE_PG = "ALTER TABLE node_leases ADD COLUMN IF NOT EXISTS software TEXT"
SCHEMA = pg_schema.Family("node_leases", ("node_leases",), 1)


@dataclass(frozen=True)
class NodeLease:
    node_id: int
    epoch: int
    http: str | None
    kafka: str | None
    expires_ms: int
    state: str  # alive, expired, shut_down (as the database's clock sees it at `now_ms`)
    now_ms: int
    #: the stored state ended the lease (shut down, or expired by `expire`/`fence`): no clock needed to tell
    ended: bool = False
    #: what the incarnation announced it reads (None: nothing valid announced, e.g. a 0.3.0 node)
    software: dict[str, Any] | None = None

    def reads(self, what: str) -> bool:
        """Whether this incarnation announced that it reads `what` (a format, e.g. "stream_record_0x23")."""
        return self.software is not None and what in self.software.get("reads", ())

    @property
    def version(self) -> tuple[int, int, bool]:
        """Changes with every renewal (the database clock's `expires_ms` differs from one to the next even when
        that clock stepped), with a new epoch and when the lease is ended."""
        return (self.epoch, self.expires_ms, self.ended)

    def as_dict(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "epoch": self.epoch, "http": self.http, "kafka": self.kafka,
                "lease_expires_ms": self.expires_ms, "state": self.state,
                "version": None if self.software is None else self.software.get("version")}


def announcement(raw: str | None, epoch: int) -> dict[str, Any] | None:
    """A row's `software` if it is a version 1 announcement made at the row's epoch, else None (none made, one
    left by an earlier incarnation, or one of a format this version does not know: read as announcing nothing)."""
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("v") != 1 or doc.get("epoch") != epoch:
        return None
    return doc


class _Fetched:
    """A statement's result read at once: its rows and row count."""

    def __init__(self, cur: Any) -> None:
        self.rowcount = cur.rowcount
        self._rows = cur.fetchall() if cur.description is not None else []

    def fetchall(self) -> list[Any]:
        return self._rows


class LeaseTable:
    def __init__(self, url: str) -> None:
        self.url = url
        self._lock = threading.Lock()
        self._db, self._pg, schema = pg_schema.open_link(url)  # sqlite3 connection, or a PgLink that reconnects
        self._now, self._p = (_PG_NOW, "%s") if self._pg else (_SQLITE_NOW, "?")
        try:
            if self._pg:
                pg_schema.prepare(self._db.first, url, schema, SCHEMA, [_CREATE, _ADD_SOFTWARE_PG])
            else:
                pg_schema.sqlite_prepare(self._db, url, SCHEMA, [_CREATE])
                columns = {row[1] for row in self._sql("PRAGMA table_info(node_leases)").fetchall()}
                if "software" not in columns:  # a table made by 0.3.0
                    with contextlib.suppress(sqlite3.OperationalError):  # another node added it meanwhile
                        self._sql("ALTER TABLE node_leases ADD COLUMN software TEXT")
        except BaseException:
            self._db.close()
            raise

    def _sql(self, sql: str, args: tuple[Any, ...] = (), retry: bool = True) -> Any:
        """Run one statement; its rows are fetched now (`fetchall()` and `rowcount` of the result stay valid after a
        reconnect). On PostgreSQL a lost connection is replaced (PgLink) and, with `retry` (an idempotent
        statement), the statement run once more on the new one; else MetadataUnavailable."""
        with self._lock:
            if not self._pg:
                return self._db.execute(sql.replace("?", self._p), args)
            return self._db.run(lambda conn: _Fetched(conn.execute(sql.replace("?", self._p), args)), retry=retry)

    def unavailable(self) -> str | None:
        """Why the metadata database does not answer (None: it answers, or it is embedded SQLite)."""
        if not self._pg or self._db.down is None:
            return None
        with self._lock:
            return self._db.probe()  # type: ignore[no-any-return]

    def register(self, node_id: int, epoch: int, http: str | None, kafka: str | None, lease_ms: int,
                 software: dict[str, Any] | None = None) -> None:
        """Insert or take over the node's row at `epoch` (a newer incarnation replaces an older one), with what
        this incarnation reads (`software`, stored with `epoch`)."""
        announced = None if software is None else json.dumps({"v": 1, **software, "epoch": epoch}, sort_keys=True)
        self._sql(f"INSERT INTO node_leases (node_id, epoch, http, kafka, expires_ms, state, software) "
                  f"VALUES (?, ?, ?, ?, {self._now} + ?, 'alive', ?) ON CONFLICT (node_id) DO UPDATE SET "
                  f"epoch = excluded.epoch, http = excluded.http, kafka = excluded.kafka, "
                  f"expires_ms = excluded.expires_ms, state = 'alive', software = excluded.software "
                  f"WHERE node_leases.epoch <= excluded.epoch",
                  (node_id, epoch, http, kafka, lease_ms, announced))

    def heartbeat(self, node_id: int, epoch: int, lease_ms: int) -> bool:
        """Extend the lease; False when the row belongs to a newer epoch (this incarnation is fenced)."""
        cur = self._sql(f"UPDATE node_leases SET expires_ms = {self._now} + ?, state = 'alive' "
                        f"WHERE node_id = ? AND epoch = ? AND state <> 'expired'", (lease_ms, node_id, epoch))
        return bool(cur.rowcount)

    def expire_if(self, node_id: int, epoch: int, expires_ms: int) -> bool:
        """End the lease now if its row is still the version a survivor judged expired (`epoch`, `expires_ms`,
        alive): False when the node renewed since. An expired row is never renewed (`heartbeat`), so a renewal
        either lands before this (and the survivor leaves the node alone) or fails after it (the node learns it is
        fenced): never a node renewing while another takes its partitions over."""
        cur = self._sql(f"UPDATE node_leases SET expires_ms = {self._now} - 1, state = 'expired' "
                        f"WHERE node_id = ? AND epoch = ? AND expires_ms = ? AND state = 'alive'",
                        (node_id, epoch, expires_ms), retry=False)  # a second run would find it expired
        return bool(cur.rowcount)

    def shut_down(self, node_id: int, epoch: int) -> None:
        self._sql("UPDATE node_leases SET state = 'shut_down' WHERE node_id = ? AND epoch = ?", (node_id, epoch))

    def expire(self, node_id: int, epoch: int) -> None:
        """End a lease now (a node fenced by the others, or a test)."""
        self._sql(f"UPDATE node_leases SET expires_ms = {self._now} - 1, state = 'expired' "
                  f"WHERE node_id = ? AND epoch = ?", (node_id, epoch))

    def fence(self, node_id: int, new_epoch: int) -> None:
        """A survivor fenced the node: the row moves to the new epoch, expired, so the fenced incarnation's
        heartbeats fail; a restart of the node registers a still newer epoch and takes the row back."""
        self._sql(f"UPDATE node_leases SET epoch = ?, expires_ms = {self._now} - 1, state = 'expired' "
                  f"WHERE node_id = ? AND epoch < ?", (new_epoch, node_id, new_epoch))

    def nodes(self) -> list[NodeLease]:
        rows = self._sql(f"SELECT node_id, epoch, http, kafka, expires_ms, state, {self._now}, software "
                         f"FROM node_leases ORDER BY node_id").fetchall()
        out = []
        for node_id, epoch, http, kafka, expires, state, now, software in rows:
            ended = state in (SHUT_DOWN, EXPIRED)
            shown = state if ended else (ALIVE if int(expires) > int(now) else EXPIRED)
            out.append(NodeLease(int(node_id), int(epoch), http, kafka, int(expires), shown, int(now), ended,
                                 announcement(software, int(epoch))))
        return out

    def alive(self) -> dict[int, NodeLease]:
        return {n.node_id: n for n in self.nodes() if n.state == ALIVE}

    def close(self) -> None:
        with self._lock:
            self._db.close()
