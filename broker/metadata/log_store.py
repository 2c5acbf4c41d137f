"""The metadata log table on SQLite (embedded) or PostgreSQL (shared by several brokers).

One table, `meta_log(log_offset, record)`: every metadata change is a JSON record appended there.
`locked()` opens a transaction holding the log's write lock (SQLite `BEGIN IMMEDIATE`, PostgreSQL
`LOCK TABLE ... IN EXCLUSIVE MODE`), so a writer first catches up with every record, checks its request
against the caught-up image and appends, all in one transaction: two brokers can never both pass a check.
Plain reads (`read_since`) take no lock.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

from storage_tier.store_url import sqlite_path

Record = dict[str, Any]
LogEntry = tuple[int, Record]

_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


class LockedLog(Protocol):
    def read_since(self, offset: int) -> list[LogEntry]: ...

    def append(self, first_offset: int, records: list[Record]) -> None: ...


class LogStore(Protocol):
    url: str

    def read_since(self, offset: int) -> list[LogEntry]: ...

    def locked(self) -> Any: ...  # context manager yielding a LockedLog

    def close(self) -> None: ...


def _dump(rec: Record) -> str:
    return json.dumps(rec, separators=(",", ":"), sort_keys=True)


class SqliteLog:
    def __init__(self, url: str, path: str) -> None:
        self.url = url
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute("CREATE TABLE IF NOT EXISTS meta_log (log_offset INTEGER PRIMARY KEY, record TEXT NOT NULL)")

    def read_since(self, offset: int) -> list[LogEntry]:
        with self._lock:
            rows = self._conn.execute("SELECT log_offset, record FROM meta_log WHERE log_offset > ? "
                                      "ORDER BY log_offset", (offset,)).fetchall()
        return [(int(o), json.loads(r)) for o, r in rows]

    @contextmanager
    def locked(self) -> Iterator[LockedLog]:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield _SqliteTxn(self._conn)
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def close(self) -> None:
        self._conn.close()


class _SqliteTxn:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def read_since(self, offset: int) -> list[LogEntry]:
        rows = self.conn.execute("SELECT log_offset, record FROM meta_log WHERE log_offset > ? ORDER BY log_offset",
                                 (offset,)).fetchall()
        return [(int(o), json.loads(r)) for o, r in rows]

    def append(self, first_offset: int, records: list[Record]) -> None:
        self.conn.executemany("INSERT INTO meta_log (log_offset, record) VALUES (?, ?)",
                              [(first_offset + i, _dump(r)) for i, r in enumerate(records)])


class PostgresLog:
    def __init__(self, url: str, dsn: str, schema: str | None) -> None:
        import psycopg

        self.url = url
        self._lock = threading.Lock()
        self._conn = psycopg.connect(dsn, autocommit=True)
        if schema is not None:
            if not _SCHEMA_NAME.match(schema):
                raise ValueError(f"{url}: schema {schema!r} must be a plain SQL identifier")
            self._conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            self._conn.execute(f'SET search_path TO "{schema}"')
        self._conn.execute("CREATE TABLE IF NOT EXISTS meta_log (log_offset BIGINT PRIMARY KEY, record TEXT NOT NULL)")

    def read_since(self, offset: int) -> list[LogEntry]:
        with self._lock:
            rows = self._conn.execute("SELECT log_offset, record FROM meta_log WHERE log_offset > %s "
                                      "ORDER BY log_offset", (offset,)).fetchall()
        return [(int(o), json.loads(r)) for o, r in rows]

    @contextmanager
    def locked(self) -> Iterator[LockedLog]:
        with self._lock, self._conn.transaction():
            self._conn.execute("LOCK TABLE meta_log IN EXCLUSIVE MODE")
            yield _PostgresTxn(self._conn)

    def close(self) -> None:
        self._conn.close()


class _PostgresTxn:
    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def read_since(self, offset: int) -> list[LogEntry]:
        rows = self.conn.execute("SELECT log_offset, record FROM meta_log WHERE log_offset > %s ORDER BY log_offset",
                                 (offset,)).fetchall()
        return [(int(o), json.loads(r)) for o, r in rows]

    def append(self, first_offset: int, records: list[Record]) -> None:
        with self.conn.cursor() as cur:
            cur.executemany("INSERT INTO meta_log (log_offset, record) VALUES (%s, %s)",
                            [(first_offset + i, _dump(r)) for i, r in enumerate(records)])


def open_log(url: str) -> SqliteLog | PostgresLog:
    """`sqlite:///path/meta.db` or `postgresql://user@host:port/db?schema=name`."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "sqlite":
        return SqliteLog(url, sqlite_path(url))
    if scheme in ("postgresql", "postgres"):
        params = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        schema = params.pop("schema", None)
        dsn = urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(params), ""))
        return PostgresLog(url, dsn, schema)
    raise ValueError(f"unsupported metadata URL {url!r}: use sqlite:///path or postgresql://user@host:port/db?schema=s")
